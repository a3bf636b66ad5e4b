"""Which cgroup limit binds the engine: the tightest along its cgroup's ancestry, or what a
stopped unit's own files set (its next start gets those); and which of the engine's memory
RLIMIT_MEMLOCK is charged with (:func:`memlock_need`)."""

from typing import NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.cgroup import EngineLimits, Limit, NodeSet, parse_systemd_bytes
from strata_doctor.facts.cgroup_path import CgroupPath
from strata_doctor.facts.parse import parse_cpulist


def tightest(found: Sequence[Limit]) -> Optional[Limit]:
    """The smallest limit of ``found``; the first ``max`` when none is a number.

    ``max`` is kept so that a finding quoting the path as unlimited has a file for evidence;
    any number from the unit's cgroup or a parent is tighter than it.
    """
    best: Optional[Limit] = None
    for limit in found:
        if best is None or _below(limit.value, best):
            best = limit
    return best


def configured_limit(limit: Optional[Limit], key: str, setting: Optional[Tuple[str, str]],
                     mem_total: Optional[int]) -> Optional[Limit]:
    """``limit``, or a stopped unit's ``key=`` (value, file) where that is tighter.

    ``MemorySwapMax=infinity`` stands where no cgroup says anything, so the swap check can
    quote it; a ``MemoryMax=infinity`` loosens nothing and is not quoted.
    """
    if setting is None:
        return limit
    parsed = parse_systemd_bytes(setting[0], mem_total)
    if parsed is None:
        return limit
    own = Limit(parsed[0], f"{key}={setting[0]}", setting[1])
    if own.value is not None and (limit is None or _below(own.value, limit)):
        return own
    if own.value is None and key == "MemorySwapMax" and limit is None:
        return own
    return limit


def configured_nodes(nearest: Optional[NodeSet], key: str,
                     setting: Optional[Tuple[str, str]]) -> Optional[NodeSet]:
    """A stopped unit's ``key=`` (``AllowedMemoryNodes=``, ``AllowedCPUs=``) over its
    slices' nearest cpuset."""
    if setting is None:
        return nearest
    return NodeSet(parse_cpulist(",".join(setting[0].split())), f"{key}={setting[0]}", setting[1])


def tightest_limits(limits: EngineLimits, path: Optional[CgroupPath],
                    mem_total: Optional[int]) -> EngineLimits:
    """``limits`` with the memory and cpuset limits that bind the engine; ``mem_total``
    turns a ``MemoryMax=80%`` into bytes."""
    if path is None:
        return limits

    def own(key: str) -> Optional[Tuple[str, str]]:
        return None if path.running else limits.setting(key)

    return limits._replace(
        running=path.running,
        memory_max=configured_limit(tightest(path.memory_max), "MemoryMax", own("MemoryMax"), mem_total),
        memory_high=configured_limit(tightest(path.memory_high), "MemoryHigh", own("MemoryHigh"), mem_total),
        swap_max=configured_limit(tightest(path.swap_max), "MemorySwapMax", own("MemorySwapMax"), mem_total),
        mems=configured_nodes(path.mems, "AllowedMemoryNodes", own("AllowedMemoryNodes")),
        cpus=configured_nodes(path.cpus, "AllowedCPUs", own("AllowedCPUs")),
        files_read=path.files_read,
    )


def _below(value: Optional[int], limit: Limit) -> bool:
    """Whether a number is tighter than ``limit`` (no limit is never tighter)."""
    return value is not None and (limit.value is None or value < limit.value)


# -- RLIMIT_MEMLOCK: what it is charged with -------------------------------------------------
LOCK_CONFIG = "lock"
"""The config says ``lock: true``: the engine mlock()s arena + K/V, all charged to the limit."""
LOCKED_NOW = "locked"
"""The running engine's ``VmLck`` covers arena + K/V: it mlocks them without ``lock: true``."""
PINNED_NOW = "pinned"
"""The running engine's ``VmPin`` covers arena + K/V: RDMA-style pinning charged them."""
NOT_CHARGED = "not-charged"
"""None of that: the limit holds only what ``VmLck``/``VmPin`` show, never the arena."""


class MemlockNeed(NamedTuple):
    """What RLIMIT_MEMLOCK must hold for the engine, and why."""

    case: str
    """One of :data:`LOCK_CONFIG`, :data:`LOCKED_NOW`, :data:`PINNED_NOW`, :data:`NOT_CHARGED`."""
    need: int
    """Bytes the limit must hold: arena + K/V, or (not charged) the larger of VmLck and VmPin."""

    @property
    def arena_charged(self) -> bool:
        """Whether the arena itself is charged to the limit."""
        return self.case != NOT_CHARGED


def memlock_need(lock: bool, arena_kv: Optional[int], locked: int, pinned: int) -> MemlockNeed:
    """Which of the engine's bytes RLIMIT_MEMLOCK counts.

    The kernel charges the limit for mlock() (mm/mlock.c, against ``locked_vm``: ``VmLck``,
    which vfio's pinning also raises) and for RDMA memory registration (ib_umem_get, against
    ``pinned_vm``: ``VmPin``), each counter on its own. Memory the GPU driver pins for
    ``cudaHostRegister`` (os_lock_user_pages: pin_user_pages) raises neither, so an arena
    registered with the GPU and not mlocked never meets the limit.
    """
    if lock and arena_kv is not None:
        return MemlockNeed(LOCK_CONFIG, arena_kv)
    if arena_kv is not None and locked >= arena_kv:
        return MemlockNeed(LOCKED_NOW, arena_kv)
    if arena_kv is not None and pinned >= arena_kv:
        return MemlockNeed(PINNED_NOW, arena_kv)
    return MemlockNeed(NOT_CHARGED, max(locked, pinned))
