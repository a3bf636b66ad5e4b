"""The configured sysctl settings: what the next boot or ``sysctl --system`` applies, from
the sysctl.d(5) files and ``/etc/sysctl.conf``, so that a setting written but not yet in
effect can be told apart from no setting at all.

Parsers are pure functions on strings; :func:`read_sysctl_config` takes a
:class:`~strata_doctor.root.Root`.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import parse_int
from strata_doctor.root import Root

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d",
               "/lib/sysctl.d")
"""sysctl.d(5) directories, most important first: a file in /etc hides one of the same name
in /run or /usr/lib."""


SYSCTL_CONF = "/etc/sysctl.conf"


def parse_sysctl_conf(text: str) -> List[Tuple[str, str]]:
    """(key, value) assignments of a sysctl.d(5) file, in order, keys normalised to dots.

    ``#`` and ``;`` start comments; a leading ``-`` (ignore errors) is dropped; a key whose
    first separator is ``/`` (``vm/nr_hugepages``) uses slashes, as sysctl.d(5) allows.
    """
    result: List[Tuple[str, str]] = []
    for raw in text.replace("\0", "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().lstrip("-").strip()
        if not key:
            continue
        result.append((normalize_sysctl_key(key), value.strip()))
    return result


def normalize_sysctl_key(key: str) -> str:
    """``vm/nr_hugepages`` -> ``vm.nr_hugepages``; dotted keys stay as they are."""
    slash, dot = key.find("/"), key.find(".")
    if slash != -1 and (dot == -1 or slash < dot):
        return key.replace(".", "\0").replace("/", ".").replace("\0", "/")
    return key


class SysctlSetting(NamedTuple):
    """One ``key = value`` line of a sysctl.d(5) file."""

    key: str
    """Normalised key, e.g. ``vm.nr_hugepages``."""
    value: str
    """The value as written."""
    path: str
    """The file it is in."""


class SysctlConfig(NamedTuple):
    """The sysctl settings the next ``sysctl --system`` (or boot) applies, in order.

    Files from ``/etc/sysctl.d``, ``/run/sysctl.d``, ``/usr/local/lib/sysctl.d``,
    ``/usr/lib/sysctl.d`` and ``/lib/sysctl.d`` are applied in the lexicographic order of
    their names whatever the directory (a name in /etc hides the same name elsewhere; a
    link to /dev/null masks it); ``/etc/sysctl.conf`` is applied last, as ``sysctl
    --system`` does. Later assignments win.
    """

    files: Tuple[str, ...] = ()
    """The files read, in the order applied."""
    settings: Tuple[SysctlSetting, ...] = ()
    """Every assignment, in the order applied."""

    def last(self, key: str) -> Optional[SysctlSetting]:
        """The assignment that wins for ``key``; None when no file sets it."""
        found = [s for s in self.settings if s.key == key]
        return found[-1] if found else None

    def setters(self, key: str) -> Tuple[SysctlSetting, ...]:
        """Every assignment of ``key``, in the order applied."""
        return tuple(s for s in self.settings if s.key == key)

    def int_value(self, key: str) -> Optional[int]:
        """The winning value as an integer; None when unset or not a number."""
        setting = self.last(key)
        return parse_int(setting.value) if setting else None


def read_sysctl_config(root: Root) -> SysctlConfig:
    """The sysctl.d(5) files in the order they apply, and every assignment in them."""
    files: List[str] = []
    settings: List[SysctlSetting] = []
    for path in _applied_files(root):
        text = root.read(path)
        if text is None:
            continue
        files.append(path)
        settings.extend(SysctlSetting(k, v, path) for k, v in parse_sysctl_conf(text))
    return SysctlConfig(tuple(files), tuple(settings))


def _applied_files(root: Root) -> List[str]:
    """The files ``sysctl --system`` applies, in its order: each name once, from the most
    important directory that has it, in the order of the names; ``/etc/sysctl.conf`` last."""
    chosen: Dict[str, str] = {}
    for directory in SYSCTL_DIRS:
        for name in root.listdir(directory):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{directory}/{name}"
    order = [chosen[name] for name in sorted(chosen)]
    if root.exists(SYSCTL_CONF):
        order.append(SYSCTL_CONF)
    return [path for path in order if not _skipped(path, root.readlink(path) or "")]


def _skipped(path: str, target: str) -> bool:
    """Whether a file whose link points at ``target`` adds nothing of its own."""
    if target == "/dev/null":
        return True  # masked
    # 99-sysctl.conf -> ../sysctl.conf: /etc/sysctl.conf is applied last anyway
    return path != SYSCTL_CONF and target in ("../sysctl.conf", SYSCTL_CONF)
