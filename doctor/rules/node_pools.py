"""Where the hugepage pool sits: whether the GPU's node holds the pages the arena needs,
and what a per-node pool would set.
"""

from typing import Dict, NamedTuple, Optional, Tuple

from strata_doctor.facts.hugepage_pools import NodePool
from strata_doctor.facts.hugepages import Holder, HugepageFacts
from strata_doctor.facts.parse import format_count
from strata_doctor.rules.pool import PoolAssessment


class NodeShortfall(NamedTuple):
    """The default pool's pages are not on the GPU's node: the arena would come partly
    from other nodes."""

    target: int
    """The GPU's node."""
    nodes: Tuple[NodePool, ...]
    """The default size's pool on every node."""
    need: int
    """Pages the arena needs."""
    have: int
    """Pages the arena can get on the target: its free pages and the running engine's own."""
    engine: Optional[Holder]
    """The running engine, when its numa_maps name the nodes of its hugetlb pages."""
    configured: Optional[Tuple[int, str]]
    """(pages, file) of a per-node pool on the target configured for the next boot that
    covers the need; None when there is none."""
    grow_to: int
    """Pages the target's pool needs: the arena's and those other processes hold there."""

    @property
    def elsewhere(self) -> int:
        """Pages of the arena that would come from other nodes."""
        return self.need - self.have

    @property
    def counts(self) -> str:
        """``node 0: 12,000 (free 12,000), node 1: 0 (free 0)``."""
        return ", ".join(f"node {n.node}: {format_count(n.total)} (free {format_count(n.free)})"
                         for n in self.nodes)

    @property
    def engine_where(self) -> str:
        """The running engine's hugetlb pages by node: ``node 1: 8,221``; empty without it."""
        if self.engine is None:
            return ""
        size = self.nodes[0].size
        return ", ".join(f"node {n}: {format_count(b // size)}" for n, b in self.engine.nodes)

    @property
    def others(self) -> Dict[int, int]:
        """The pool on each other node: node → pages."""
        return {n.node: n.total for n in self.nodes if n.node != self.target}


def node_shortfall(
    facts: HugepageFacts, a: PoolAssessment, target: Optional[int], engine_pid: Optional[int],
) -> Optional[NodeShortfall]:
    """Whether the arena's pages are short on the GPU's node; None when they fit there, or
    when the pool does not serve the arena, or there is one node."""
    nodes = facts.nodes_of(facts.page_size)
    if target is None or len(nodes) < 2 or not a.uses_pool or a.fails or a.need is None:
        return None
    on_target = next((n for n in nodes if n.node == target), NodePool(target, facts.page_size, 0, 0))
    engine, engine_here = _engine_on(facts, a, target, engine_pid)
    have = on_target.free + engine_here
    if have >= a.need.pages:
        return None
    covering = configured_node(facts, target, a.need.pages)
    grow_to = a.need.pages + max(0, on_target.total - on_target.free - engine_here)
    return NodeShortfall(target, nodes, a.need.pages, have, engine, covering, grow_to)


def _engine_on(
    facts: HugepageFacts, a: PoolAssessment, target: int, engine_pid: Optional[int],
) -> Tuple[Optional[Holder], int]:
    """(the engine, when its numa_maps name its nodes; its pages that count on ``target``)."""
    holder = facts.holder(engine_pid)
    if holder is None or not holder.nodes:
        return None, a.engine_pages
    # At its restart the engine gives its pages back to their nodes and takes them again,
    # the preferred node first: only its pages already on the target count there.
    return holder, holder.pages_on(target, facts.page_size)


def configured_node(facts: HugepageFacts, node: int, at_least: int = 0) -> Optional[Tuple[int, str]]:
    """(pages, file) of the first boot command line that sets ``node``'s pool to other than
    it is now, when that is ``at_least`` pages; None otherwise."""
    now = next((n.total for n in facts.nodes_of(facts.page_size) if n.node == node), 0)
    for path, cmdline in facts.configured_cmdline:
        counts = cmdline.node_counts(facts.page_size, facts.page_size)
        if node in counts and counts[node] != now:
            return (counts[node], path) if counts[node] >= at_least else None
    return None


def boot_pools(facts: HugepageFacts) -> Tuple[Tuple[str, str], ...]:
    """(file, words) of ``hugepages=`` settings on the configured boot command lines."""
    return tuple((path, " ".join(c.words)) for path, c in facts.configured_cmdline if c.words)


def grow_per_node(facts: HugepageFacts, target: Optional[int]) -> Optional[Tuple[int, Dict[int, int]]]:
    """(target, the other nodes' pools: node → pages) when growing the pool means a per-node
    pool on ``target``; None when ``vm.nr_hugepages`` is the way (one node, no target,
    read-only /sys)."""
    nodes = facts.nodes_of(facts.page_size)
    if target is None or len(nodes) <= 1 or facts.sys_readonly:
        return None
    return target, {n.node: n.total for n in nodes if n.node != target}
