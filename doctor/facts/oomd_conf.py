"""systemd-oomd's own settings: ``/etc/systemd/oomd.conf`` (or the first of /run,
/usr/local/lib and /usr/lib) and the drop-ins of ``oomd.conf.d/`` under each."""

from typing import Dict, List, NamedTuple, Tuple

from strata_doctor.facts.oomd_dump import parse_percent, parse_timespan
from strata_doctor.facts.unitfile import parse_ini
from strata_doctor.root import Root

OOMD_CONF_FILES = ("/etc/systemd/oomd.conf", "/run/systemd/oomd.conf",
                   "/usr/local/lib/systemd/oomd.conf", "/usr/lib/systemd/oomd.conf")
OOMD_CONF_DIRS = ("/etc/systemd/oomd.conf.d", "/run/systemd/oomd.conf.d",
                  "/usr/local/lib/systemd/oomd.conf.d", "/usr/lib/systemd/oomd.conf.d")
DEFAULT_SWAP_LIMIT = 90.0
DEFAULT_PRESSURE_LIMIT = 60.0
DEFAULT_PRESSURE_SECONDS = 30.0


class OomdSettings(NamedTuple):
    """oomd's settings from ``oomd.conf`` and its drop-ins (defaults where unset)."""

    swap_used_limit: float = DEFAULT_SWAP_LIMIT
    """``SwapUsedLimit`` in percent."""
    pressure_limit: float = DEFAULT_PRESSURE_LIMIT
    """``DefaultMemoryPressureLimit`` in percent."""
    pressure_duration: float = DEFAULT_PRESSURE_SECONDS
    """``DefaultMemoryPressureDurationSec`` in seconds."""
    files: Tuple[str, ...] = ()
    """The files read, in order."""


def read_oomd_settings(root: Root) -> OomdSettings:
    """oomd.conf then its drop-ins (in name order, /etc over /run over /usr/lib)."""
    files = oomd_conf_files(root)
    settings = OomdSettings(files=tuple(files))
    for path in files:
        for section, key, value in parse_ini(root.read(path) or ""):
            if section == "OOM":
                settings = _apply(settings, key, value)
    return settings


def oomd_conf_files(root: Root) -> List[str]:
    """The first ``oomd.conf`` there is, then every drop-in by name; a drop-in in /etc
    hides one of the same name in /run or /usr/lib."""
    files: List[str] = []
    for path in OOMD_CONF_FILES:
        if root.read(path) is not None:
            files.append(path)
            break
    dropins: Dict[str, str] = {}
    for directory in reversed(OOMD_CONF_DIRS):
        for name in root.listdir(directory):
            if name.endswith(".conf"):
                dropins[name] = f"{directory}/{name}"
    files.extend(dropins[n] for n in sorted(dropins))
    return files


def _apply(settings: OomdSettings, key: str, value: str) -> OomdSettings:
    """``settings`` with one ``[OOM]`` line applied; a value oomd would refuse changes nothing."""
    if key == "SwapUsedLimit":
        percent = parse_percent(value)
        return settings if percent is None else settings._replace(swap_used_limit=percent)
    if key == "DefaultMemoryPressureLimit":
        percent = parse_percent(value)
        return settings if percent is None else settings._replace(pressure_limit=percent)
    if key == "DefaultMemoryPressureDurationSec":
        duration = parse_timespan(value)
        return settings if duration is None else settings._replace(pressure_duration=duration)
    return settings
