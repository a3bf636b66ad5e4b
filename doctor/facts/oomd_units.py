"""The engine's place in the cgroup tree and the ``ManagedOOM*`` settings of every unit on
its path: the engine's unit (or scope) and each ancestor slice, loaded (``systemctl show
<unit>``, key ``systemctl-show-<unit>``) and on disk (unit files and drop-ins, for what is
configured but not loaded)."""

import re
from typing import List, NamedTuple, Optional, Tuple

from strata_doctor.facts.engine import UnitState, read_unit, unit_command
from strata_doctor.facts.oomd_dump import Watched, parse_percent, parse_timespan
from strata_doctor.facts.unitfile import parse_ini
from strata_doctor.facts.units import unit_file_paths
from strata_doctor.root import Root

OOM_KEYS = ("ManagedOOMMemoryPressure", "ManagedOOMMemoryPressureLimit",
            "ManagedOOMMemoryPressureDurationSec", "ManagedOOMSwap", "ManagedOOMPreference")
_USER_MANAGER = re.compile(r"^user@(\d+)\.service$")


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


def slice_path(slice_name: str) -> str:
    """The cgroup path of a slice: ``user-1000.slice`` -> ``/user.slice/user-1000.slice``."""
    if slice_name in ("-.slice", ""):
        return ""
    stem = slice_name[: -len(".slice")] if slice_name.endswith(".slice") else slice_name
    parts = stem.split("-")
    return "".join("/" + "-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def user_manager_uid(cgroup: str) -> Optional[int]:
    """The uid whose user manager (``user@UID.service``) owns the cgroup, if any."""
    for part in cgroup.split("/"):
        match = _USER_MANAGER.match(part)
        if match and len(match.group(1)) <= 20:  # a uid is 32 bits: longer is garbage
            return int(match.group(1))
    return None


class EngineCgroup(NamedTuple):
    """Where the engine's cgroup is, and how that was found."""

    path: Optional[str]
    """The cgroup path; None when neither its unit nor a process tells it."""
    source: str
    """Where the path came from."""
    v1_seen: bool
    """Whether the engine's ``/proc/PID/cgroup`` names v1 hierarchies."""


def read_engine_cgroup(root: Root, engine_unit: UnitState, pid: Optional[int]) -> EngineCgroup:
    """The engine's cgroup: its unit's ``ControlGroup``, else ``/proc/PID/cgroup``, else
    the cgroup a loaded but stopped unit gets under its slice when it starts."""
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
        slice_name = engine_unit.get("Slice")
        cgroup = slice_path(slice_name) + "/" + engine_unit.name
        source = f"Slice={slice_name} of {engine_unit.name} (not running)"
    return EngineCgroup(cgroup, source, v1_seen)


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

    def watches(self) -> List[Watched]:
        """What this unit makes oomd watch: a ``kill`` loaded, or (for a unit that
        ``systemctl show`` cannot see) written in its files."""
        found = []
        for kind, loaded, key in (("memory-pressure", self.memory_pressure, "ManagedOOMMemoryPressure"),
                                  ("swap", self.swap, "ManagedOOMSwap")):
            source = self._kill_source(loaded, key)
            if source is not None:
                found.append(self._watch(kind, source))
        return found

    def _kill_source(self, loaded: str, key: str) -> Optional[str]:
        """Where ``key=kill`` comes from; None when it is not set to kill."""
        if self.shown and loaded == "kill":
            return f"systemctl show {self.unit}"
        disk = self.on_disk(key)
        if not self.shown and disk and disk[0] == "kill":
            return disk[1]
        return None

    def _watch(self, kind: str, source: str) -> Watched:
        if kind != "memory-pressure":
            return Watched(self.cgroup, kind, None, None, source)
        limit = self.on_disk("ManagedOOMMemoryPressureLimit")
        span = self.on_disk("ManagedOOMMemoryPressureDurationSec")
        return Watched(self.cgroup, kind, parse_percent(limit[0]) if limit else None,
                       parse_timespan(span[0]) if span else None, source)


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


def read_path_units(root: Root, cgroup: str) -> Tuple[UnitOomSettings, ...]:
    """ManagedOOM settings of every unit from the engine's cgroup up to ``-.slice``.

    A unit inside a user manager is not the system manager's to show, except the
    ``user@UID.service`` itself.
    """
    ancestors = [(unit, path, user_manager_uid(path) is None or bool(_USER_MANAGER.match(unit)))
                 for unit, path in cgroup_units(cgroup)]
    root.run_all(unit_command(unit) for unit, _, shown in ancestors if shown)  # together
    return tuple(read_unit_oom(root, unit, path, show=shown) for unit, path, shown in ancestors)
