"""Ordinary memory around the engine's start: what is left after it (:func:`project_memory`)
and the room the arena has on its node (:func:`arena_headroom`, :func:`node_room`).

The pool's arithmetic is :mod:`strata_doctor.rules.pool`, the seed's trap
:mod:`strata_doctor.rules.trap`; :class:`~strata_doctor.context.HostContext` keeps each
answer for the host.
"""

from typing import FrozenSet, Mapping, NamedTuple, Optional, Tuple

from strata_doctor.config import EngineConfig
from strata_doctor.facts.engine import EngineProcess
from strata_doctor.facts.hugepages import HugepageFacts
from strata_doctor.facts.numa import NumaFacts, NumaNode
from strata_doctor.facts.parse import format_bytes
from strata_doctor.rules.binding import BindingPlan
from strata_doctor.rules.pool import PoolAssessment


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


class ArenaRoom(NamedTuple):
    """The memory the arena is bound to: the planned node(s), or the whole host."""

    nodes: FrozenSet[int]
    """The planned memory nodes; empty when the whole host counts."""
    counted: Tuple[NumaNode, ...]
    """The NUMA nodes whose memory is counted; empty for the whole host."""
    nodes_text: str
    """The planned nodes as the plan writes them (``1`` or ``0,1``); empty for the whole host."""
    total: Optional[int]
    """MemTotal of the node(s) or the host; None when unreadable."""
    free: Optional[int]
    """MemFree of the node(s), MemAvailable (MemFree without it) of the host."""
    host: bool = False
    """Whether the whole host counts (no binding plan, or no NUMA facts)."""


def node_room(numa: NumaFacts, plan: Optional[BindingPlan]) -> Optional[ArenaRoom]:
    """The planned node(s)' memory; None without a plan or NUMA facts (the host counts)."""
    if plan is None or not numa.nodes:
        return None
    counted = tuple(n for n in numa.nodes if n.id in plan.mem_nodes)
    total = sum(n.memory_total or 0 for n in counted)
    free = sum(n.memory_free or 0 for n in counted)
    return ArenaRoom(plan.mem_nodes, counted, plan.nodes_text, total, free)


def host_room(meminfo: Mapping[str, int]) -> ArenaRoom:
    """The whole host's memory, from ``/proc/meminfo``."""
    free = meminfo.get("MemAvailable", meminfo.get("MemFree"))
    return ArenaRoom(frozenset(), (), "", meminfo.get("MemTotal"), free, host=True)


def engine_held(engine: Optional[EngineProcess], nodes: FrozenSet[int]) -> int:
    """Memory the running engine holds on ``nodes`` (all of it when empty), free again at
    its restart; 0 when no engine runs."""
    if engine is None:
        return 0
    if not nodes:
        return engine.resident_bytes
    return sum(engine.bytes_on(n) for n in nodes)


def spill_node(numa: NumaFacts, nodes: FrozenSet[int]) -> Optional[Tuple[int, int]]:
    """(distance, node) of the nearest node with memory outside ``nodes``, where a preferred
    policy spills what does not fit; None when there is none."""
    first = numa.node(min(nodes)) if nodes else None
    if first is None:
        return None
    others = sorted((first.distance_to(n.id) or 999, n.id) for n in numa.nodes
                    if n.id not in nodes and n.has_memory)
    return others[0] if others else None
