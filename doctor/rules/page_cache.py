"""Whether page cache is what keeps the arena off the GPU's node (:func:`assess_cache`)."""

from typing import NamedTuple, Optional, Sequence

from strata_doctor.facts.engine import EngineProcess
from strata_doctor.facts.pagecache import NodeCache

ENGINE_PLACED = "engine-placed"
"""The running engine already holds (nearly) all of arena + K/V on the node(s)."""
FITS = "fits"
"""The node(s) have the free memory for arena + K/V."""
SHORT = "short"
"""Short even if the cache were dropped: the cache is not the cause (arena-fit's concern)."""
CACHE_FILLS_NODE = "cache-fills-node"
"""Dropping the cache would make room: the cache sends the arena to the far node."""


class CacheVerdict(NamedTuple):
    """The binding's node(s): their free memory and page cache against arena + K/V."""

    case: str
    """One of this module's cases (:data:`FITS`, :data:`CACHE_FILLS_NODE`...)."""
    pinned: int
    """Arena + K/V, in bytes."""
    held: int
    """What the running engine holds on the node(s) now, freed when it restarts."""
    mem_total: int
    """MemTotal of the node(s)."""
    mem_free: int
    """MemFree of the node(s)."""
    file_pages: int
    """FilePages of the node(s)."""
    inactive_file: int
    """Inactive(file) of the node(s)."""
    zone_reclaim_mode: Optional[int]
    """``vm.zone_reclaim_mode`` where every node reads the same; None otherwise."""

    @property
    def free(self) -> int:
        """Free for the engine: MemFree and what the running engine holds there."""
        return self.mem_free + self.held

    @property
    def short(self) -> int:
        """Bytes of arena + K/V that do not fit the free memory."""
        return self.pinned - self.free


def assess_cache(
    caches: Sequence[NodeCache], pinned: int, engine: Optional[EngineProcess],
) -> CacheVerdict:
    """Judge the node(s)' page cache against ``pinned`` (arena + K/V)."""
    modes = {c.zone_reclaim_mode for c in caches}
    held = sum(engine.bytes_on(c.node) for c in caches) if engine is not None else 0
    verdict = CacheVerdict(
        "", pinned, held, sum(c.mem_total for c in caches), sum(c.mem_free for c in caches),
        sum(c.file_pages for c in caches), sum(c.inactive_file for c in caches),
        next(iter(modes)) if len(modes) == 1 else None,
    )
    return verdict._replace(case=_case(verdict, sum(c.droppable for c in caches)))


def _case(v: CacheVerdict, droppable: int) -> str:
    if v.held and v.held * 10 >= v.pinned * 9:
        return ENGINE_PLACED
    if v.free >= v.pinned:
        return FITS
    if v.free + droppable < v.pinned:
        return SHORT
    return CACHE_FILLS_NODE
