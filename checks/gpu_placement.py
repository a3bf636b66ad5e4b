"""gpu-placement: which GPU computes, and which NUMA node it sits on."""

from __future__ import annotations

from typing import Iterator, Optional, Sequence, Tuple

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.gpu import AMD, Gpu
from strata_doctor.facts.kfd import KFD_TOPOLOGY, KfdTopology
from strata_doctor.facts.nvidia_smi import NVIDIA_SMI_Q, NVIDIA_SMI_QUERY
from strata_doctor.facts.parse import format_bytes, format_cpulist
from strata_doctor.facts.rocm_smi import ROCM_SMI_PRODUCT, ROCM_SMI_TOPO
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.gpu import GpuPlacement

PCI = "/sys/bus/pci/devices"


class GpuPlacementCheck(Check):
    """Finds the compute GPU and the NUMA node it is attached to.

    Reads every PCI function of class 0x03 (display/3D) under ``/sys/bus/pci/devices``:
    ``vendor``, ``device``, ``numa_node``, ``local_cpulist``, ``boot_vga`` and ``resource``.
    With several GPUs the compute GPU is the one named by ``--gpu`` (or ``gpu:`` in the
    config), else the one that is not the boot display (the seed box's GT 710 drives the
    desktop while the GTX 1080 Ti computes), else the one with the largest memory BAR (from
    ``resource``; without that file, the first by PCI address, and the reason says so).
    A BMC's display chip (ASPEED 1a03, Matrox 102b, Cirrus 1013) or a hypervisor's emulated
    one (virtio-gpu 1af4:1050, bochs 1234:1111, VMware 15ad, QXL 1b36) is never the compute
    GPU unless ``--gpu`` or the config names it: a server whose only display function is its
    BMC's VGA has no compute GPU, and the checks that need one skip with that reason.
    The class comes from ``modalias`` when the ``class`` file is missing.

    AMD GPUs are the functions of vendor 1002 that amdgpu drives, in classes 0x0300 (Radeon,
    APUs), 0x0302, 0x0380 (MI210) and 0x1200 (a "processing accelerator": MI300X); a class
    0x12 function of another vendor counts only when ``--gpu`` names it. The amdkfd topology
    (``/sys/class/kfd/kfd/topology/nodes/*``) matches each AMD GPU to its KFD node by
    ``domain`` and ``location_id``: a node with ``simd_count`` > 0 and no VRAM bank is an
    APU's integrated GPU, which computes out of host RAM and so is never the compute GPU
    unless named, as an Intel integrated GPU (i915 or xe at 00:02.0) is not. The finding
    names the GPU's model (nvidia-smi's or rocm-smi's name when captured, else the ids'
    model) and, for an AMD GPU, its VRAM and its KFD links to the CPU node and over xGMI.

    A ``numa_node`` of -1 (no firmware locality, common in VMs) falls back to the node
    whose CPUs match ``local_cpulist``; a ``numa_node`` that contradicts
    ``local_cpulist``, or a ``local_cpulist`` that contradicts the ``local_cpus`` bitmap,
    is a warning, since one of the two is wrong. With ``nvidia-smi -q`` captured, a compute
    GPU with persistence mode off is info: each CUDA start then initialises the GPU again,
    which takes seconds.
    """

    id = "gpu-placement"
    title = "GPU placement"
    findings = ("placed", "node-from-cpulist", "unknown-node", "numa-node-contradiction",
                "local-cpus-contradiction", "persistence-off", "no-compute-gpu", "no-gpu",
                "no-pci")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        gpu = ctx.placement.gpu if ctx.placement else None
        if gpu is not None and gpu.vendor == 0x10DE:
            return (NVIDIA_SMI_Q, NVIDIA_SMI_QUERY)
        return (ROCM_SMI_PRODUCT, ROCM_SMI_TOPO) if gpu is not None and gpu.vendor == AMD else ()

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        placement = ctx.placement
        if placement is None:
            yield self._no_compute_gpu(ctx) if ctx.gpus else self._no_gpu(len(ctx.pci_addresses))
            return
        gpu = placement.gpu
        evidence = _evidence(gpu) + _kfd_evidence(ctx.kfd, gpu)
        yield self._node(ctx, placement, evidence)
        for more in (self._cpus_conflict(gpu), self._persistence(ctx, gpu),
                     self._contradiction(placement, evidence)):
            if more is not None:
                yield more

    def _no_compute_gpu(self, ctx: HostContext) -> Finding:
        why = ("A server's BMC and a hypervisor give the host a display chip for the console; it "
               "has no memory or compute for the expert cache.")
        if any(g.integrated for g in ctx.gpus):
            why = ("A CPU's integrated GPU has no memory of its own: it computes out of the same "
                   "RAM as the CPU pool, so an expert cache on it saves no host-memory traffic."
                   if not any(g.management for g in ctx.gpus) else
                   why + " A CPU's integrated GPU has no memory of its own for it either.")
        return self.finding(
            "no-compute-gpu", Severity.WARNING,
            ctx.compute_gpu[1],
            detail=why + " The checks that need "
            "a compute GPU skip; pass `--gpu ADDRESS` (or `gpu:` in the config) if one of these "
            "is the GPU the engine uses.",
            evidence=tuple(Evidence(f"{PCI}/{g.address}/vendor,device,class",
                                    f"{g.ids} class {g.pci_class:06x}") for g in ctx.gpus),
        )

    def _no_gpu(self, functions: int) -> Finding:
        if not functions:
            # A capture of sys/devices/system alone, or a machine with no PCI bus: whether
            # a GPU exists is unknown, and saying the engine runs without one would be a guess.
            return self.finding(
                "no-pci", Severity.WARNING,
                f"the tree lists no PCI function ({PCI} is missing or empty): "
                "whether a GPU exists is unknown",
                detail="Strata caches hot experts on one GPU, which sits on the PCI bus. A "
                "capture without the bus cannot show it, and the GPU checks skip; capture the "
                "host again with its /sys/bus/pci to have them run.",
                evidence=(Evidence(PCI, "no entries"),),
            )
        return self.finding(
            "no-gpu", Severity.WARNING,
            "no GPU found: the engine would run without its expert cache",
            detail=f"Of the {functions:,} PCI functions listed, none is of class 0x03 (display/3D) "
            "or an AMD accelerator that amdgpu drives (class 0x12). "
            "Strata caches hot experts on one GPU; without one every expert runs on the CPU pool.",
            evidence=(Evidence(PCI, f"{functions:,} functions, none with class 0x03xxxx"),),
        )

    def _node(self, ctx: HostContext, placement: GpuPlacement, evidence: Tuple[Evidence, ...]) -> Finding:
        """The compute GPU's node: unknown, placed by local_cpulist, or placed."""
        gpu = placement.gpu
        others = [g.address for g in ctx.gpus if g.address != gpu.address]
        detail = f"Chosen as {placement.choice_reason}." + _kfd_words(ctx.kfd, gpu)
        if others:
            detail += f" Other GPUs: {', '.join(others)}."
        name = f"{ctx.gpu_label(gpu)} at {gpu.address}"
        if placement.node is None:
            return self.finding(
                "unknown-node", Severity.WARNING if len(ctx.numa.cpu_nodes) > 1 else Severity.INFO,
                f"compute GPU {name}: its NUMA node is unknown",
                detail=detail + f" numa_node is {_raw(gpu.numa_node_raw)} and local_cpulist matches "
                "no single node; set "
                "`numa: <node>` in the config to bind anyway.",
                evidence=evidence,
            )
        if placement.node_source == "local_cpulist":
            return self.finding(
                "node-from-cpulist", Severity.INFO,
                f"compute GPU {name} on node {placement.node} (numa_node is "
                f"{_raw(gpu.numa_node_raw)}; placed by "
                f"local_cpulist {format_cpulist(gpu.local_cpus)})",
                detail=detail + " The firmware gave no locality (no _PXM), as is common in VMs; "
                "local_cpulist still tells which CPUs are near the device.",
                evidence=evidence,
            )
        how = "numa_node" if placement.node_source == "numa_node" else "the only node"
        return self.finding(
            "placed", Severity.OK,
            f"compute GPU {name} on node {placement.node} (from {how})",
            detail=detail, evidence=evidence,
        )

    def _cpus_conflict(self, gpu: Gpu) -> Optional[Finding]:
        if not gpu.local_cpus_conflict:
            return None
        base = f"{PCI}/{gpu.address}"
        return self.finding(
            "local-cpus-contradiction", Severity.WARNING,
            f"{gpu.address}: {gpu.local_cpus_conflict}",
            detail="The kernel writes both from the same mask; when they disagree the capture "
            "was edited or the files come from different boots. strata-doctor trusts "
            "local_cpulist.",
            evidence=(Evidence(f"{base}/local_cpulist", format_cpulist(gpu.local_cpus) or "(empty)"),
                      Evidence(f"{base}/local_cpus", gpu.local_cpus_conflict.rpartition(" is ")[2])),
        )

    def _persistence(self, ctx: HostContext, gpu: Gpu) -> Optional[Finding]:
        state = ctx.smi_states.get(gpu.address) if gpu.vendor == 0x10DE else None
        if state is None or state.persistence is not False:
            return None
        return self.finding(
            "persistence-off", Severity.INFO,
            f"{gpu.address}: persistence mode is off; every CUDA start initialises the GPU "
            "again, which takes seconds",
            detail="Without a client the driver tears the GPU's state down; the engine's next "
            "start (and each restart) pays the initialisation again. Turn it on with "
            "`nvidia-smi -pm 1`, or at boot with `systemctl enable --now nvidia-persistenced`.",
            evidence=(Evidence(NVIDIA_SMI_Q.key, "Persistence Mode : Disabled"),),
        )

    def _contradiction(self, placement: GpuPlacement, evidence: Tuple[Evidence, ...]) -> Optional[Finding]:
        if not placement.contradiction:
            return None
        return self.finding(
            "numa-node-contradiction", Severity.WARNING,
            f"{placement.gpu.address}: {placement.contradiction}",
            detail="The kernel derives both from firmware; when they disagree the firmware's "
            "proximity table is suspect. strata-doctor trusts numa_node.",
            evidence=evidence,
        )


def _kfd_words(kfd: KfdTopology, gpu: Gpu) -> str:
    """What the amdkfd topology adds of an AMD GPU: its node, VRAM and links."""
    node = kfd.gpu_at(gpu.address)
    if node is None:
        return ""
    words = f" KFD node {node.id}: "
    words += f"{format_bytes(node.vram)} of VRAM" if node.has_vram_bank else "no VRAM bank"
    link = kfd.cpu_link(node)
    if link is not None:
        weight = "?" if link[0].weight is None else link[0].weight
        words += f", PCIe to KFD CPU node {link[1].id} (weight {weight})"
    peers = kfd.xgmi_peers(node)
    if peers:
        words += f", xGMI to {len(peers):,} GPU{'s' if len(peers) != 1 else ''}"
    return words + "."


def _kfd_evidence(kfd: KfdTopology, gpu: Gpu) -> Tuple[Evidence, ...]:
    """The KFD node's properties the words rest on."""
    node = kfd.gpu_at(gpu.address)
    if node is None:
        return ()
    return (Evidence(f"{KFD_TOPOLOGY}/nodes/{node.id}/properties",
                     f"simd_count {node.simd_count}, location_id {node.prop('location_id')}, "
                     f"mem_banks_count {node.prop('mem_banks_count')}"),)


def _evidence(gpu: Gpu) -> Tuple[Evidence, ...]:
    """The compute GPU's own files the placement rests on."""
    base = f"{PCI}/{gpu.address}"
    evidence: Tuple[Evidence, ...] = (
        Evidence(f"{base}/vendor,device", gpu.ids),
        Evidence(f"{base}/numa_node", _raw(gpu.numa_node_raw)),
        Evidence(f"{base}/local_cpulist", format_cpulist(gpu.local_cpus) or "(empty)"),
        Evidence(f"{base}/boot_vga", "-" if gpu.boot_vga is None else str(int(gpu.boot_vga))),
    )
    if gpu.class_source == "modalias":
        evidence += (Evidence(f"{base}/modalias", f"class {gpu.pci_class:06x} (no class file)"),)
    return evidence


def _raw(value: Optional[int]) -> str:
    """How the kernel's numa_node read: a number, or absent."""
    return "absent" if value is None else str(value)
