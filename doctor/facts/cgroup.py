"""The limits the engine runs under: its cgroup, its container, locked memory and swap.

Two readers gather them for ``HostContext.engine_limits``: :func:`read_engine_limits`
everything but the cgroup's files, and :func:`strata_doctor.facts.cgroup_path.read_cgroup_path`
those; which limit binds is :func:`strata_doctor.rules.limits.tightest_limits`'s decision.

- the engine's cgroup (its unit's ``ControlGroup``, ``/proc/PID/cgroup``, or in a
  container the doctor's own cgroup: the namespace's root, ``/``) and, walking from it up
  to the root, every ``memory.max`` and ``memory.high``, ``memory.swap.max`` and the
  nearest ``cpuset.mems.effective`` / ``cpuset.cpus.effective`` under ``/sys/fs/cgroup``
  (cgroup v1: ``memory/…/memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes`` and
  ``cpuset/…/cpuset.effective_mems`` / ``effective_cpus`` at the same path);
- what the unit's files configure for a unit that is not running (``MemoryMax=``,
  ``MemoryHigh=``, ``MemorySwapMax=``, ``AllowedMemoryNodes=``, ``AllowedCPUs=``,
  ``LimitMEMLOCK=``), and systemd's ``DefaultLimitMEMLOCK=`` from ``system.conf``;
- the container runtime when it is evident (``/run/systemd/container``, ``/.dockerenv``,
  ``/run/.containerenv``, ``container=`` in PID 1's environment) and the capabilities
  (``CapEff``) of the engine, or of the doctor itself, in it;
- the running engine's ``Max locked memory`` (``/proc/PID/limits``) and ``VmLck`` /
  ``VmPin`` (``/proc/PID/status``);
- swap: ``SwapTotal``/``SwapFree`` in ``/proc/meminfo`` and the devices in ``/proc/swaps``.

Parsers are pure functions on strings; the reader takes a :class:`~strata_doctor.root.Root`.
"""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import parse_int, parse_status
from strata_doctor.facts.unitfile import parse_ini
from strata_doctor.facts.units import unit_settings
from strata_doctor.root import Root

CGROUP_FS = "/sys/fs/cgroup"
CAP_SYS_NICE = 23
"""The capability bit ``set_mempolicy``/``mbind`` need for MPOL_MF_MOVE_ALL and, in a
container that drops it, for any policy on nodes outside the caller's cpuset."""
DOCKER_MEMLOCK = 8 * 1024**2
"""Docker's default ``RLIMIT_MEMLOCK`` (``--ulimit memlock``), 8 MiB."""
V1_UNLIMITED = 0x7FFFFFFFFFFFF000
"""cgroup v1's ``memory.limit_in_bytes`` without a limit (PAGE_COUNTER_MAX pages)."""
SYSTEM_CONF = ("/etc/systemd/system.conf", "/etc/systemd/system.conf.d",
               "/run/systemd/system.conf.d", "/usr/lib/systemd/system.conf.d")
_LIMIT_LINE = re.compile(r"^Max locked memory\s+(\S+)\s+(\S+)\s+(\S+)", re.MULTILINE)
_SYSTEMD_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMGTPEB]?)")  # B: bytes, as systemd reads it
UNIT_KEYS = ("MemoryMax", "MemoryHigh", "MemorySwapMax", "AllowedMemoryNodes", "AllowedCPUs",
             "LimitMEMLOCK")


class Limit(NamedTuple):
    """One limit as the host states it."""

    value: Optional[int]
    """Bytes; None for no limit (``max``, ``infinity``, ``unlimited``)."""
    text: str
    """As written: ``51539607552``, ``48G``, ``max``."""
    source: str
    """The file that says it (a cgroup file, a unit file, ``/proc/PID/limits``)."""


class NodeSet(NamedTuple):
    """A set of nodes or CPUs a cgroup allows, and the file that says it."""

    ids: FrozenSet[int]
    text: str
    source: str


class EngineLimits(NamedTuple):
    """The limits the engine runs under, or will run under at its next start."""

    cgroup: Optional[str]
    """The engine's cgroup path (``/system.slice/strata.service``; ``/`` in a container)."""
    cgroup_source: str
    """Where that path came from."""
    running: bool
    """Whether the cgroup's folder exists (the unit runs); else the unit's files say it."""
    cgroup_v1: bool
    """Read from the v1 memory and cpuset hierarchies."""
    memory_max: Optional[Limit] = None
    """The tightest ``memory.max`` on the path (or ``MemoryMax=`` configured)."""
    memory_high: Optional[Limit] = None
    """The tightest ``memory.high`` on the path (or ``MemoryHigh=`` configured)."""
    swap_max: Optional[Limit] = None
    """The tightest ``memory.swap.max`` on the path (or ``MemorySwapMax=`` configured)."""
    mems: Optional[NodeSet] = None
    """``cpuset.mems.effective`` of the nearest cgroup that has it (or ``AllowedMemoryNodes=``)."""
    cpus: Optional[NodeSet] = None
    """``cpuset.cpus.effective`` likewise (or ``AllowedCPUs=``)."""
    unit_settings: Tuple[Tuple[str, str, str], ...] = ()
    """(key, value, file) of the memory, cpuset and memlock settings in the unit's files."""
    default_memlock: Optional[Limit] = None
    """``DefaultLimitMEMLOCK=`` of the system manager, when a file sets it."""
    container: Optional[str] = None
    """The container runtime (``docker``, ``podman``, ``lxc``...), when this is a container."""
    container_evidence: str = ""
    """What shows it: ``/.dockerenv``, ``/run/.containerenv``, ``container=... in /proc/1/environ``."""
    cap_eff: Optional[int] = None
    """``CapEff`` of the engine (or the doctor, in a container)."""
    cap_source: str = ""
    """The status file ``cap_eff`` came from."""
    memlock: Optional[Limit] = None
    """The running engine's soft ``Max locked memory`` (``/proc/PID/limits``); in a container
    where the engine does not run yet, the doctor's own (``/proc/self/limits``, else PID 1's)."""
    locked: int = 0
    """``VmLck`` of the running engine, in bytes."""
    pinned: int = 0
    """``VmPin`` of the running engine, in bytes."""
    swap_total: Optional[int] = None
    """``SwapTotal`` in bytes."""
    swap_free: Optional[int] = None
    """``SwapFree`` in bytes."""
    swap_devices: Tuple[str, ...] = ()
    """The devices and files in ``/proc/swaps``."""
    files_read: Tuple[str, ...] = ()
    """The cgroup limit files that were there to read (none: a capture without them)."""

    def setting(self, key: str) -> Optional[Tuple[str, str]]:
        """(value, file) of a unit setting the unit's files set last."""
        found = [(v, f) for k, v, f in self.unit_settings if k == key]
        return found[-1] if found else None

    @property
    def has_cap_sys_nice(self) -> Optional[bool]:
        """Whether ``CapEff`` holds CAP_SYS_NICE; None when unknown."""
        return None if self.cap_eff is None else bool(self.cap_eff >> CAP_SYS_NICE & 1)

    @property
    def swap_on(self) -> bool:
        """Whether the host has swap."""
        return bool(self.swap_total)

    def fences(self, node: int, node_cpus: FrozenSet[int]) -> Tuple[Optional[NodeSet], Optional[NodeSet]]:
        """(cpuset.mems, cpuset.cpus) of the two that shut ``node`` out, None for each that
        does not: mems without the node, or cpus with none of ``node_cpus``. The one rule
        cgroup-limits reports as errors and numa-binding defers to."""
        mems, cpus = self.mems, self.cpus
        shut_mems = mems is not None and bool(mems.ids) and node not in mems.ids
        shut_cpus = cpus is not None and bool(cpus.ids and node_cpus) and not node_cpus & cpus.ids
        return (mems if shut_mems else None), (cpus if shut_cpus else None)


# -- parsers ------------------------------------------------------------------------------
def parse_cgroup_bytes(text: str) -> Optional[Tuple[Optional[int]]]:
    """``memory.max``-style content: ``(bytes,)``, ``(None,)`` for ``max``; None for garbage."""
    text = text.strip()
    if text == "max":
        return (None,)
    value = parse_int(text)
    if value is None:
        return None
    return (None,) if value >= V1_UNLIMITED else (value,)


def parse_systemd_bytes(text: str, mem_total: Optional[int]) -> Optional[Tuple[Optional[int]]]:
    """A systemd size (``48G``, ``512M``, ``80%``, ``infinity``): ``(bytes,)``, ``(None,)``
    for no limit; None when it is not one. Suffixes are 1024-based, as systemd reads them."""
    text = text.strip()
    if text in ("infinity", ""):
        return (None,)
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            return None
        if mem_total is None or not 0 <= percent <= 100:
            return None
        return (int(mem_total * percent / 100),)
    match = _SYSTEMD_SIZE.fullmatch(text)
    if not match or len(text) > 30:
        return None
    scale = 1024 ** "KMGTPE".find(match.group(2)) * 1024 if match.group(2) not in ("", "B") else 1
    return (int(float(match.group(1)) * scale),)


def parse_memlock(text: str) -> Optional[Limit]:
    """The soft ``Max locked memory`` of ``/proc/PID/limits`` (bytes; None for unlimited)."""
    match = _LIMIT_LINE.search(text)
    if not match:
        return None
    soft = match.group(1)
    if soft == "unlimited":
        return Limit(None, soft, "")
    value = parse_int(soft)
    return None if value is None else Limit(value, soft, "")


def parse_cap(text: str) -> Optional[int]:
    """A capability mask (``00000000a80425fb``)."""
    text = text.strip()
    if not text or len(text) > 16 or any(c not in "0123456789abcdefABCDEF" for c in text):
        return None
    return int(text, 16)


def status_kb(status: Dict[str, str], key: str) -> int:
    """A ``kB`` field of ``/proc/PID/status`` in bytes (0 when absent)."""
    words = status.get(key, "").split()
    value = parse_int(words[0]) if words else None
    return (value or 0) * 1024


# -- the readers --------------------------------------------------------------------------
def read_engine_limits(
    root: Root, unit: str, cgroup: Optional[str], cgroup_source: str, engine_pid: Optional[int],
    container: Optional[str], meminfo: Mapping[str, int],
) -> EngineLimits:
    """Everything :class:`EngineLimits` holds but the cgroup limits, read through ``root``
    (:func:`~strata_doctor.facts.cgroup_path.read_cgroup_path`
    reads those).

    ``cgroup`` is the engine's cgroup as the oomd facts found it; ``container`` the runtime
    ``detect_container`` named; ``meminfo`` is ``/proc/meminfo`` as ``read_meminfo`` parsed it.
    """
    if cgroup is None and container:
        cgroup, cgroup_source = _own_cgroup(root)
    settings = unit_settings(root, unit, "Service") if unit else {}
    configured = tuple((k, v, f) for k, (v, f) in settings.items() if k in UNIT_KEYS)
    v1 = not root.exists(f"{CGROUP_FS}/cgroup.controllers") and root.is_dir(f"{CGROUP_FS}/memory")
    limits = EngineLimits(cgroup=cgroup, cgroup_source=cgroup_source, running=False, cgroup_v1=v1,
                          unit_settings=configured, default_memlock=_default_memlock(root))
    limits = _container(root, limits, container, engine_pid)
    return _swap(root, _engine_memlock(root, limits, engine_pid, container), meminfo)


def _own_cgroup(root: Root) -> Tuple[str, str]:
    """(the doctor's own cgroup, where that came from): in a container, the engine's too."""
    own = _unified_path(root.read("/proc/self/cgroup") or "")
    return (own or "/"), ("the doctor's own cgroup in the container "
                          f"({'/proc/self/cgroup' if own else 'its namespace root'})")


def _swap(root: Root, limits: EngineLimits, meminfo: Mapping[str, int]) -> EngineLimits:
    devices = tuple(line.split()[0] for line in (root.read("/proc/swaps") or "").splitlines()[1:]
                    if line.split())
    return limits._replace(swap_total=meminfo.get("SwapTotal"), swap_free=meminfo.get("SwapFree"),
                           swap_devices=devices)


def _unified_path(text: str) -> Optional[str]:
    for line in text.replace("\0", "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            return parts[2].strip() or "/"
    return None


def _engine_memlock(root: Root, limits: EngineLimits, engine_pid: Optional[int],
                    container: Optional[str]) -> EngineLimits:
    """The running engine's locked-memory limit and use; in a container where it does not
    run yet, the limit it will inherit, which the doctor has too."""
    if engine_pid is not None:
        memlock = parse_memlock(root.read(f"/proc/{engine_pid}/limits") or "")
        status = parse_status(root.read(f"/proc/{engine_pid}/status") or "")
        return limits._replace(
            memlock=memlock._replace(source=f"/proc/{engine_pid}/limits") if memlock else None,
            locked=status_kb(status, "VmLck"), pinned=status_kb(status, "VmPin"))
    for pid in ("self", "1") if container else ():
        memlock = parse_memlock(root.read(f"/proc/{pid}/limits") or "")
        if memlock is not None:
            return limits._replace(memlock=memlock._replace(source=f"/proc/{pid}/limits"))
    return limits


def _container(root: Root, limits: EngineLimits, container: Optional[str],
               engine_pid: Optional[int]) -> EngineLimits:
    if not container:
        return limits
    pids = ([str(engine_pid)] if engine_pid is not None else []) + ["self", "1"]
    cap, source = _cap_eff(root, pids)
    return limits._replace(container=container, container_evidence=_container_evidence(root, container),
                           cap_eff=cap, cap_source=source)


def _container_evidence(root: Root, container: str) -> str:
    """What shows this is a container, as evidence names it."""
    if root.exists("/.dockerenv"):
        return "/.dockerenv"
    if root.exists("/run/.containerenv"):
        return "/run/.containerenv"
    if root.read_value("/run/systemd/container"):
        return f"/run/systemd/container ({container})"
    environ = (root.read_bytes("/proc/1/environ") or b"").decode("utf-8", "replace")
    entry = next((e for e in environ.split("\0") if e.startswith("container=")), "")
    return f"{entry} in /proc/1/environ" if entry else "/proc/1/cgroup"


def _cap_eff(root: Root, pids: List[str]) -> Tuple[Optional[int], str]:
    """(``CapEff`` of the first of ``pids`` that shows one, its status file)."""
    for pid in pids:
        status = parse_status(root.read(f"/proc/{pid}/status") or "")
        cap = parse_cap(status.get("CapEff", ""))
        if cap is not None:
            return cap, f"/proc/{pid}/status"
    return None, ""


def _default_memlock(root: Root) -> Optional[Limit]:
    found: Optional[Limit] = None
    files = [SYSTEM_CONF[0]]
    for folder in SYSTEM_CONF[1:]:
        files += [f"{folder}/{n}" for n in sorted(root.listdir(folder)) if n.endswith(".conf")]
    for path in files:
        for section, key, value in parse_ini(root.read(path) or ""):
            if section == "Manager" and key == "DefaultLimitMEMLOCK":
                parsed = parse_systemd_bytes(value.split(":")[0], None)
                if parsed is not None:
                    found = Limit(parsed[0], value, path)
    return found
