"""sub-numa-clustering: more NUMA nodes with CPUs than CPU packages (SNC, Cluster-on-Die, NPS)."""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import DETECT_VIRT
from strata_doctor.facts.numa import NumaNode
from strata_doctor.facts.parse import format_bytes
from strata_doctor.model import Evidence, Finding, Severity


class SubNumaClustering(Check):
    """Names sub-NUMA clustering: more NUMA nodes with CPUs than CPU packages.

    Intel's Sub-NUMA Clustering (SNC2/SNC4) and Cluster-on-Die, and AMD's NPS2/NPS4, split
    each socket into several nodes, each with a share of the socket's memory channels.
    Reads the nodes' CPUs (``/sys/devices/system/node/nodeN/cpulist``) and each CPU's
    package (``physical id`` in ``/proc/cpuinfo``, else ``topology/physical_package_id``),
    and gives the node-to-package map. A node is then a half or a quarter of the socket's
    memory: an arena that fits the socket may not fit the GPU's node. The binding plan then
    uses the socket's nodes (``numactl --preferred-many``, Linux 5.15+, else
    ``--interleave``), and this check says so with the host's numbers; turning the BIOS
    option off (SNC off, NPS1) makes the socket one node again. ktransformers users report
    OOMs from exactly this layout (its issues #1147 and #1730). Info only; skipped on one
    CPU node, when packages are unknown, and in a virtual machine (the hypervisor invents
    its sockets and nodes: see ``virtual-numa``).
    """

    id = "sub-numa-clustering"
    title = "Sub-NUMA clustering (SNC, NPS)"
    findings = ("split", "off", "unknown")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        return (DETECT_VIRT,)

    def applies(self, ctx: HostContext) -> Optional[str]:
        if len(ctx.numa.cpu_nodes) < 2:
            return "one NUMA node with CPUs: nothing is split"
        if not ctx.cpu.package_of:
            return "the CPUs' packages are unknown (no physical id in /proc/cpuinfo or sysfs)"
        if ctx.virtualization.virtual:
            return (f"a virtual machine ({ctx.virtualization.name}): its sockets and nodes are the "
                    "hypervisor's (see virtual-numa)")
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        by_package = _nodes_by_package(ctx)
        sockets = len(by_package)
        nodes = sum(len(ids) for ids in by_package.values())
        if nodes < len(ctx.numa.cpu_nodes):
            yield self.finding(
                "unknown", Severity.OK,
                f"the CPUs' packages name {nodes} of the {len(ctx.numa.cpu_nodes)} CPU nodes: no "
                "node-to-socket map",
                evidence=(Evidence("/proc/cpuinfo", "physical id missing or unreadable for some "
                                   "nodes' CPUs"),),
            )
            return
        layout = "; ".join(f"socket {p}: node{'s' if len(n) > 1 else ''} {','.join(map(str, n))}"
                           for p, n in sorted(by_package.items()))
        evidence = (
            Evidence("/sys/devices/system/node/node*/cpulist + /proc/cpuinfo physical id", layout),
        )
        if nodes <= sockets:
            yield self.finding(
                "off", Severity.OK,
                f"one NUMA node per socket ({layout})",
                evidence=evidence,
            )
            return
        yield self.finding(
            "split", Severity.INFO,
            f"{_per_socket(by_package)}: SNC or NPS is on ({layout})",
            detail=self._detail(ctx, by_package),
            evidence=evidence,
        )

    def _detail(self, ctx: HostContext, by_package: Dict[int, List[int]]) -> str:
        return ("Sub-NUMA clustering (Intel SNC or Cluster-on-Die) or AMD NPS2/NPS4 splits each "
                "socket into nodes with a share of its memory channels. "
                + _fit(ctx, by_package)
                + "The alternative is the BIOS: SNC off (Intel) or NPS1 (AMD) makes each socket one "
                "node, so the whole socket's memory is local to the GPU's node. ktransformers users "
                "report OOMs from this layout (its issues #1147 and #1730) when a process is bound "
                "to one sub-node.")


def _nodes_by_package(ctx: HostContext) -> Dict[int, List[int]]:
    """The CPU nodes of each package (a node whose CPUs name no package is left out)."""
    package_of = dict(ctx.cpu.package_of)
    by_package: Dict[int, List[int]] = {}
    for node in ctx.numa.cpu_nodes:
        packages = sorted({package_of[c] for c in node.cpus if c in package_of})
        for package in packages[:1]:  # a node inside one package (firmware never splits it)
            by_package.setdefault(package, []).append(node.id)
    return by_package


def _per_socket(by_package: Dict[int, List[int]]) -> str:
    per = sorted({len(n) for n in by_package.values()})
    if len(per) == 1:
        return f"{per[0]} NUMA nodes per socket"
    return f"{'-'.join(map(str, (per[0], per[-1])))} NUMA nodes per socket"


def _fit(ctx: HostContext, by_package: Dict[int, List[int]]) -> str:
    """Whether the arena fits the target node, its socket's nodes, or neither, with the
    host's numbers; empty without a target node or an arena size."""
    numa = ctx.numa
    found = _target_socket(ctx, by_package)
    pinned = ctx.config.pinned_bytes
    if found is None or pinned is None:
        return ""
    node, socket = found
    node_id = node.id
    need = pinned + ctx.config.headroom_bytes
    node_mem = node.memory_total or 0
    socket_mem = sum((numa.node(n) or node).memory_total or 0 for n in socket)
    others = ",".join(str(n) for n in socket)
    sums = (f"arena + K/V + headroom = {format_bytes(need)}; node {node_id} (the GPU's) has "
            f"{format_bytes(node_mem)}, its socket's nodes {others} have {format_bytes(socket_mem)}")
    if need <= node_mem:
        return f"Here {sums}: the arena fits node {node_id} alone, so the plan binds to it. "
    return _beyond_node(ctx, sums, others, need <= socket_mem)


def _target_socket(
    ctx: HostContext, by_package: Dict[int, List[int]],
) -> Optional[Tuple[NumaNode, List[int]]]:
    """The target node and its socket's nodes; None without a target node in a known socket."""
    node_id = ctx.target_node
    node = ctx.numa.node(node_id) if node_id is not None else None
    socket = next((ids for ids in by_package.values() if node_id in ids), None)
    return (node, socket) if node is not None and socket is not None else None


def _beyond_node(ctx: HostContext, sums: str, others: str, fits_socket: bool) -> str:
    """An arena too big for the node: the socket's nodes take it, or nothing does."""
    if fits_socket:
        plan = ctx.binding_plan
        how = f" ({plan.policy})" if plan is not None else ""
        return (f"Here {sums}: the arena fits the socket but not the node, so the binding "
                f"plan uses nodes {others}{how}, which is why numa-binding names several nodes. ")
    return f"Here {sums}: the arena fits neither; see arena-fit. "
