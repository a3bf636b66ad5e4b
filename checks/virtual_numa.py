"""virtual-numa: NUMA nodes that a hypervisor presents, which may not be the host's sockets."""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import DETECT_VIRT
from strata_doctor.model import Evidence, Finding, Severity


class VirtualNuma(Check):
    """Says when the NUMA nodes are a virtual machine's, which binding cannot trust alone.

    Reads the ``hypervisor`` flag in ``/proc/cpuinfo``, ``systemd-detect-virt --vm``,
    and the nodes' ``distance`` rows. A
    guest's nodes are what the hypervisor presents: unless it pins each virtual node's
    vCPUs and memory to one host socket (vNUMA pinning: libvirt ``<numatune>`` with
    ``<vcpupin>``, VMware's vNUMA, Hyper-V's NUMA spanning off), a guest node's vCPUs may run
    on either host socket and its memory may lie on either, and binding inside the guest
    buys nothing. Distances that are all equal or missing mean the hypervisor gave no
    distance table, so nothing says which nodes are near. Info on a guest with two nodes or
    more, warning when its distances are all equal or missing; the numa-binding advice
    repeats it. Skipped on hosts with one CPU node.
    """

    id = "virtual-numa"
    title = "Virtualized NUMA"
    findings = ("guest", "bare-metal")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        return (DETECT_VIRT,)

    def applies(self, ctx: HostContext) -> Optional[str]:
        if len(ctx.numa.cpu_nodes) < 2:
            return "one NUMA node with CPUs: nothing to pin"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        virt = ctx.virtualization
        evidence: List[Evidence] = [Evidence("/proc/cpuinfo", "hypervisor flag" if virt.hypervisor_flag
                                             else "no hypervisor flag")]
        if virt.detected is not None:
            evidence.append(Evidence(f"$ {' '.join(DETECT_VIRT.argv)}", virt.detected))
        if not virt.virtual:
            yield self.finding(
                "bare-metal", Severity.OK,
                "no hypervisor: the NUMA nodes are the machine's own",
                evidence=tuple(evidence),
            )
            return
        nodes = ctx.numa.cpu_nodes
        flat = self._flat_distances(ctx)
        summary = (f"a virtual machine ({virt.name}) with {len(nodes)} NUMA nodes: they map to the "
                   "host's sockets only if the hypervisor pins vNUMA")
        if flat:
            summary += f"; {flat}"
        yield self.finding(
            "guest", Severity.WARNING if flat else Severity.INFO, summary,
            detail="Inside a guest, numactl binds to the nodes the hypervisor presents. Unless the "
            "hypervisor pins each virtual node's vCPUs and memory to one host socket (libvirt "
            "<numatune> with <vcpupin>, VMware vNUMA, Hyper-V with NUMA spanning off), a guest node's "
            "vCPUs and memory may sit on either host socket, and binding inside the guest buys "
            "nothing. Ask the provider or the hypervisor's administrator to pin vNUMA and to put "
            "the passed-through GPU in the same virtual node as its host socket.",
            evidence=tuple(evidence) + tuple(
                Evidence(f"/sys/devices/system/node/node{n.id}/distance",
                         " ".join(str(d) for _, d in n.distances) or "missing")
                for n in nodes),
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
