"""The hugepage pool's arithmetic: what the engine needs from it, what it holds back, and
what a fix leaves pending."""

import math
from typing import NamedTuple, Optional, Tuple

from strata_doctor.config import EngineConfig
from strata_doctor.facts.hugepage_pools import NodePool, PagePool
from strata_doctor.facts.hugepages import HugepageFacts, format_page_size
from strata_doctor.facts.parse import format_bytes, format_count


def pool_words(pool: PagePool) -> str:
    """``24,000 2 MiB pages (46.88 GiB)``."""
    pages = "page" if pool.total == 1 else "pages"
    return (f"{format_count(pool.total)} {format_page_size(pool.size)} {pages} "
            f"({format_bytes(pool.total * pool.size)})")


class OtherSizes(NamedTuple):
    """The pools of sizes other than the default: MAP_HUGETLB without a size flag never
    draws on them, yet they hold their memory back from every ordinary allocation."""

    pools: Tuple[PagePool, ...]
    """Each other size's pool that holds pages, smallest size first."""
    nodes: Tuple[NodePool, ...]
    """Their per-node shares that hold pages."""

    @property
    def bytes(self) -> int:
        """Memory they take out of ordinary use."""
        return sum(p.bytes for p in self.pools)

    def where(self, pool: PagePool) -> str:
        """`` on node 0``, or ``, 100 on node 0 and 28 on node 1``; empty without per-node
        pools."""
        shares = [(n.node, n.total + n.surplus) for n in self.nodes if n.size == pool.size]
        if len(shares) == 1:
            return f" on node {shares[0][0]}"
        words = [f"{format_count(pages)} on node {node}" for node, pages in shares]
        return ", " + " and ".join([", ".join(words[:-1]), words[-1]]) if words else ""

    @property
    def text(self) -> str:
        """``128 2 MiB pages on node 0``, each size in turn (``; `` between them)."""
        return "; ".join(f"{format_count(p.total + p.surplus)} {format_page_size(p.size)} pages"
                         f"{self.where(p)}" for p in self.pools)


def other_sizes(facts: HugepageFacts) -> OtherSizes:
    """The pools of every size but the default that hold pages, globally and per node."""
    pools = tuple(p for p in facts.pools if p.size != facts.page_size and p.bytes)
    sizes = {p.size for p in pools}
    nodes = tuple(n for n in facts.node_pools if n.size in sizes and n.total + n.surplus)
    return OtherSizes(pools, nodes)


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

    @property
    def taken(self) -> int:
        """Pages of the pool that are not free (0 without a pool)."""
        return self.pool.total - self.pool.free if self.pool else 0

    @property
    def grow_to(self) -> int:
        """Pages a pool grown for the arena needs: the arena's, and those other processes
        hold (0 without an arena)."""
        return self.need.pages + max(0, self.taken - self.engine_pages) if self.need else 0

    @property
    def spare(self) -> int:
        """Pages that stay idle once the arena has its pages (0 without a pool or arena)."""
        if self.pool is None or self.need is None:
            return 0
        return self.pool.total - self.need.pages - (self.pool.used - self.engine_pages)


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
