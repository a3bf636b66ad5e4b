"""Rules: pure decisions over facts, no I/O and no rendering.

What the default hugepage pool does to the engine's next start (:func:`assess_pool`),
whether a configured pool size resolves it (:func:`pending_pool`, :func:`trap_in_effect`),
ordinary memory after the start (:func:`project_memory`), whether a pool the arena cannot
use is the seed's trap or only held-back memory (:func:`assess_trap`) and the engine's
exposure to systemd-oomd (:func:`assess_exposure`). The NUMA binding plan is in
:mod:`strata_doctor.binding`. :class:`~strata_doctor.context.HostContext` keeps each
answer for the host (``ctx.pool_assessment``, ``ctx.exposure``, ``ctx.binding_plan``).
"""

import math
from typing import NamedTuple, Optional, Tuple

from strata_doctor.binding import BindingPlan
from strata_doctor.config import EngineConfig
from strata_doctor.facts.hugepages import HugepageFacts, PagePool, format_page_size
from strata_doctor.facts.numa import NumaFacts
from strata_doctor.facts.oomd import OomdFacts, Watched
from strata_doctor.facts.parse import format_bytes, format_count

CHAIN = "hugepage trap → THP fallback → memory pressure → oomd kill → restart loop"
"""The seed's failure chain, as findings name it."""


# -- the engine's need and what the pool will do to it ------------------------------------
class HugepageNeed(NamedTuple):
    """How many hugepages the arena needs: ceil(arena / page size)."""

    arena: int
    """Arena bytes."""
    page_size: int
    """Default hugepage size in bytes."""

    @property
    def pages(self) -> int:
        """ceil(arena / page size)."""
        return math.ceil(self.arena / self.page_size)

    @property
    def arithmetic(self) -> str:
        """E.g. ``46.84 GiB / 2 MiB → 23,983 pages``."""
        return (f"{format_bytes(self.arena)} / {format_page_size(self.page_size)} → "
                f"{format_count(self.pages)} pages")


class PoolAssessment(NamedTuple):
    """What the default pool means for the engine's next start."""

    mode: str
    """The engine's hugepage mode: ``auto``, ``hugetlb`` or ``thp``."""
    pool: Optional[PagePool]
    """The default-size pool; None when the kernel shows none."""
    need: Optional[HugepageNeed]
    """The arena's need; None when no arena size is known."""
    engine_pages: int
    """Pages the running engine holds now (freed, then taken again, at its restart)."""
    available: int
    """Pages a fresh MAP_HUGETLB of the arena could get: free - reserved + the engine's own
    + overcommit headroom."""

    @property
    def uses_pool(self) -> bool:
        """Whether the engine tries MAP_HUGETLB at all."""
        return self.mode in ("auto", "hugetlb") and self.pool is not None and self.pool.total + \
            self.pool.overcommit > 0

    @property
    def fails(self) -> bool:
        """MAP_HUGETLB of the whole arena will fail."""
        return self.uses_pool and self.need is not None and self.need.pages > self.available

    @property
    def trap(self) -> bool:
        """MAP_HUGETLB fails, the engine falls back to THP, and the pool keeps its memory
        away from the fallback. Whether that is the seed's trap (an error) or only memory
        held back (a warning) is for :func:`assess_trap` to say, from the numbers."""
        return self.fails and self.mode == "auto" and self.pool is not None and self.pool.total > 0

    @property
    def held_back(self) -> int:
        """Bytes that ``vm.nr_hugepages = 0`` gives back to ordinary memory for the engine's
        next start: the pool's free pages that no mapping reserves, and the running engine's
        own pages. Pages other processes hold stay theirs until they exit."""
        if self.pool is None:
            return 0
        return (max(0, self.pool.free - self.pool.reserved) + self.engine_pages) * self.pool.size

    @property
    def relies_on_thp(self) -> bool:
        """Whether the arena will be (or may be) backed by transparent hugepages."""
        if self.mode == "thp":
            return True
        if self.mode == "hugetlb":
            return False
        return not self.uses_pool or self.fails or self.need is None

    @property
    def missing(self) -> int:
        """Pages short of the need (0 when it fits)."""
        return max(0, self.need.pages - self.available) if self.need else 0


def assess_pool(facts: HugepageFacts, config: EngineConfig, engine_pid: Optional[int]) -> PoolAssessment:
    """Decide what the default pool does to the engine's next start."""
    pool = facts.default_pool
    need = HugepageNeed(config.arena_bytes, facts.page_size) if config.arena_bytes else None
    holder = facts.holder(engine_pid)
    engine_pages = holder.bytes // facts.page_size if holder else 0
    available = 0
    if pool is not None:
        headroom = max(0, pool.overcommit - pool.surplus)
        available = max(0, pool.free - pool.reserved) + engine_pages + headroom
    return PoolAssessment(config.hugepages, pool, need, engine_pages, available)


class MemoryProjection(NamedTuple):
    """Ordinary (non-hugetlb) memory after the engine's next start."""

    free_now: int
    """Ordinary memory free now: ``MemAvailable`` (``MemFree`` without it). Hugepage pools are
    never in it, so MemTotal minus the pools is no part of the sum."""
    free_source: str
    """The meminfo field ``free_now`` is: ``MemAvailable`` or ``MemFree``."""
    engine_held: int
    """Ordinary memory the running engine holds now (its resident memory less its hugepages),
    free again when it restarts; 0 when no engine runs."""
    need: int
    """Ordinary memory the engine will take: arena (unless MAP_HUGETLB succeeds) + K/V, or its
    whole footprint now when that is larger (runtime, heap, CUDA context)."""
    headroom: int
    """The headroom to keep (``headroom:``)."""
    footprint: bool = False
    """Whether ``need`` is the running engine's footprint rather than arena + K/V."""
    given_back: int = 0
    """Memory a pool given back adds (:attr:`TrapVerdict.released`); 0 with the pool as it is."""

    @property
    def available(self) -> int:
        """Ordinary memory the engine can have: free now, what it holds, what a pool gives back."""
        return self.free_now + self.engine_held + self.given_back

    @property
    def left(self) -> int:
        """What remains for everything else once the engine has loaded."""
        return self.available - self.need

    @property
    def short(self) -> bool:
        """Less than the headroom remains: reclaim, pressure stalls, and kills follow."""
        return self.left < self.headroom

    @property
    def arithmetic(self) -> str:
        """The sum, with the host's numbers, each term named so that a reader can redo it:
        ``MemAvailable 13.49 GiB + 52.91 GiB the running engine holds (free again at its
        restart) - 52.91 GiB for the engine (its footprint now) = 13.49 GiB left (headroom
        4.00 GiB)``."""
        terms = [f"{self.free_source} {format_bytes(self.free_now)}"]
        if self.engine_held:
            terms.append(f"{format_bytes(self.engine_held)} the running engine holds (free again "
                         "at its restart)")
        if self.given_back:
            terms.append(f"{format_bytes(self.given_back)} the pool gives back")
        return (" + ".join(terms) + f" - {format_bytes(self.need)} for the engine"
                f"{' (its footprint now)' if self.footprint else ''} = {format_bytes(self.left)} "
                f"left (headroom {format_bytes(self.headroom)})")


def project_memory(
    facts: HugepageFacts, config: EngineConfig, assessment: PoolAssessment,
    engine_resident: int,
) -> Optional[MemoryProjection]:
    """Project ordinary memory after the next start; None without MemTotal, free memory or an
    arena."""
    total = facts.mem("MemTotal")
    source = "MemAvailable"
    available = facts.mem(source)
    if available is None:
        source = "MemFree"
        available = facts.mem(source)
    if total is None or available is None or config.arena_bytes is None:
        return None
    engine_hugetlb = assessment.engine_pages * facts.page_size
    ordinary_held = max(0, engine_resident - engine_hugetlb)
    in_pool = assessment.uses_pool and not assessment.fails
    pinned = config.kv_bytes + (0 if in_pool else config.arena_bytes)
    # A running engine comes back with its whole footprint, not only arena + K/V.
    need = max(pinned, ordinary_held)
    return MemoryProjection(available, source, ordinary_held, need, config.headroom_bytes,
                            footprint=need > pinned)


class PendingPool(NamedTuple):
    """A pool size written in the configuration but not yet in effect."""

    pages: int
    """What the configuration sets."""
    path: str
    """The file that sets it."""

    @property
    def after(self) -> str:
        """When it takes effect."""
        if "sysctl" in self.path:
            return "`sysctl --system` (or a reboot)"
        return "a reboot (after regenerating the boot configuration)"


def pending_pool(facts: HugepageFacts, current: int) -> Optional[PendingPool]:
    """The configured default-pool size when it differs from the pool now."""
    configured = facts.configured_pages()
    if configured is None or configured[0] == current:
        return None
    return PendingPool(*configured)


class TrapVerdict(NamedTuple):
    """Whether a pool the arena cannot use (hugepages: auto, MAP_HUGETLB fails) is the
    seed's trap, from the host's own numbers.

    It is when the pool makes the difference: the memory projected after the THP fallback
    falls short of the headroom, and giving the pool back (:attr:`PoolAssessment.held_back`)
    would leave the headroom (:attr:`pool_short`); or systemd-oomd watches the engine and
    the fallback drives it into pressure (:attr:`chain`). On a host too small for the
    engine whatever the pool holds, arena-fit carries the error and the pool is a warning.
    """

    held_back: int
    """Bytes that ``vm.nr_hugepages = 0`` would give back (:attr:`PoolAssessment.held_back`)."""
    projection: Optional[MemoryProjection]
    """Ordinary memory after the start with the pool as it is; None without MemAvailable."""
    watched: bool
    """systemd-oomd is active on cgroup v2 and can pick the engine (watched, not protected)."""
    killed: bool
    """The journal shows oomd kills of the engine and its unit is restart-looping."""

    @property
    def released(self) -> Optional[MemoryProjection]:
        """The projection with the pool given back."""
        p = self.projection
        return p._replace(given_back=self.held_back) if p is not None else None

    @property
    def pool_short(self) -> bool:
        """Short of the headroom because of the pool: short now, not short without it."""
        released = self.released
        return self.projection is not None and released is not None and self.projection.short \
            and not released.short

    @property
    def cured(self) -> bool:
        """Giving the pool back leaves the headroom (or the projection is unknown)."""
        released = self.released
        return released is None or not released.short

    @property
    def chain(self) -> bool:
        """The seed's chain: oomd watches the engine, and the fallback drives it into
        pressure (projected short because of the pool, or oomd has already killed the
        engine into a restart loop) which the pool's memory would relieve."""
        return self.watched and self.held_back > 0 and self.cured and (self.pool_short or self.killed)

    @property
    def error(self) -> bool:
        """The seed's trap: an error. Otherwise the pool only holds memory back."""
        return self.held_back > 0 and (self.pool_short or self.chain)


def pool_fix_pending(facts: HugepageFacts, a: PoolAssessment) -> Optional[PendingPool]:
    """The configured default-pool size, not yet in effect, that ends MAP_HUGETLB's failure
    (what the hugepages check reports as ``configured``); None when there is none."""
    if a.pool is None:
        return None
    pending = pending_pool(facts, a.pool.total)
    return pending if pending is not None and pool_resolved(pending.pages, a) else None


def trap_in_effect(facts: HugepageFacts, a: PoolAssessment) -> bool:
    """MAP_HUGETLB fails beside a pool (:attr:`PoolAssessment.trap`) now, and no fix for it is
    waiting in the configuration (:func:`pool_fix_pending`). Whether that is the seed's trap
    is :func:`assess_trap`'s answer."""
    if not a.trap or a.pool is None:
        return False
    return pool_fix_pending(facts, a) is None


def pool_resolved(pages: int, a: PoolAssessment) -> bool:
    """Whether a default pool of ``pages`` (configured, not yet in effect) ends the trap."""
    # After sysctl --system or a boot the configured pool is free (orphans vanish at boot).
    if pages == 0:
        return a.mode != "hugetlb"
    return a.need is not None and pages >= a.need.pages


# -- the arena on its node(s) ---------------------------------------------------------------
def arena_headroom(
    config: EngineConfig, numa: NumaFacts, plan: Optional[BindingPlan], mem_total: Optional[int],
) -> Optional[Tuple[str, int]]:
    """(nodes, bytes left) on the planned node(s) after arena, K/V and headroom, as the
    arena-fit check computes it; negative when it does not fit; None without an arena.
    ``plan`` None (or a host without NUMA facts) compares with ``mem_total`` (MemTotal)."""
    pinned = config.pinned_bytes
    if pinned is None:
        return None
    need = pinned + config.headroom_bytes
    if plan is None or not numa.nodes:
        return ("all", mem_total - need) if mem_total is not None else None
    total = sum(n.memory_total or 0 for n in numa.nodes if n.id in plan.mem_nodes)
    return plan.nodes_text, total - need


# -- systemd-oomd ------------------------------------------------------------------------
class Exposure(NamedTuple):
    """Whether systemd-oomd can kill the engine, and what protects it."""

    watched: Tuple[Watched, ...]
    """Watched cgroups on the engine's path (itself or an ancestor)."""
    preference: str
    """The engine unit's loaded ManagedOOMPreference (``none`` when unset)."""
    honoured: bool
    """Whether oomd honours a preference for the engine's cgroup (root-owned: a system
    service, not a unit or scope under ``user@UID.service``)."""
    configured: Optional[Tuple[str, str]]
    """(value, file) of ManagedOOMPreference in the engine unit's files on disk."""
    swap_usable: bool
    """Whether the host has swap (ManagedOOMSwap cannot fire without it)."""

    @property
    def effective_watch(self) -> Tuple[Watched, ...]:
        """The watches that can fire: pressure always, swap only with swap."""
        return tuple(w for w in self.watched if w.kind == "memory-pressure" or self.swap_usable)

    @property
    def protected(self) -> bool:
        """``avoid`` or ``omit`` is loaded and honoured."""
        return self.honoured and self.preference in ("avoid", "omit")

    @property
    def pending(self) -> bool:
        """``avoid``/``omit`` is written in a unit file but not loaded yet."""
        return (self.honoured and not self.protected and self.configured is not None
                and self.configured[0] in ("avoid", "omit"))

    @property
    def exposed(self) -> bool:
        """oomd can pick the engine as its victim."""
        return bool(self.effective_watch) and not self.protected


def assess_exposure(facts: OomdFacts) -> Exposure:
    """How exposed the engine is to systemd-oomd (whatever oomd's state)."""
    engine = facts.engine_settings
    preference = (engine.preference if engine and engine.shown else "") or "none"
    configured = engine.on_disk("ManagedOOMPreference") if engine else None
    honoured = facts.engine_cgroup is not None and facts.user_uid is None
    swap = bool(facts.swap_total)
    return Exposure(facts.watched(), preference, honoured, configured, swap)


# -- the seed's trap, from the numbers ------------------------------------------------------
def restart_looping(facts: OomdFacts) -> bool:
    """The engine's unit restarts after failures (NRestarts, Result=oom-kill, auto-restart)."""
    return bool(facts.n_restarts) or facts.result == "oom-kill" or "auto-restart" in facts.active_state \
        or facts.active_state.startswith(("failed", "activating"))


def assess_trap(
    facts: HugepageFacts, config: EngineConfig, a: PoolAssessment, engine_resident: int,
    oomd: OomdFacts, exposure: Exposure,
) -> Optional[TrapVerdict]:
    """Judge a pool the arena cannot use (:attr:`PoolAssessment.trap`); None otherwise."""
    if not a.trap:
        return None
    watched = oomd.active and oomd.cgroup_v2 is not False and exposure.exposed
    killed = bool(oomd.engine_kills()) and restart_looping(oomd)
    return TrapVerdict(a.held_back, project_memory(facts, config, a, engine_resident), watched, killed)
