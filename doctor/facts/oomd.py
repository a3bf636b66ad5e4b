"""systemd-oomd facts: is it running, what does it watch, and can it kill the engine?

systemd-oomd kills a whole cgroup when a cgroup it watches stays above its memory
pressure limit (``ManagedOOMMemoryPressure=kill``; the victim is the descendant with the
most reclaim activity) or when swap and memory both run out (``ManagedOOMSwap=kill``; the
victim is the descendant using the most swap). The engine is exposed when its cgroup sits
under such a cgroup.

:func:`read_oomd` gathers :class:`OomdFacts` through the root from the readers beside it:
``systemctl show systemd-oomd.service`` (key ``systemctl-show-systemd-oomd.service``),
``oomctl dump`` (``oomctl-dump``, :mod:`~strata_doctor.facts.oomd_dump`), the oomd
configuration (:mod:`~strata_doctor.facts.oomd_conf`), the engine's cgroup and the
``ManagedOOM*`` of the engine unit and of each ancestor slice
(:mod:`~strata_doctor.facts.oomd_units`), swap from ``/proc/meminfo``,
``/proc/pressure/memory`` (:mod:`~strata_doctor.facts.pressure`), and earlier kills from
oomd's journal (:mod:`~strata_doctor.facts.oomd_journal`). The names of those modules
stay importable from here.
"""

from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.engine import UnitState, command_failure, command_outcome, read_unit, unit_command
from strata_doctor.facts.oomd_conf import (
    OomdSettings,
    read_oomd_settings,
)
from strata_doctor.facts.oomd_dump import (
    OOMCTL_DUMP,
    OomctlDump,
    Watched,
    parse_oomctl_dump,
)
from strata_doctor.facts.oomd_journal import JOURNAL_OOMD, OomdKill, read_oomd_journal
from strata_doctor.facts.oomd_units import (
    UnitOomSettings,
    cgroup_units,
    read_engine_cgroup,
    read_path_units,
    user_manager_uid,
)
from strata_doctor.facts.parse import parse_mounts
from strata_doctor.facts.pressure import Pressure, read_pressure
from strata_doctor.root import Command, CommandResult, Root, command_key

OOMD_UNIT = "systemd-oomd.service"
OOMD_ACTIVE = Command(
    command_key(["systemctl", "is-active", "systemd-oomd.service"]),
    ("systemctl", "is-active", "systemd-oomd.service"),
)
OOMD_DROPIN = "60-strata-doctor-oomd.conf"
"""The drop-in ``fix --only oomd`` writes (ManagedOOMPreference=avoid)."""


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
        path = cgroup_units(self.engine_cgroup)
        ancestors = {cgroup for _, cgroup in path}
        found: Dict[Tuple[str, str], Watched] = {}
        for w in self.dump.watched if self.dump is not None else ():
            if w.path in ancestors:
                found[(w.path, w.kind)] = w
        for unit in self.units:
            for w in unit.watches():
                found.setdefault((w.path, w.kind), w)  # oomd's own dump says it first
        order = {cgroup: i for i, (_, cgroup) in enumerate(path)}
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


def read_oomd(root: Root, engine_unit: UnitState, engine_pid: Optional[int], meminfo: Mapping[str, int],
              container: Optional[str] = None) -> OomdFacts:
    """Read oomd's state and the engine's exposure to it through ``root``; ``meminfo`` is
    ``/proc/meminfo`` as ``read_meminfo`` parsed it (for swap)."""
    oomd = read_unit(root, OOMD_UNIT)
    dump_result = root.run(OOMCTL_DUMP)
    kills, journal_reason = read_oomd_journal(root)
    pressure, pressure_reason = read_pressure(root)
    cgroup = read_engine_cgroup(root, engine_unit, engine_pid)
    units = read_path_units(root, cgroup.path) if cgroup.path and oomd.available else ()
    return OomdFacts(
        systemd=oomd.available,
        systemd_reason=oomd.reason,
        oomd_state=_oomd_state(oomd),
        settings=read_oomd_settings(root),
        dump=_dump(dump_result),
        dump_reason=_why(dump_result, "oomctl"),
        cgroup_v2=cgroup_v2(root, cgroup.v1_seen),
        container=container,
        engine_unit=engine_unit.name,
        engine_unit_loaded=engine_unit.loaded,
        engine_pid=engine_pid,
        engine_cgroup=cgroup.path,
        cgroup_source=cgroup.source,
        units=units,
        swap_total=meminfo.get("SwapTotal"),
        swap_free=meminfo.get("SwapFree"),
        pressure=pressure,
        pressure_reason=pressure_reason,
        n_restarts=_int(engine_unit.get("NRestarts")) if engine_unit.loaded else None,
        result=engine_unit.get("Result") if engine_unit.loaded else "",
        active_state="/".join(x for x in (engine_unit.get("ActiveState"), engine_unit.get("SubState")) if x),
        kills=kills,
        journal_reason=journal_reason,
    )


def _oomd_state(oomd: UnitState) -> str:
    """systemd-oomd.service's ActiveState, ``not-found`` when systemd has no such unit."""
    if not oomd.available:
        return "unknown"
    if oomd.get("LoadState") == "not-found":
        return "not-found"
    return oomd.get("ActiveState") or "unknown"


def _dump(result: CommandResult) -> Optional[OomctlDump]:
    return parse_oomctl_dump(result.stdout) if result.ok and result.stdout.strip() else None


def read_oomd_active(root: Root) -> str:
    """systemd-oomd's state as ``systemctl is-active`` says it (``active``, ``inactive``...),
    or ``unknown (why)``."""
    result = root.run(OOMD_ACTIVE)
    state = result.stdout.strip().splitlines()
    if state:
        return state[0]  # is-active exits non-zero for inactive, but still says so
    err = result.stderr.strip().splitlines()
    return f"unknown ({command_outcome(result)}" + (f": {err[0]})" if err else ")")


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
