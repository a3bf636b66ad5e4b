"""sub-numa-clustering: more NUMA nodes with CPUs than CPU packages (SNC, Cluster-on-Die, NPS)."""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import DETECT_VIRT
from strata_doctor.facts.numa import NumaNode
from strata_doctor.facts.parse import format_bytes, format_cpulist
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
    findings = ("split", "multi-die", "node-spans-sockets", "off", "unknown")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        return (DETECT_VIRT,)

    def applies(self, ctx: HostContext) -> Optional[str]:
        if len(ctx.numa.cpu_nodes) < 2:
            return "one NUMA node with CPUs: nothing is split"
        if not _package_of(ctx):
            return ("the CPUs' packages are unknown (no physical id in /proc/cpuinfo, and sysfs's "
                    "physical_package_id is missing or -1)")
        if ctx.virtualization.virtual:
            return (f"a virtual machine ({ctx.virtualization.name}): its sockets and nodes are the "
                    "hypervisor's (see virtual-numa)")
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        shared = _shared_cpus(ctx)
        if shared:
            yield self.finding(
                "unknown", Severity.OK,
                f"CPU nodes list the same CPUs ({format_cpulist(shared)}; see numa-topology): no "
                "node-to-socket map",
                evidence=(Evidence("/sys/devices/system/node/node*/cpulist", format_cpulist(shared)),),
            )
            return
        packages = _packages_by_node(ctx)
        known = sum(1 for p in packages.values() if p)
        if known < len(ctx.numa.cpu_nodes):
            yield self.finding(
                "unknown", Severity.OK,
                f"the CPUs' packages name {known} of the {len(ctx.numa.cpu_nodes):,} CPU nodes: no "
                "node-to-socket map",
                evidence=(Evidence(PACKAGE_SOURCE, "missing, unreadable or -1 for some nodes' CPUs"),),
            )
            return
        if any(len(p) > 1 for p in packages.values()):
            yield self._spans(packages)
            return
        yield from self._per_package(ctx, _nodes_by_package(packages))

    def _spans(self, packages: Dict[int, List[int]]) -> Finding:
        """Nodes of several packages each: one node per group of sockets, nothing split."""
        layout = "; ".join(f"node {n}: package{'s' if len(p) > 1 else ''} {format_ids(p)}"
                           for n, p in sorted(packages.items()))
        counts = sorted({len(p) for p in packages.values()})
        span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
        # The summary names the first nodes; the evidence has them all (64 nodes on ia64).
        shown = layout if len(packages) <= SHOWN_NODES else (
            "; ".join(layout.split("; ")[:SHOWN_NODES]) + f"; {len(packages) - SHOWN_NODES} more nodes")
        return self.finding(
            "node-spans-sockets", Severity.OK,
            f"each NUMA node spans {span} packages ({shown}): no socket is split",
            evidence=(Evidence(f"/sys/devices/system/node/node*/cpulist + {PACKAGE_SOURCE}", layout),),
        )

    def _per_package(self, ctx: HostContext, by_package: Dict[int, List[int]]) -> Iterator[Finding]:
        sockets = len(by_package)
        nodes = sum(len(ids) for ids in by_package.values())
        layout = "; ".join(f"socket {p}: node{'s' if len(n) > 1 else ''} {','.join(map(str, n))}"
                           for p, n in sorted(by_package.items()))
        evidence = (Evidence(f"/sys/devices/system/node/node*/cpulist + {PACKAGE_SOURCE}", layout),)
        if nodes <= sockets:
            yield self.finding("off", Severity.OK, f"one NUMA node per socket ({layout})",
                               evidence=evidence)
            return
        die = _multi_die(ctx, by_package)
        if die is not None:
            yield self.finding(
                "multi-die", Severity.INFO,
                f"each {die} package holds two dies, each its own NUMA node ({layout}): fixed in "
                "the silicon, no BIOS setting joins them",
                detail=_die_detail(ctx, by_package),
                evidence=(*evidence, _die_evidence(ctx)),
            )
            return
        yield self.finding(
            "split", Severity.INFO,
            f"{_per_socket(by_package)}: {_switch(ctx)} ({layout})",
            detail=self._detail(ctx, by_package),
            evidence=evidence,
        )

    def _detail(self, ctx: HostContext, by_package: Dict[int, List[int]]) -> str:
        vendor = _vendor(ctx)
        if vendor not in ("GenuineIntel", "AuthenticAMD"):
            return ("The firmware gives each socket several nodes, each with a share of its memory. "
                    + _fit(ctx, by_package))
        return ("Sub-NUMA clustering (Intel SNC or Cluster-on-Die) or AMD NPS2/NPS4 splits each "
                "socket into nodes with a share of its memory channels. "
                + _fit(ctx, by_package)
                + "The alternative is the BIOS: SNC off (Intel) or NPS1 (AMD) makes each socket one "
                "node, so the whole socket's memory is local to the GPU's node. ktransformers users "
                "report OOMs from this layout (its issues #1147 and #1730) when a process is bound "
                "to one sub-node.")


SHOWN_NODES = 4
"""Nodes a node-spans-sockets summary names before it counts the rest."""


PACKAGE_SOURCE = "physical id (/proc/cpuinfo) or topology/physical_package_id"
"""Where each CPU's package comes from (:class:`~strata_doctor.facts.cpu.CpuFacts`)."""


MCM_FAMILIES = {0x10: "Magny-Cours", 0x15: "Interlagos/Abu Dhabi"}
"""AMD families whose Opteron 61xx, 62xx and 63xx (socket G34) join two dies in a package."""


_G34_OPTERON = re.compile(r"Opteron\(t?m\)? Processor 6[123]\d\d", re.IGNORECASE)


def _package_of(ctx: HostContext) -> Dict[int, int]:
    """CPU -> package, without -1: POWER and old ia64 kernels say -1 for a package they do
    not know, which is no socket."""
    return {cpu: pkg for cpu, pkg in ctx.cpu.package_of if pkg >= 0}


def _vendor(ctx: HostContext) -> str:
    found = ctx.cpu.vendor_family_model
    return found[0] if found else ""


def _switch(ctx: HostContext) -> str:
    """What makes the split: SNC or NPS on Intel and AMD; other vendors name no such switch."""
    if _vendor(ctx) in ("GenuineIntel", "AuthenticAMD"):
        return "SNC or NPS is on"
    return "the firmware gives each socket several nodes"


def _multi_die(ctx: HostContext, by_package: Dict[int, List[int]]) -> Optional[str]:
    """The CPU's model when each package is a two-die Opteron (G34): the kernel's amd_dcm
    flag (a multi-node processor) or the model name, on AMD family 0x10 or 0x15, and two
    nodes in every package; None otherwise."""
    found = ctx.cpu.vendor_family_model
    if found is None or found[0] != "AuthenticAMD" or found[1] not in MCM_FAMILIES:
        return None
    if any(len(nodes) != 2 for nodes in by_package.values()):
        return None
    model = (ctx.cpu.model or "").strip()
    if "amd_dcm" not in ctx.cpu.flags and not _G34_OPTERON.search(model):
        return None
    return " ".join(model.split()) or f"AMD family {found[1]:#x}"


def _die_evidence(ctx: HostContext) -> Evidence:
    vendor, family, model = ctx.cpu.vendor_family_model or ("", 0, 0)
    flag = "amd_dcm (multi-node processor)" if "amd_dcm" in ctx.cpu.flags else "no amd_dcm"
    return Evidence("/proc/cpuinfo", f"{vendor} family {family:#x} model {model}, flags: {flag}")


def _die_detail(ctx: HostContext, by_package: Dict[int, List[int]]) -> str:
    _, family, _ = ctx.cpu.vendor_family_model or ("", 0, 0)
    return (f"AMD's family {family:#x} Opterons for socket G34 ({MCM_FAMILIES.get(family, '')}) "
            "put two dies in one package, each with its own memory controller and channels, "
            "linked by HyperTransport: each die is a node, and nothing joins them. "
            + _fit(ctx, by_package))


def _shared_cpus(ctx: HostContext) -> FrozenSet[int]:
    """CPUs that several CPU nodes list (broken firmware): no map can be drawn."""
    seen: Set[int] = set()
    shared: Set[int] = set()
    for node in ctx.numa.cpu_nodes:
        shared |= seen & node.cpus
        seen |= node.cpus
    return frozenset(shared)


def _packages_by_node(ctx: HostContext) -> Dict[int, List[int]]:
    """The known packages of each CPU node's CPUs."""
    package_of = _package_of(ctx)
    return {node.id: sorted({package_of[c] for c in node.cpus if c in package_of})
            for node in ctx.numa.cpu_nodes}


def format_ids(ids: List[int]) -> str:
    """Package ids as a list (0,1,2,3 as 0-3)."""
    return format_cpulist(frozenset(ids))


def _nodes_by_package(packages: Dict[int, List[int]]) -> Dict[int, List[int]]:
    """The CPU nodes of each package, from nodes that each lie in one package."""
    by_package: Dict[int, List[int]] = {}
    for node_id, found in sorted(packages.items()):
        for package in found[:1]:
            by_package.setdefault(package, []).append(node_id)
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
