"""Ordinary memory around the engine's start: what is left after it (:func:`project_memory`),
what the compute GPU pins (:func:`gpu_pinned`) and the room the arena has on its node
(:func:`arena_headroom`, :func:`node_room`).

The pool's arithmetic is :mod:`strata_doctor.rules.pool`, the seed's trap
:mod:`strata_doctor.rules.trap`; :class:`~strata_doctor.context.HostContext` keeps each
answer for the host.
"""

from typing import FrozenSet, Mapping, NamedTuple, Optional, Sequence, Tuple

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


class GpuPinned(NamedTuple):
    """The arena and K/V as the engine registers them with its compute GPU."""

    gpu: str
    """The compute GPU's PCI address."""
    size: Optional[int]
    """Arena + K/V in bytes; None without an arena size."""


def gpu_pinned(config: EngineConfig, gpu: Optional[str]) -> Optional[GpuPinned]:
    """The arena and K/V pinned for the compute GPU at ``gpu`` (the engine registers both
    with ``cudaHostRegister`` whenever it has a compute GPU); None without one.

    Pinned pages stay in RAM until the engine unregisters them or exits: reclaim neither
    swaps nor drops them, so no projection may count them as memory the kernel can take
    back while the engine runs. Its restart frees them, as it frees the rest of its memory.
    """
    if gpu is None:
        return None
    return GpuPinned(gpu, config.pinned_bytes)


# -- the arena on its node(s) ---------------------------------------------------------------
def arena_headroom(
    config: EngineConfig, numa: NumaFacts, plan: Optional[BindingPlan], mem_total: Optional[int],
) -> Optional[Tuple[str, int]]:
    """(nodes, bytes left) on the planned node(s) after arena, K/V and headroom, as the
    arena-fit check computes it; negative when it does not fit; None without an arena or
    when a counted node's size is unknown. ``plan`` None (or a host without NUMA facts)
    compares with ``mem_total``, the host's size (:func:`host_room`)."""
    pinned = config.pinned_bytes
    if pinned is None:
        return None
    need = pinned + config.headroom_bytes
    room = node_room(numa, plan)
    if room is None:
        return ("all", mem_total - need) if mem_total is not None else None
    return (room.nodes_text, room.total - need) if room.total is not None else None


class ArenaRoom(NamedTuple):
    """The memory the arena is bound to: the planned node(s), or the whole host."""

    nodes: FrozenSet[int]
    """The planned memory nodes; empty when the whole host counts."""
    counted: Tuple[NumaNode, ...]
    """The NUMA nodes whose memory is counted; empty when ``/proc/meminfo`` counts."""
    nodes_text: str
    """The planned nodes as the plan writes them (``1`` or ``0,1``); empty for the whole host."""
    total: Optional[int]
    """MemTotal of the node(s) or the host; None when unreadable."""
    free: Optional[int]
    """MemFree of the node(s), MemAvailable (MemFree without it) of the host; None when a
    counted meminfo does not say."""
    host: bool = False
    """Whether the whole host counts (no binding plan, or no NUMA facts)."""
    source: str = "nodes"
    """Where ``total`` comes from: ``nodes`` (the counted nodes' meminfo, summed) or
    ``/proc/meminfo``."""
    unread: Tuple[int, ...] = ()
    """Nodes to count whose meminfo gives no MemTotal (absent or unreadable); ``total`` is
    None when there is any, as an unknown node is never taken for an empty one."""
    preferred: Optional[NumaNode] = None
    """With no planned node, on a host of two or more nodes: the one with the most MemFree,
    where the engine's memory would best go; None when no node says its MemFree."""


def node_room(numa: NumaFacts, plan: Optional[BindingPlan]) -> Optional[ArenaRoom]:
    """The planned node(s)' memory; None without a plan or NUMA facts (the host counts)."""
    if plan is None or not numa.nodes:
        return None
    counted = tuple(n for n in numa.nodes if n.id in plan.mem_nodes)
    unread = tuple(n.id for n in counted if n.memory_total is None)
    total = _known_sum([n.memory_total for n in counted]) if counted else None
    free = _known_sum([n.memory_free for n in counted])
    return ArenaRoom(plan.mem_nodes, counted, plan.nodes_text, total, free, unread=unread)


def host_room(meminfo: Mapping[str, int], numa: NumaFacts) -> ArenaRoom:
    """The whole host's memory: ``/proc/meminfo``'s MemTotal, else (a capture of ``sys/``
    alone) the sum of every node's MemTotal; unknown when neither tells."""
    preferred = preferred_node(numa)
    total = meminfo.get("MemTotal")
    if total is not None:
        free = meminfo.get("MemAvailable", meminfo.get("MemFree"))
        return ArenaRoom(frozenset(), (), "", total, free, host=True, source="/proc/meminfo",
                         preferred=preferred)
    unread = tuple(n.id for n in numa.nodes if n.memory_total is None)
    total = _known_sum([n.memory_total for n in numa.nodes]) if numa.nodes else None
    free = _known_sum([n.memory_free for n in numa.nodes]) if numa.nodes else None
    return ArenaRoom(frozenset(), numa.nodes, "", total, free, host=True, unread=unread,
                     preferred=preferred)


def preferred_node(numa: NumaFacts) -> Optional[NumaNode]:
    """The node with the most MemFree (the lowest id of equals), on a host of two or more
    nodes with memory; None on one node, where there is no choice, or when none says."""
    with_memory = [n for n in numa.nodes if n.has_memory]
    told = [n for n in with_memory if n.memory_free is not None]
    if len(with_memory) < 2 or not told:
        return None
    return max(told, key=lambda n: (n.memory_free or 0, -n.id))


def _known_sum(values: Sequence[Optional[int]]) -> Optional[int]:
    """The sum, or None when any value is unknown (an unknown is never counted as 0)."""
    if any(value is None for value in values):
        return None
    return sum(value or 0 for value in values)


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
