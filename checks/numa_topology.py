"""numa-topology: the host's NUMA nodes, their distances, and firmware quirks."""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.numa import DISTANCE_ABSENT, NODE_DIR, UNREACHABLE, NumaNode
from strata_doctor.facts.parse import format_bytes, format_cpulist
from strata_doctor.model import Evidence, Finding, Severity


class NumaTopology(Check):
    """Lists the NUMA nodes with their CPUs, memory and distances.

    Reads ``/sys/devices/system/node/nodeN/{cpulist,cpumap,meminfo,distance}`` and
    ``/sys/devices/system/cpu/{online,present}`` (an offline CPU is present and not
    online). A host with one node has nothing to bind and passes. On several nodes it
    says which nodes share a socket (sub-node
    distances of 11-12, as Intel SNC and AMD NPS report) and how much slower remote
    memory is (21/10 = 2.1x on a dual-socket Broadwell). Memory-only nodes (CXL, HBM,
    GPU memory) are named: they are never used for CPU binding. Firmware quirks, such
    as a distance row of zeros or asymmetric rows, are warnings because binding
    decisions rest on them.
    """

    id = "numa-topology"
    title = "NUMA topology"
    findings = ("layout", "single-node", "no-numa", "memory-only-node", "memoryless-node",
                "hidden-node", "firmware-quirk", "no-distance", "offline-cpus")

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        numa = ctx.numa
        if not numa.nodes:
            yield self.finding(
                "no-numa", Severity.OK,
                "the kernel exposes no NUMA nodes: one memory domain, nothing to bind",
                evidence=(Evidence(NODE_DIR, "missing or empty"),),
            )
            return
        evidence = tuple(self._node_evidence(ctx))
        if len(numa.cpu_nodes) <= 1 and len(numa.nodes) == 1:
            node = numa.nodes[0]
            yield self.finding(
                "single-node", Severity.OK,
                f"one NUMA node ({len(node.cpus):,} CPUs, {_memory(node.memory_total)}): "
                "nothing to bind",
                evidence=evidence,
            )
        else:
            yield self._layout(ctx, evidence)
        yield from self._special_nodes(ctx)
        for quirk in numa.quirks:
            if quirk.endswith(DISTANCE_ABSENT):
                yield self.finding(
                    "no-distance", Severity.INFO, f"{quirk}: its distances are unknown",
                    detail="Distances come from the firmware's table (SLIT) through "
                    "nodeN/distance; without the file no advice here rests on them.",
                )
                continue
            yield self.finding(
                "firmware-quirk", Severity.WARNING, quirk,
                detail="Binding advice rests on the firmware's distance table (SLIT); "
                "check the BIOS NUMA settings.",
            )
        if numa.offline_cpus:
            count = len(numa.offline_cpus)
            yield self.finding(
                "offline-cpus", Severity.INFO,
                f"{count} {'CPUs are' if count != 1 else 'CPU is'} offline "
                f"({format_cpulist(numa.offline_cpus)}); {'they are' if count != 1 else 'it is'} "
                "left out of every CPU list",
                evidence=(Evidence(numa.offline_source, format_cpulist(numa.offline_cpus)),),
            )

    def _node_evidence(self, ctx: HostContext) -> Iterator[Evidence]:
        for node in ctx.numa.nodes:
            if not node.listed:
                yield _hidden_evidence(node)
                continue
            row = " ".join(str(d) for _, d in node.distances)
            yield Evidence(
                f"{NODE_DIR}/node{node.id}",
                # A folder with no cpulist, cpumap or cpuN link names no CPU file to quote.
                f"{node.cpus_source if node.cpus_source != 'none' else 'cpus'}="
                f"{format_cpulist(node.all_cpus) or '(none)'} "
                f"MemTotal={_memory(node.memory_total).replace('memory unknown', 'unknown')} "
                f"distance={row or '(none)'}",
            )

    def _layout(self, ctx: HostContext, evidence: tuple[Evidence, ...]) -> Finding:
        numa = ctx.numa
        local, remote = _local_remote(numa.cpu_nodes)
        parts = [
            f"node{n.id}: {format_cpulist(n.cpus) or 'no CPUs'}, {_memory(n.memory_total)}"
            for n in numa.nodes
        ]
        summary = f"{len(numa.nodes):,} NUMA nodes"
        if remote:
            summary += f", distance {local}/{remote} (remote memory {remote / local:.1f}x local)"
        detail = "; ".join(parts) + "."
        groups = self._socket_groups(ctx)
        if groups:
            detail += " " + " ".join(groups)
        return self.finding("layout", Severity.OK, summary, detail=detail, evidence=evidence)

    def _socket_groups(self, ctx: HostContext) -> List[str]:
        """One sentence naming the sockets that hold several nodes; empty when none does."""
        cpu = ctx.cpu
        # One lookup table, not cpu.packages_in per node: 2,048 CPUs on 32 nodes. A package
        # id of -1 (POWER, old ia64) is unknown, no socket.
        package_of = {c: p for c, p in cpu.package_of if p >= 0}
        node_packages = [(n.id, frozenset(package_of[c] for c in n.cpus if c in package_of))
                         for n in ctx.numa.cpu_nodes]
        groups = []
        for pkg in sorted(set(package_of.values())):
            nodes = [node_id for node_id, packages in node_packages if pkg in packages]
            if len(nodes) > 1:
                groups.append(f"socket {pkg}: nodes {','.join(map(str, nodes))}")
        if not groups:
            return []
        return [f"Sockets holding several nodes: {'; '.join(groups)} (see sub-numa-clustering)."]

    def _special_nodes(self, ctx: HostContext) -> Iterator[Finding]:
        for node in ctx.numa.nodes:
            if not node.listed:
                yield self._hidden(ctx, node)
            elif node.memory_only:
                yield self.finding(
                    "memory-only-node", Severity.INFO,
                    f"node {node.id} has {format_bytes(node.memory_total or 0)} of memory and no "
                    "CPUs (CXL, HBM or GPU memory): never used for CPU binding",
                )
            elif node.cpus and node.memoryless:
                yield self.finding(
                    "memoryless-node", Severity.INFO,
                    f"node {node.id} has CPUs ({format_cpulist(node.cpus)}) but no memory: "
                    "its CPUs always read remote memory",
                )


    def _hidden(self, ctx: HostContext, node: NumaNode) -> Finding:
        """A node the kernel lists but the capture has no folder for."""
        lists = (f"node/{node.hidden_from[0]}" if len(node.hidden_from) == 1
                 else f"node/{{{','.join(node.hidden_from)}}}")
        cpus = (f"its CPUs are {format_cpulist(node.cpus)} (online, in no listed node)" if node.cpus
                else "its CPUs are unknown")
        memory = "no memory" if node.memory_total == 0 else "memory unknown"
        return self.finding(
            "hidden-node", Severity.WARNING,
            f"node {node.id} has no folder under {NODE_DIR}, though {lists} list it: "
            f"{cpus}, {memory}",
            detail=_hidden_detail(ctx, node),
            evidence=(_hidden_evidence(node),),
        )


def _hidden_evidence(node: NumaNode) -> Evidence:
    lists = ",".join(node.hidden_from)
    return Evidence(f"{NODE_DIR}/{{{lists}}}",
                    f"node{node.id} listed; no node{node.id} folder; "
                    f"{node.cpus_source}={format_cpulist(node.cpus) or '(none)'}")


def _hidden_detail(ctx: HostContext, node: NumaNode) -> str:
    """What /proc/meminfo says of the node's memory, without taking it for the node's size:
    a kernel may count a node's MemTotal from its present pages and the host's from the
    pages it manages."""
    text = ("The kernel has the node, so binding treats it as a node of its own; the capture "
            "holds no meminfo for it.")
    listed = [n for n in ctx.numa.nodes if n.listed]
    total = ctx.meminfo.get("MemTotal")
    hidden = [n for n in ctx.numa.nodes if not n.listed and n.memory_total is None]
    if hidden != [node] or total is None or any(n.memory_total is None for n in listed):
        return text
    rest = total - sum(n.memory_total or 0 for n in listed)
    if rest <= 0:
        return text
    others = " and ".join(f"node {n.id}'s {format_bytes(n.memory_total or 0)}" for n in listed)
    return (f"{text} /proc/meminfo's MemTotal {format_bytes(total)} less {others} leaves "
            f"{format_bytes(rest)}: near node {node.id}'s size, not exactly it, as a kernel may "
            "count a node's MemTotal from its present pages and the host's from the pages it "
            "manages.")


def _local_remote(cpu_nodes: Tuple[NumaNode, ...]) -> Tuple[int, int]:
    """The smallest local distance (10 when none is given) and the largest distance between
    two CPU nodes (0 when none is given). A 0 (no SLIT) is no distance and 255 (unreachable)
    no cost of reading, so neither gives a ratio; the quirks name them."""
    local = min((d for n in cpu_nodes for o, d in n.distances if o == n.id and 0 < d < UNREACHABLE),
                default=10)
    cpu_ids = {n.id for n in cpu_nodes}
    remote = max(
        (d for n in cpu_nodes for o, d in n.distances
         if o != n.id and o in cpu_ids and 0 < d < UNREACHABLE),
        default=0,
    )
    return local, remote


def _memory(total: Optional[int]) -> str:
    """A node's memory for display; a node without meminfo is unknown, not empty."""
    return "memory unknown" if total is None else format_bytes(total)
