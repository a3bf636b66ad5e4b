"""What the default hugepage pool means for the engine, as one answer (:func:`judge_pool`):
the case the hugepages check words, and the configuration it names.
"""

from typing import Callable, NamedTuple, Optional

from strata_doctor.facts.hugepages import HugepageFacts
from strata_doctor.rules.pool import PendingPool, PoolAssessment, pending_pool, pool_fix_pending
from strata_doctor.rules.trap import TrapVerdict

HUGETLB_NO_ARENA = "hugetlb-no-arena"
"""No pool, hugetlb mode, and no arena size to size one with."""
HUGETLB_NO_POOL = "hugetlb-no-pool"
"""No pool, and hugetlb mode has no fallback: the engine will not start."""
TRAP_AT_BOOT = "trap-at-boot"
"""No pool now, but the configured one is too small for the arena and will trap it."""
NO_POOL = "no-pool"
"""No pool, and nothing needs one."""
CONFIGURED = "configured"
"""A configured pool, not in effect yet, settles the pool."""
TRAP = "trap"
"""The seed's trap (:attr:`TrapVerdict.error`)."""
HELD_BY_OTHERS = "held-by-others"
"""MAP_HUGETLB fails, but other processes hold every page: the pool holds nothing back."""
UNUSABLE = "unusable"
"""MAP_HUGETLB fails and the pool holds memory back, without making the trap."""
TOO_SMALL = "too-small"
"""hugetlb mode and a pool too small: the engine will not start."""
ORPHANS = "orphans"
"""hugetlb mode fails only because of orphaned files: their finding carries it."""
UNUSED_THP = "unused-thp"
"""A pool nobody uses while the engine runs on THP."""
UNUSED_NO_ARENA = "unused-no-arena"
"""A pool nobody uses now, and no arena size to check it against."""
IN_USE = "in-use"
"""A pool others use, which the engine does not (THP mode, or no arena size)."""
FITS = "fits"
"""The arena fits the pool."""


class PoolVerdict(NamedTuple):
    """The default pool's case and the configuration it names."""

    case: str
    """One of this module's cases (:data:`TRAP`, :data:`FITS`...)."""
    pending: Optional[PendingPool]
    """The configured pool not in effect yet: the one :data:`CONFIGURED` and
    :data:`TRAP_AT_BOOT` name."""
    overcommit: str = ""
    """For :data:`NO_POOL` in auto mode with overcommit and an arena: ``short`` (MAP_HUGETLB
    fails, the engine falls back to THP) or ``enough``; empty otherwise."""


def judge_pool(
    facts: HugepageFacts, a: PoolAssessment, trap: Callable[[], Optional[TrapVerdict]],
    orphans_block: bool,
) -> PoolVerdict:
    """Decide the default pool's case. ``trap`` gives
    :func:`~strata_doctor.rules.trap.assess_trap`'s answer; it is asked only where a pool
    fails the arena, since it reads systemd-oomd's facts. ``orphans_block``: whether
    orphaned files alone make hugetlb mode fail."""
    pending = pending_pool(facts, a.pool.total if a.pool else 0)
    if _empty(a):
        return _empty_pool(a, pending)
    if a.fails:
        verdict = trap()
        resolving = pool_fix_pending(facts, a)
        return PoolVerdict(_failing(resolving, verdict, orphans_block), resolving)
    if a.mode == "thp" or a.need is None:
        return PoolVerdict(_not_for_engine(facts, a, pending), pending)
    return PoolVerdict(FITS, pending)


def _empty(a: PoolAssessment) -> bool:
    # An empty pool holds nothing back, whatever overcommit allows on demand: only
    # hugepages: hugetlb, which has no fallback, makes it a finding.
    pool = a.pool
    return pool is None or (pool.total == 0 and (a.mode != "hugetlb" or
                                                 (pool.surplus == 0 and pool.overcommit == 0)))


def _empty_pool(a: PoolAssessment, pending: Optional[PendingPool]) -> PoolVerdict:
    need = a.need
    if a.mode == "hugetlb":
        if need is None:
            return PoolVerdict(HUGETLB_NO_ARENA, pending)
        if pending and pending.pages >= need.pages:
            return PoolVerdict(CONFIGURED, pending)
        return PoolVerdict(HUGETLB_NO_POOL, pending)
    if pending and pending.pages > 0 and need is not None and pending.pages < need.pages \
            and a.mode == "auto":
        return PoolVerdict(TRAP_AT_BOOT, pending)
    return PoolVerdict(NO_POOL, pending, _overcommit(a))


def _overcommit(a: PoolAssessment) -> str:
    if a.pool is None or not a.pool.overcommit or a.mode != "auto" or a.need is None:
        return ""
    return "short" if a.fails else "enough"


def _failing(resolving: Optional[PendingPool], trap: Optional[TrapVerdict], orphans_block: bool) -> str:
    if resolving is not None:
        return CONFIGURED
    if trap is not None and trap.error:
        return TRAP
    if trap is not None:
        return HELD_BY_OTHERS if trap.held_back == 0 else UNUSABLE
    return ORPHANS if orphans_block else TOO_SMALL


def _not_for_engine(facts: HugepageFacts, a: PoolAssessment, pending: Optional[PendingPool]) -> str:
    assert a.pool is not None
    if a.pool.used or facts.holders:
        return IN_USE
    if pending and pending.pages == 0:
        return CONFIGURED
    return UNUSED_THP if a.mode == "thp" else UNUSED_NO_ARENA
