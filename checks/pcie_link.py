"""pcie-link: is the compute GPU's PCIe link, up to its root port, as wide and fast as it can be?"""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple, Union

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.gpu import AMD, Gpu, PcieLink, pcie_speed
from strata_doctor.facts.nvidia_smi import NVIDIA_SMI_QUERY, SmiGpuState
from strata_doctor.facts.rocm_smi import ROCM_SMI_PRODUCT, ROCM_SMI_TOPO
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.pcie import LinkReading, link_verdict, read_link

PCI = "/sys/bus/pci/devices"


class PcieLinkCheck(Check):
    """Compares the compute GPU's PCIe link, and every link above it, with its maximum.

    Reads ``current_link_width``, ``max_link_width``, ``current_link_speed`` and
    ``max_link_speed`` of the GPU's PCI function and of each bridge on its path to the root
    port (a PCIe switch's ports, the root port), from the device's folder under
    ``/sys/devices``. The path carries what its slowest link carries: an x16 GPU behind a
    switch whose uplink trained at x8 moves x8. When ``nvidia-smi --query-gpu`` is captured,
    its ``pcie.link.gen.current/max`` and ``pcie.link.width.current/max`` are preferred for
    the GPU's own link (the driver's view). An AMD GPU's link is the kernel's, as for any
    GPU without nvidia-smi; an MI300X's 32 GT/s x16 is Gen5. The finding names the GPU's
    model where nvidia-smi, rocm-smi or the ids tell it.

    A narrower link than the card supports (x8 in an x16 card, a riser, a slot wired x4), or
    a narrower link above it, is a warning: it cuts expert uploads. A lower speed is only
    info, because an idle GPU trains its link down (to 2.5 GT/s, Gen1) and raises it under
    load. The seed box's link (Gen3 x16, 11.6-11.9 GB/s) carried only 200-257 MB/s during
    prompts, so the link is rarely the limiter for this engine.
    """

    id = "pcie-link"
    title = "GPU PCIe link"
    findings = ("narrow", "narrow-path", "idle-speed", "slow-path", "full")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        gpu = ctx.placement.gpu if ctx.placement else None
        if gpu is not None and gpu.vendor == 0x10DE:
            return (NVIDIA_SMI_QUERY,)
        return (ROCM_SMI_PRODUCT, ROCM_SMI_TOPO) if gpu is not None and gpu.vendor == AMD else ()

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.placement is None:
            return ctx.compute_gpu[1]
        if not ctx.placement.gpu.link.known:
            return "the kernel reports no PCIe link for the GPU (virtual or integrated device)"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        assert ctx.placement is not None
        gpu = ctx.placement.gpu
        smi = ctx.smi_states.get(gpu.address)
        reading = read_link(gpu, smi)
        evidence = _evidence(gpu, smi)
        verdict = link_verdict(reading)
        model = ctx.gpu_names.get(gpu.address)
        who = f"{gpu.address} ({model})" if model else gpu.address
        if verdict == "full":
            yield self.finding("full", Severity.OK, f"{who} link at {reading.now}{_path_short(gpu)}",
                               evidence=evidence)
            return
        summary, detail = _words(who, reading, verdict)
        yield self.finding(verdict, Severity.INFO if verdict == "idle-speed" else Severity.WARNING,
                           summary, detail=detail + _path_note(gpu), evidence=evidence)


def _evidence(gpu: Gpu, smi: Optional[SmiGpuState]) -> Tuple[Evidence, ...]:
    """The GPU's link files, each upstream link's, and nvidia-smi's reading when it has one."""
    link = gpu.link
    base = f"{PCI}/{gpu.address}"
    evidence: List[Evidence] = [
        Evidence(f"{base}/current_link_width", f"{_said(link.current_width)} (max {_said(link.max_width)})"),
        Evidence(f"{base}/current_link_speed", f"{_said(link.current_speed)} (max {_said(link.max_speed)})"),
    ]
    evidence += [Evidence(f"{PCI}/{hop.address}/current_link_width,current_link_speed",
                          f"x{_said(hop.link.current_width)} at {_said(hop.link.current_speed)} (upstream)")
                 for hop in gpu.path if hop.link.known]
    if smi is not None and smi.link_known:
        evidence.append(Evidence(NVIDIA_SMI_QUERY.key,
                                 f"{pcie_speed(generation=smi.gen_current)} x{smi.width_current} "
                                 f"(max {pcie_speed(generation=smi.gen_max)} x{smi.width_max})"))
    return tuple(evidence)


def _words(who: str, reading: LinkReading, verdict: str) -> Tuple[str, str]:
    """(summary, detail) of a link that carries less than it could; ``who`` names the GPU."""
    if verdict == "narrow":
        return (f"{who} runs at x{reading.width_now} of x{reading.width_max} ({reading.source})",
                "Check the slot wiring, risers and BIOS bifurcation settings.")
    if verdict == "idle-speed":
        return (f"{who} link at {reading.now} (max {reading.best}, {reading.source}); an idle "
                "GPU trains its link down and raises it under load",
                "Read it again while the engine computes; a link that stays below its "
                "maximum under load points at the slot or the BIOS.")
    assert reading.limit is not None
    limit = reading.limit[0]
    if verdict == "narrow-path":
        return (f"{who} runs at x{reading.width_now}, but {limit.address} on its path to the "
                f"root port runs at x{limit.link.current_width}: the GPU gets x{limit.link.current_width}",
                "A PCIe switch's uplink or a root port trained narrower than the GPU's own "
                "link; check the switch's slot, its riser and the BIOS bifurcation settings.")
    return (f"{who} runs at {reading.now}, but {limit.address} on its path to the root port "
            f"runs at {_speed(limit.link)}: the GPU gets {_gen(limit.link.current_gts)}",
            "A PCIe switch or root port above the GPU trained slower than the GPU; "
            "check the BIOS's PCIe speed setting for that slot.")


def _said(value: Union[int, str, None]) -> str:
    """A link file's value as evidence says it: ``unknown`` where the tree gave none."""
    return "unknown" if value is None else str(value)


def _speed(link: PcieLink) -> str:
    return pcie_speed(link.current_gts, raw=link.current_speed)


def _gen(gts: Optional[float]) -> str:
    return pcie_speed(gts) if gts else "less"


def _path_note(gpu: Gpu) -> str:
    hops = [h for h in gpu.path if h.link.known]
    if not hops:
        return ""
    text = ", ".join(f"{h.address} {h.link.now}" for h in hops)
    return f" Path to the root port: {text}."


def _path_short(gpu: Gpu) -> str:
    hops = [h for h in gpu.path if h.link.known]
    if not hops:
        return ""
    return f", and no link up to the root port {hops[-1].address} is narrower or slower"

