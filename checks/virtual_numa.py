"""virtual-numa: NUMA nodes that a hypervisor presents, which may not be the host's sockets."""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import DETECT_VIRT
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.hypervisor import host_kind


class VirtualNuma(Check):
    """Says when the NUMA nodes are a virtual machine's, which binding cannot trust alone.

    Reads the ``hypervisor`` flag in ``/proc/cpuinfo`` (x86's), its ``platform`` on POWER
    (an IBM pSeries LPAR always runs under a hypervisor, PowerVM on a real machine; PowerNV is
    the bare metal), ``systemd-detect-virt --vm``, and the nodes' ``distance`` rows. A
    guest's nodes are what the hypervisor presents: unless it pins each virtual node's
    vCPUs and memory to one host socket (vNUMA pinning: libvirt ``<numatune>`` with
    ``<vcpupin>``, VMware's vNUMA, Hyper-V's NUMA spanning off), a guest node's vCPUs may run
    on either host socket and its memory may lie on either, and binding inside the guest
    buys nothing. Distances that are all equal or missing mean the hypervisor gave no
    distance table, so nothing says which nodes are near. Info on a guest with two nodes or
    more, warning when its distances are all equal or missing; the numa-binding advice
    repeats it. An LPAR's nodes are PowerVM's home nodes for its processors and memory.
    Where nothing in the tree shows a hypervisor or bare metal (no /proc/cpuinfo, or a
    non-x86 CPU without systemd-detect-virt's answer), it says so. Skipped on hosts with one
    CPU node.
    """

    id = "virtual-numa"
    title = "Virtualized NUMA"
    findings = ("guest", "lpar", "bare-metal", "unknown")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        return (DETECT_VIRT,)

    def applies(self, ctx: HostContext) -> Optional[str]:
        if len(ctx.numa.cpu_nodes) < 2:
            return "one NUMA node with CPUs: nothing to pin"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        virt = ctx.virtualization
        kind = host_kind(virt, ctx.cpu_arch)
        evidence = tuple(_evidence(ctx))
        nodes = ctx.numa.cpu_nodes
        if kind.kind == "bare-metal":
            yield self.finding(
                "bare-metal", Severity.OK,
                "no hypervisor: the NUMA nodes are the machine's own",
                evidence=evidence,
            )
            return
        if kind.kind == "unknown":
            yield self.finding(
                "unknown", Severity.INFO,
                f"nothing shows whether a hypervisor presents the {len(nodes):,} NUMA nodes: {kind.why}",
                detail="Bare metal shows as systemd-detect-virt --vm saying none, as x86 flags "
                "without hypervisor, or as a PowerNV platform on POWER; a guest as a hypervisor "
                "flag, a pSeries platform or systemd-detect-virt's name for it. Capture "
                "systemd-detect-virt --vm with the tree to tell.",
                evidence=evidence,
            )
            return
        if kind.kind == "lpar":
            yield self._lpar(ctx, evidence)
            return
        yield self._placed(
            ctx, "guest", f"a virtual machine ({virt.name}) with {len(nodes):,} NUMA nodes: they map "
            "to the host's sockets only if the hypervisor pins vNUMA", evidence,
            "Inside a guest, numactl binds to the nodes the hypervisor presents. Unless the "
            "hypervisor pins each virtual node's vCPUs and memory to one host socket (libvirt "
            "<numatune> with <vcpupin>, VMware vNUMA, Hyper-V with NUMA spanning off), a guest node's "
            "vCPUs and memory may sit on either host socket, and binding inside the guest buys "
            "nothing. Ask the provider or the hypervisor's administrator to pin vNUMA and to put "
            "the passed-through GPU in the same virtual node as its host socket.",
        )

    def _lpar(self, ctx: HostContext, evidence: Tuple[Evidence, ...]) -> Finding:
        """An IBM pSeries partition under PowerVM: its nodes are the hypervisor's placement."""
        nodes = ctx.numa.cpu_nodes
        machine = ctx.cpu_arch.machine
        return self._placed(
            ctx, "lpar", f"an IBM pSeries LPAR under PowerVM{f' ({machine})' if machine else ''} with "
            f"{len(nodes):,} NUMA nodes: they are the hypervisor's home nodes for the partition's "
            "processors and memory, the machine's chips only as far as PowerVM placed them", evidence,
            "An LPAR of an IBM machine runs under PowerVM, which gives each of the partition's "
            "virtual processors and each range of its memory a home node (an affinity domain: a "
            "chip or a drawer of the machine) and shows it to Linux in the device tree's "
            "ibm,associativity, from which the kernel builds these nodes. With dedicated "
            "processors the cores stay on their chips, and binding to a node binds to them; with "
            "shared processors PowerVM dispatches a virtual processor on any core of the pool, "
            "preferring its home node, and DLPAR or Live Partition Mobility can move memory and "
            "home nodes later. Ask the PowerVM administrator for dedicated processors and to run "
            "the Dynamic Platform Optimizer (HMC optmem) so the partition's processors and "
            "memory share chips.",
        )

    def _placed(self, ctx: HostContext, finding_id: str, summary: str,
                evidence: Tuple[Evidence, ...], detail: str) -> Finding:
        """A guest's or a partition's nodes, placed by its hypervisor: info, or a warning that
        says so where the distances cannot tell near nodes from far ones."""
        flat = self._flat_distances(ctx)
        return self.finding(
            finding_id, Severity.WARNING if flat else Severity.INFO,
            f"{summary}; {flat}" if flat else summary, detail=detail,
            evidence=evidence + _distance_evidence(ctx),
        )

    @staticmethod
    def _flat_distances(ctx: HostContext) -> str:
        nodes = ctx.numa.cpu_nodes
        if any(not n.distances for n in nodes):
            return "the distance table is missing, so nothing says which nodes are near"
        values = {d for n in nodes for o, d in n.distances if o in {m.id for m in nodes}}
        if len(values) == 1:
            return (f"every distance is {values.pop()}, so the hypervisor gave no distance table "
                    "and nothing says which nodes are near")
        return ""


def _evidence(ctx: HostContext) -> List[Evidence]:
    """/proc/cpuinfo's signs (or why it is unreadable), the LPAR's files, systemd-detect-virt."""
    virt, arch = ctx.virtualization, ctx.cpu_arch
    if arch.unread:
        evidence = [Evidence("/proc/cpuinfo", f"unreadable ({arch.unread})")]
    elif arch.platform:
        values = (("platform", arch.platform), ("model", arch.machine), ("firmware", arch.firmware))
        evidence = [Evidence("/proc/cpuinfo", "; ".join(f"{k}: {v}" for k, v in values if v))]
    else:
        evidence = [Evidence("/proc/cpuinfo", "hypervisor flag" if virt.hypervisor_flag
                             else "no hypervisor flag")]
    if arch.lparcfg:
        evidence.append(Evidence("/proc/ppc64/lparcfg", "present: the kernel's LPAR configuration"))
    if arch.hmc_managed:
        evidence.append(Evidence("/proc/device-tree/hmc-managed?", "present: an HMC manages the partition"))
    if virt.detected is not None:
        evidence.append(Evidence(f"$ {' '.join(DETECT_VIRT.argv)}", virt.detected))
    return evidence


def _distance_evidence(ctx: HostContext) -> Tuple[Evidence, ...]:
    """Each CPU node's distance row."""
    return tuple(Evidence(f"/sys/devices/system/node/node{n.id}/distance",
                          " ".join(str(d) for _, d in n.distances) or "missing")
                 for n in ctx.numa.cpu_nodes)
