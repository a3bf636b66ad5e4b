"""systemd-oomd facts: is it running, what does it watch, and can it kill the engine?

systemd-oomd kills a whole cgroup when a cgroup it watches stays above its memory
pressure limit (``ManagedOOMMemoryPressure=kill``; the victim is the descendant with the
most reclaim activity) or when swap and memory both run out (``ManagedOOMSwap=kill``; the
victim is the descendant using the most swap). The engine is exposed when its cgroup sits
under such a cgroup.

Read through the root: ``systemctl show systemd-oomd.service`` (key
``systemctl-show-systemd-oomd.service``), ``oomctl dump`` (``oomctl-dump``), the oomd
configuration (``/etc/systemd/oomd.conf``, ``oomd.conf.d/`` under /etc, /run,
/usr/local/lib and /usr/lib), the engine's cgroup (its unit's ``ControlGroup``, or
``/proc/PID/cgroup`` of the engine), ``ManagedOOM*`` of the engine unit and of each
ancestor slice (``systemctl show <unit>``, key ``systemctl-show-<unit>``, and the unit
files and drop-ins on disk for what is configured but not loaded), swap from
``/proc/meminfo``, ``/proc/pressure/memory``, and earlier kills from ``journalctl -u
systemd-oomd --no-pager -o short-iso -n 200`` (``journalctl-oomd``).
"""

import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.engine import UnitState, command_failure, command_outcome, read_unit, unit_command
from strata_doctor.facts.parse import parse_meminfo, parse_mounts
from strata_doctor.facts.processes import ProcessInfo
from strata_doctor.facts.unitfile import parse_ini
from strata_doctor.facts.units import unit_file_paths
from strata_doctor.root import Command, CommandResult, Root, command_key

OOMD_UNIT = "systemd-oomd.service"
OOMCTL_DUMP = Command("oomctl-dump", ("oomctl", "dump"))
OOMD_ACTIVE = Command(
    command_key(["systemctl", "is-active", "systemd-oomd.service"]),
    ("systemctl", "is-active", "systemd-oomd.service"),
)
JOURNAL_OOMD = Command(
    "journalctl-oomd",
    ("journalctl", "-u", "systemd-oomd", "--no-pager", "-o", "short-iso", "-n", "200"),
)
OOMD_CONF_FILES = ("/etc/systemd/oomd.conf", "/run/systemd/oomd.conf",
                   "/usr/local/lib/systemd/oomd.conf", "/usr/lib/systemd/oomd.conf")
OOMD_CONF_DIRS = ("/etc/systemd/oomd.conf.d", "/run/systemd/oomd.conf.d",
                  "/usr/local/lib/systemd/oomd.conf.d", "/usr/lib/systemd/oomd.conf.d")
DEFAULT_SWAP_LIMIT = 90.0
DEFAULT_PRESSURE_LIMIT = 60.0
DEFAULT_PRESSURE_SECONDS = 30.0
OOM_KEYS = ("ManagedOOMMemoryPressure", "ManagedOOMMemoryPressureLimit",
            "ManagedOOMMemoryPressureDurationSec", "ManagedOOMSwap", "ManagedOOMPreference")
OOMD_DROPIN = "60-strata-doctor-oomd.conf"
"""The drop-in ``fix --only oomd`` writes (ManagedOOMPreference=avoid)."""
_USER_MANAGER = re.compile(r"^user@(\d+)\.service$")


# -- parsers ------------------------------------------------------------------------------
def parse_percent(text: str) -> Optional[float]:
    """``50%`` or ``50.00%`` -> 50.0; also permille (``‰``) and permyriad (``‱``)."""
    text = text.strip()
    for suffix, scale in (("%", 1.0), ("‰", 0.1), ("‱", 0.01)):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * scale
            except ValueError:
                return None
    return None


_SPAN_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "": 1.0, "s": 1.0, "sec": 1.0,
    "second": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
}


def parse_timespan(text: str) -> Optional[float]:
    """A systemd time span (``20s``, ``1min 30s``, ``30``) in seconds; None when garbage."""
    total = 0.0
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)", text.strip().lower())
    if not parts or re.sub(r"[0-9.\sa-z]", "", text.lower()):
        return None
    for number, unit in parts:
        if unit not in _SPAN_UNITS:
            return None
        total += float(number) * _SPAN_UNITS[unit]
    return total


class Pressure(NamedTuple):
    """One PSI line: ``some`` or ``full`` with its averages (percent) and total (µs)."""

    kind: str
    """``some`` (at least one task stalled) or ``full`` (all non-idle tasks stalled)."""
    avg10: float
    """Percent of the last 10 s."""
    avg60: float
    """Percent of the last 60 s."""
    avg300: float
    """Percent of the last 300 s."""
    total: int
    """Stall time since boot, in microseconds."""


def parse_pressure(text: str) -> Tuple[Pressure, ...]:
    """Parse ``/proc/pressure/memory`` (or a cgroup's ``memory.pressure``)."""
    rows: List[Pressure] = []
    for line in text.replace("\0", "").splitlines():
        words = line.split()
        if not words or words[0] not in ("some", "full"):
            continue
        values: Dict[str, str] = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        try:
            rows.append(Pressure(words[0], float(values.get("avg10", "0")),
                                 float(values.get("avg60", "0")), float(values.get("avg300", "0")),
                                 int(values.get("total", "0"))))
        except ValueError:
            continue
    return tuple(rows)


class Watched(NamedTuple):
    """A cgroup systemd-oomd watches."""

    path: str
    """cgroup path, ``/`` for the root."""
    kind: str
    """``memory-pressure`` or ``swap``."""
    limit: Optional[float] = None
    """Pressure limit in percent (memory-pressure only)."""
    duration: Optional[float] = None
    """Seconds above the limit before it acts (memory-pressure only)."""
    source: str = ""
    """Where this came from (``oomctl dump``, ``systemctl show UNIT``, a unit file)."""


class OomctlDump(NamedTuple):
    """``oomctl dump``: oomd's own view of its settings and watched cgroups."""

    swap_used_limit: Optional[float]
    """``Swap Used Limit`` in percent."""
    pressure_limit: Optional[float]
    """``Default Memory Pressure Limit`` in percent."""
    pressure_duration: Optional[float]
    """``Default Memory Pressure Duration`` in seconds."""
    watched: Tuple[Watched, ...]
    """Every watched cgroup."""


def parse_oomctl_dump(text: str) -> OomctlDump:
    """Parse ``oomctl dump`` (systemd 247 and later; older 'Memory Pressure Limit' rows and
    newer 'Memory Pressure Duration' rows both read)."""
    header: Dict[str, str] = {}
    watched: List[Watched] = []
    section = ""
    current: Optional[Dict[str, str]] = None

    def flush() -> None:
        if current is not None and "Path" in current:
            kind = "swap" if section.startswith("Swap") else "memory-pressure"
            limit = parse_percent(current.get("Memory Pressure Limit", "")) if kind != "swap" else None
            duration = parse_timespan(current.get("Memory Pressure Duration", "")) \
                if "Memory Pressure Duration" in current else None
            watched.append(Watched(current["Path"], kind, limit, duration, "oomctl dump"))

    for raw in text.replace("\0", "").splitlines():
        if not raw.strip():
            continue
        line = raw.strip()
        if not raw[0].isspace() and line.endswith("CGroups:"):
            flush()
            current = None
            section = line
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if not raw[0].isspace():
            header[key] = value
            continue
        if key == "Path" and section:
            flush()
            current = {"Path": value}
        elif current is not None:
            current[key] = value
    flush()
    return OomctlDump(
        parse_percent(header.get("Swap Used Limit", "")),
        parse_percent(header.get("Default Memory Pressure Limit", "")),
        parse_timespan(header.get("Default Memory Pressure Duration", "")) if
        "Default Memory Pressure Duration" in header else None,
        tuple(watched),
    )


class OomdKill(NamedTuple):
    """One kill systemd-oomd logged."""

    time: str
    """The journal timestamp (short-iso)."""
    cgroup: str
    """The cgroup it killed."""
    reason: str
    """What it gave as the reason (memory pressure of X above Y, or swap)."""


_KILL = re.compile(r"(?:Killed|Marked) (/\S*) (?:for killing )?due to (.+?)\s*$")


def parse_oomd_journal(text: str) -> Tuple[OomdKill, ...]:
    """Kills in ``journalctl -u systemd-oomd -o short-iso`` output, oldest first."""
    kills: List[OomdKill] = []
    for line in text.replace("\0", "").splitlines():
        match = _KILL.search(line)
        if not match:
            continue
        words = line.split()
        time = words[0] if words and words[0][:1].isdigit() else ""
        kills.append(OomdKill(time, match.group(1), match.group(2)))
    return tuple(kills)


def parse_proc_cgroup(text: str) -> Tuple[Optional[str], bool]:
    """The unified (v2) path of ``/proc/PID/cgroup``, and whether v1 hierarchies appear."""
    path: Optional[str] = None
    v1 = False
    for line in text.replace("\0", "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            path = parts[2].strip() or "/"
        elif parts[1]:
            v1 = True
    return path, v1


def cgroup_units(cgroup: str) -> List[Tuple[str, str]]:
    """(unit, cgroup path) from the cgroup up to the root slice, innermost first.

    ``/system.slice/strata.service`` -> strata.service, system.slice, -.slice.
    """
    parts = [p for p in cgroup.split("/") if p]
    units: List[Tuple[str, str]] = []
    for i in range(len(parts), 0, -1):
        name = parts[i - 1]
        if name.rsplit(".", 1)[-1] in ("slice", "service", "scope"):
            units.append((name, "/" + "/".join(parts[:i])))
    units.append(("-.slice", "/"))
    return units


class UnitOomSettings(NamedTuple):
    """``ManagedOOM*`` of one unit: loaded (``systemctl show``) and on disk."""

    unit: str
    """Unit name, e.g. ``user@1000.service``."""
    cgroup: str
    """Its cgroup path."""
    shown: bool
    """Whether ``systemctl show`` answered for it (False for user-manager units)."""
    memory_pressure: str = ""
    """Loaded ``ManagedOOMMemoryPressure`` (``auto`` or ``kill``)."""
    swap: str = ""
    """Loaded ``ManagedOOMSwap``."""
    preference: str = ""
    """Loaded ``ManagedOOMPreference`` (``none``, ``avoid`` or ``omit``)."""
    configured: Tuple[Tuple[str, str, str], ...] = ()
    """(key, value, file) of every ``ManagedOOM*`` line in its files, in order."""
    note: str = ""
    """Why it could not be shown, when it could not."""

    def on_disk(self, key: str) -> Optional[Tuple[str, str]]:
        """The last (value, file) for ``key`` in its files."""
        found = [(v, f) for k, v, f in self.configured if k == key]
        return found[-1] if found else None


def read_unit_oom(root: Root, unit: str, cgroup: str, show: bool = True) -> UnitOomSettings:
    """A unit's ManagedOOM settings, loaded and on disk."""
    configured: List[Tuple[str, str, str]] = []
    for path in unit_file_paths(root, unit):
        for section, key, value in parse_ini(root.read(path) or ""):
            if section in ("Service", "Slice", "Scope") and key in OOM_KEYS:
                configured.append((key, value, path))
    if not show:
        owner = user_manager_uid(cgroup)
        note = (f"a unit of the user manager of uid {owner}: not visible to `systemctl show`"
                if owner is not None else "not shown")
        return UnitOomSettings(unit, cgroup, False, configured=tuple(configured), note=note)
    state = read_unit(root, unit)
    if not state.available:
        return UnitOomSettings(unit, cgroup, False, configured=tuple(configured), note=state.reason)
    return UnitOomSettings(
        unit, cgroup, True,
        memory_pressure=state.get("ManagedOOMMemoryPressure"),
        swap=state.get("ManagedOOMSwap"),
        preference=state.get("ManagedOOMPreference"),
        configured=tuple(configured),
    )


def user_manager_uid(cgroup: str) -> Optional[int]:
    """The uid whose user manager (``user@UID.service``) owns the cgroup, if any."""
    for part in cgroup.split("/"):
        match = _USER_MANAGER.match(part)
        if match and len(match.group(1)) <= 20:  # a uid is 32 bits: longer is garbage
            return int(match.group(1))
    return None


# -- facts --------------------------------------------------------------------------------
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
    swap, pressure, duration = DEFAULT_SWAP_LIMIT, DEFAULT_PRESSURE_LIMIT, DEFAULT_PRESSURE_SECONDS
    for path in files:
        for section, key, value in parse_ini(root.read(path) or ""):
            if section != "OOM":
                continue
            if key == "SwapUsedLimit" and parse_percent(value) is not None:
                swap = parse_percent(value) or 0.0
            elif key == "DefaultMemoryPressureLimit" and parse_percent(value) is not None:
                pressure = parse_percent(value) or 0.0
            elif key == "DefaultMemoryPressureDurationSec" and parse_timespan(value) is not None:
                duration = parse_timespan(value) or 0.0
    return OomdSettings(swap, pressure, duration, tuple(files))


class OomdFacts(NamedTuple):
    """systemd-oomd and the engine's place under it."""

    systemd: bool
    """Whether ``systemctl`` answered (False without systemd, e.g. in most containers)."""
    systemd_reason: str
    """Why it did not, when it did not."""
    oomd_state: str
    """systemd-oomd.service's ActiveState (``active``, ``inactive``...) or ``not-found``."""
    settings: OomdSettings
    """oomd.conf settings."""
    dump: Optional[OomctlDump]
    """``oomctl dump`` when it ran."""
    dump_reason: str
    """Why ``oomctl dump`` gave nothing, when it did not."""
    cgroup_v2: Optional[bool]
    """True on the unified hierarchy; False on v1/hybrid without it; None when unknown."""
    container: Optional[str]
    """The container manager, when this is a container."""
    engine_unit: str
    """The engine's unit name."""
    engine_unit_loaded: bool
    """Whether the system manager knows the engine unit."""
    engine_pid: Optional[int]
    """The engine's PID when running."""
    engine_cgroup: Optional[str]
    """The engine's cgroup path."""
    cgroup_source: str
    """Where the cgroup came from."""
    units: Tuple[UnitOomSettings, ...]
    """The engine's unit (or scope) and each ancestor, innermost first."""
    swap_total: Optional[int]
    """``SwapTotal`` in bytes."""
    swap_free: Optional[int]
    """``SwapFree`` in bytes."""
    pressure: Tuple[Pressure, ...]
    """``/proc/pressure/memory``."""
    pressure_reason: str
    """Why pressure could not be read (kernel without PSI), when it could not."""
    n_restarts: Optional[int]
    """The engine unit's NRestarts."""
    result: str
    """The engine unit's Result (``oom-kill`` after an oomd or kernel OOM kill)."""
    active_state: str
    """The engine unit's ActiveState/SubState, e.g. ``activating/auto-restart``."""
    kills: Tuple[OomdKill, ...]
    """Every kill in the oomd journal that was read."""
    journal_reason: str
    """Why the journal could not be read, when it could not."""

    @property
    def active(self) -> bool:
        """Whether systemd-oomd runs."""
        return self.oomd_state in ("active", "reloading", "activating")

    @property
    def engine_settings(self) -> Optional[UnitOomSettings]:
        """ManagedOOM settings of the engine's own unit or scope."""
        return self.units[0] if self.units and self.engine_cgroup and \
            self.units[0].cgroup == self.engine_cgroup else None

    @property
    def user_uid(self) -> Optional[int]:
        """The uid of the user manager the engine runs under, if it does."""
        return user_manager_uid(self.engine_cgroup) if self.engine_cgroup else None

    @property
    def swap_used(self) -> Optional[int]:
        """Swap in use."""
        if self.swap_total is None or self.swap_free is None:
            return None
        return self.swap_total - self.swap_free

    def pressure_of(self, kind: str) -> Optional[Pressure]:
        """The ``some`` or ``full`` row."""
        return next((p for p in self.pressure if p.kind == kind), None)

    def watched(self) -> Tuple[Watched, ...]:
        """Cgroups on the engine's path that oomd watches, from its dump and the units."""
        if not self.engine_cgroup:
            return ()
        ancestors = {path for _, path in cgroup_units(self.engine_cgroup)}
        found: Dict[Tuple[str, str], Watched] = {}
        if self.dump is not None:
            for w in self.dump.watched:
                if w.path in ancestors:
                    found[(w.path, w.kind)] = w
        for unit in self.units:
            for kind, value, key in (("memory-pressure", unit.memory_pressure, "ManagedOOMMemoryPressure"),
                                     ("swap", unit.swap, "ManagedOOMSwap")):
                disk = unit.on_disk(key)
                loaded = value if unit.shown else ""
                if loaded != "kill" and not (not unit.shown and disk and disk[0] == "kill"):
                    continue
                if (unit.cgroup, kind) in found:
                    continue
                source = f"systemctl show {unit.unit}" if loaded == "kill" else (disk[1] if disk else "")
                limit = duration = None
                if kind == "memory-pressure":
                    limit_text = unit.on_disk("ManagedOOMMemoryPressureLimit")
                    limit = parse_percent(limit_text[0]) if limit_text else None
                    span = unit.on_disk("ManagedOOMMemoryPressureDurationSec")
                    duration = parse_timespan(span[0]) if span else None
                found[(unit.cgroup, kind)] = Watched(unit.cgroup, kind, limit, duration, source)
        order = {path: i for i, (_, path) in enumerate(cgroup_units(self.engine_cgroup))}
        return tuple(sorted(found.values(), key=lambda w: (order.get(w.path, 99), w.kind)))

    def limit_of(self, watched: Watched) -> Tuple[float, float]:
        """(pressure limit %, duration s) that applies to a watched cgroup."""
        limit = watched.limit
        if limit is None or limit == 0:
            limit = (self.dump.pressure_limit if self.dump and self.dump.pressure_limit
                     else self.settings.pressure_limit)
        duration = watched.duration
        if duration is None:
            duration = (self.dump.pressure_duration if self.dump and self.dump.pressure_duration
                        else self.settings.pressure_duration)
        return limit, duration

    def kills_under(self, paths: Sequence[str]) -> Tuple[OomdKill, ...]:
        """Kills of cgroups inside any of ``paths`` (the cgroups oomd watches)."""
        roots = [p.rstrip("/") for p in paths]
        return tuple(k for k in self.kills
                     if any(k.cgroup.startswith(f"{r}/") or k.cgroup == r or r == "" for r in roots))

    def engine_kills(self) -> Tuple[OomdKill, ...]:
        """Kills of the engine's cgroup (or one inside it, or one named after its unit)."""
        result = []
        cgroup = self.engine_cgroup
        for kill in self.kills:
            inside = bool(cgroup) and (kill.cgroup == cgroup or kill.cgroup.startswith(f"{cgroup}/"))
            named = kill.cgroup.rstrip("/").rsplit("/", 1)[-1] == self.engine_unit
            if inside or named:
                result.append(kill)
        return tuple(result)


def read_oomd(
    root: Root, engine_unit: UnitState, engine_pid: Optional[int],
    processes: Sequence[ProcessInfo] = (), container: Optional[str] = None,
) -> OomdFacts:
    """Read oomd's state and the engine's exposure to it through ``root``."""
    oomd = read_unit(root, OOMD_UNIT)
    systemd = oomd.available
    if oomd.available:
        state = oomd.get("ActiveState") or "unknown"
        if oomd.get("LoadState") == "not-found":
            state = "not-found"
    else:
        state = "unknown"
    dump_result = root.run(OOMCTL_DUMP)
    dump = parse_oomctl_dump(dump_result.stdout) if dump_result.ok and dump_result.stdout.strip() else None
    journal = root.run(JOURNAL_OOMD)
    meminfo = parse_meminfo(root.read("/proc/meminfo") or "")
    pressure_text = root.read("/proc/pressure/memory")
    pressure_reason = "" if pressure_text is not None else (
        "kernel without PSI (/proc/pressure/memory " + (root.reads.get("/proc/pressure/memory") or "missing")
        + "): oomd's pressure monitoring cannot work")

    pid = engine_pid
    cgroup: Optional[str] = None
    source = ""
    v1_seen = False
    if engine_unit.loaded and engine_unit.get("ControlGroup"):
        cgroup, source = engine_unit.get("ControlGroup"), f"ControlGroup of {engine_unit.name}"
    if pid is not None:
        path, v1_seen = parse_proc_cgroup(root.read(f"/proc/{pid}/cgroup") or "")
        if cgroup is None and path:
            cgroup, source = path, f"/proc/{pid}/cgroup"
    if cgroup is None and engine_unit.loaded and engine_unit.get("Slice"):
        # A loaded but stopped unit: its cgroup is made under its slice when it starts.
        slice_name = engine_unit.get("Slice")
        cgroup = slice_path(slice_name) + "/" + engine_unit.name
        source = f"Slice={slice_name} of {engine_unit.name} (not running)"

    units: List[UnitOomSettings] = []
    if cgroup and systemd:
        ancestors = [(unit, path, user_manager_uid(path) is None or bool(_USER_MANAGER.match(unit)))
                     for unit, path in cgroup_units(cgroup)]
        root.run_all(unit_command(unit) for unit, _, shown in ancestors if shown)  # together
        units = [read_unit_oom(root, unit, path, show=shown) for unit, path, shown in ancestors]
    return OomdFacts(
        systemd=systemd,
        systemd_reason=oomd.reason,
        oomd_state=state,
        settings=read_oomd_settings(root),
        dump=dump,
        dump_reason=_why(dump_result, "oomctl"),
        cgroup_v2=cgroup_v2(root, v1_seen),
        container=container,
        engine_unit=engine_unit.name,
        engine_unit_loaded=engine_unit.loaded,
        engine_pid=pid,
        engine_cgroup=cgroup,
        cgroup_source=source,
        units=tuple(units),
        swap_total=meminfo.get("SwapTotal"),
        swap_free=meminfo.get("SwapFree"),
        pressure=parse_pressure(pressure_text or ""),
        pressure_reason=pressure_reason,
        n_restarts=_int(engine_unit.get("NRestarts")) if engine_unit.loaded else None,
        result=engine_unit.get("Result") if engine_unit.loaded else "",
        active_state="/".join(x for x in (engine_unit.get("ActiveState"), engine_unit.get("SubState")) if x),
        kills=parse_oomd_journal(journal.stdout) if journal.ok else (),
        journal_reason=_journal_reason(journal),
    )


def read_oomd_active(root: Root) -> str:
    """systemd-oomd's state as ``systemctl is-active`` says it (``active``, ``inactive``...),
    or ``unknown (why)``."""
    result = root.run(OOMD_ACTIVE)
    state = result.stdout.strip().splitlines()
    if state:
        return state[0]  # is-active exits non-zero for inactive, but still says so
    err = result.stderr.strip().splitlines()
    return f"unknown ({command_outcome(result)}" + (f": {err[0]})" if err else ")")


def slice_path(slice_name: str) -> str:
    """The cgroup path of a slice: ``user-1000.slice`` -> ``/user.slice/user-1000.slice``."""
    if slice_name in ("-.slice", ""):
        return ""
    stem = slice_name[: -len(".slice")] if slice_name.endswith(".slice") else slice_name
    parts = stem.split("-")
    return "".join("/" + "-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def cgroup_v2(root: Root, v1_seen: bool = False) -> Optional[bool]:
    """Whether the host uses the unified cgroup hierarchy."""
    if root.exists("/sys/fs/cgroup/cgroup.controllers"):
        return True
    types = {fstype: point for _, point, fstype, _ in parse_mounts(root.read("/proc/mounts") or "")}
    if types.get("cgroup2") == "/sys/fs/cgroup":
        return True
    if "cgroup" in types or v1_seen or root.is_dir("/sys/fs/cgroup/memory"):
        return False
    return None


def _int(text: str) -> Optional[int]:
    text = text.strip()  # a count: ASCII digits, at most 64 (int() refuses 4,300)
    return int(text) if 0 < len(text) <= 64 and text.isascii() and text.isdigit() else None


def _why(result: CommandResult, name: str) -> str:
    return "" if result.ok and result.stdout.strip() else command_failure(result, name)


def _journal_reason(result: CommandResult) -> str:
    if result.missing:
        return "journalctl not found"
    if result.timed_out:
        return "journalctl timed out"
    text = (result.stdout + "\n" + result.stderr).lower()
    if "insufficient permissions" in text or "not seeing messages from other users" in text:
        return "the journal needs root or the systemd-journal group to read"
    if not result.ok:
        err = (result.stderr.strip().splitlines() or [""])[0]
        return f"journalctl exited {result.status}" + (f": {err}" if err else "")
    return ""


def oomd_commands(engine_unit: str) -> Tuple[Command, ...]:
    """The commands the oomd facts need first (ancestors' ``systemctl show`` follow)."""
    return (unit_command(engine_unit), unit_command(OOMD_UNIT), OOMCTL_DUMP, JOURNAL_OOMD)


def oomd_data(facts: OomdFacts) -> Dict[str, object]:
    """``facts.oomd`` in the JSON output."""
    return {
        "systemd": facts.systemd,
        "state": facts.oomd_state,
        "settings": {
            "swap_used_limit_percent": facts.settings.swap_used_limit,
            "default_memory_pressure_limit_percent": facts.settings.pressure_limit,
            "default_memory_pressure_duration_seconds": facts.settings.pressure_duration,
            "files": list(facts.settings.files),
        },
        "oomctl_dump": None if facts.dump is None else {
            "watched": [{"path": w.path, "kind": w.kind, "limit_percent": w.limit,
                         "duration_seconds": w.duration} for w in facts.dump.watched],
        },
        "cgroup_v2": facts.cgroup_v2,
        "container": facts.container,
        "engine": {
            "unit": facts.engine_unit,
            "unit_loaded": facts.engine_unit_loaded,
            "pid": facts.engine_pid,
            "cgroup": facts.engine_cgroup,
            "cgroup_source": facts.cgroup_source,
            "n_restarts": facts.n_restarts,
            "result": facts.result,
            "state": facts.active_state,
        },
        "units": [
            {"unit": u.unit, "cgroup": u.cgroup, "shown": u.shown,
             "managed_oom_memory_pressure": u.memory_pressure, "managed_oom_swap": u.swap,
             "managed_oom_preference": u.preference,
             "configured": [{"key": k, "value": v, "file": f} for k, v, f in u.configured],
             "note": u.note}
            for u in facts.units
        ],
        "watched": [{"path": w.path, "kind": w.kind, "limit_percent": w.limit,
                     "duration_seconds": w.duration, "source": w.source} for w in facts.watched()],
        "swap_total_bytes": facts.swap_total,
        "swap_free_bytes": facts.swap_free,
        "pressure": [{"kind": p.kind, "avg10": p.avg10, "avg60": p.avg60, "avg300": p.avg300,
                      "total_us": p.total} for p in facts.pressure],
        "kills": [{"time": k.time, "cgroup": k.cgroup, "reason": k.reason} for k in facts.kills],
        "journal_reason": facts.journal_reason or None,
    }
