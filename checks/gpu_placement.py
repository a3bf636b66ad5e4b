"""gpu-placement: which GPU computes, and which NUMA node it sits on."""

from __future__ import annotations

from typing import Iterator, Optional

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.parse import format_cpulist

PCI = "/sys/bus/pci/devices"


class GpuPlacementCheck(Check):
    """Finds the compute GPU and the NUMA node it is attached to.

    Reads every PCI function of class 0x03 (display/3D) under ``/sys/bus/pci/devices``:
    ``vendor``, ``device``, ``numa_node``, ``local_cpulist``, ``boot_vga`` and ``resource``.
    With several GPUs the compute GPU is the one named by ``--gpu`` (or ``gpu:`` in the
    config), else the one that is not the boot display (the seed box's GT 710 drives the
    desktop while the GTX 1080 Ti computes), else the one with the largest memory BAR.
    A ``numa_node`` of -1 (no firmware locality, common in VMs) falls back to the node
    whose CPUs match ``local_cpulist``; a ``numa_node`` that contradicts
    ``local_cpulist`` is a warning, since one of the two is wrong.
    """

    id = "gpu-placement"
    title = "GPU placement"

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        placement = ctx.placement
        if placement is None:
            yield self.finding(
                "no-gpu", Severity.WARNING,
                "no GPU found: the engine would run without its expert cache",
                detail="No PCI function of class 0x03 (display/3D) exists. Strata caches hot "
                "experts on one GPU; without one every expert runs on the CPU pool.",
                evidence=(Evidence(PCI, "no function with class 0x03xxxx"),),
            )
            return
        gpu = placement.gpu
        base = f"{PCI}/{gpu.address}"
        evidence = (
            Evidence(f"{base}/vendor,device", gpu.ids),
            Evidence(f"{base}/numa_node", str(gpu.numa_node_raw)),
            Evidence(f"{base}/local_cpulist", format_cpulist(gpu.local_cpus) or "(empty)"),
            Evidence(f"{base}/boot_vga", "-" if gpu.boot_vga is None else str(int(gpu.boot_vga))),
        )
        others = [g.address for g in ctx.gpus if g.address != gpu.address]
        detail = f"Chosen as {placement.choice_reason}."
        if others:
            detail += f" Other GPUs: {', '.join(others)}."
        name = f"{gpu.vendor_name} {gpu.ids} at {gpu.address}"
        if placement.node is None:
            yield self.finding(
                "unknown-node", Severity.WARNING if len(ctx.numa.cpu_nodes) > 1 else Severity.INFO,
                f"compute GPU {name}: its NUMA node is unknown",
                detail=detail + f" numa_node is {_raw(gpu.numa_node_raw)} and local_cpulist matches "
                "no single node; set "
                "`numa: <node>` in the config to bind anyway.",
                evidence=evidence,
            )
        elif placement.node_source == "local_cpulist":
            yield self.finding(
                "node-from-cpulist", Severity.INFO,
                f"compute GPU {name} on node {placement.node} (numa_node is "
                f"{_raw(gpu.numa_node_raw)}; placed by "
                f"local_cpulist {format_cpulist(gpu.local_cpus)})",
                detail=detail + " The firmware gave no locality (no _PXM), as is common in VMs; "
                "local_cpulist still tells which CPUs are near the device.",
                evidence=evidence,
            )
        else:
            how = "numa_node" if placement.node_source == "numa_node" else "the only node"
            yield self.finding(
                "placed", Severity.OK,
                f"compute GPU {name} on node {placement.node} (from {how})",
                detail=detail, evidence=evidence,
            )
        if placement.contradiction:
            yield self.finding(
                "numa-node-contradiction", Severity.WARNING,
                f"{gpu.address}: {placement.contradiction}",
                detail="The kernel derives both from firmware; when they disagree the firmware's "
                "proximity table is suspect. strata-doctor trusts numa_node.",
                evidence=evidence,
            )


def _raw(value: Optional[int]) -> str:
    """How the kernel's numa_node read: a number, or absent."""
    return "absent" if value is None else str(value)
