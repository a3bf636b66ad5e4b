"""pcie-link: is the compute GPU's PCIe link as wide and fast as it can be?"""

from __future__ import annotations

from typing import Iterator, Optional

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.model import Evidence, Finding, Severity


class PcieLinkCheck(Check):
    """Compares the compute GPU's PCIe link with its maximum.

    Reads ``current_link_width``, ``max_link_width``, ``current_link_speed`` and
    ``max_link_speed`` of the GPU's PCI function. A narrower link than the card supports
    (x8 in an x16 card, a riser, a slot wired x4) is a warning: it cuts expert uploads.
    A lower speed is only info, because GPUs drop the link to 2.5 GT/s when idle and
    raise it under load. The seed box's link (Gen3 x16, 11.6-11.9 GB/s) carried only
    200-257 MB/s during prompts, so the link is rarely the limiter for this engine.
    """

    id = "pcie-link"
    title = "GPU PCIe link"

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.placement is None:
            return "no GPU found"
        if not ctx.placement.gpu.link.known:
            return "the kernel reports no PCIe link for the GPU (virtual or integrated device)"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        assert ctx.placement is not None
        gpu = ctx.placement.gpu
        link = gpu.link
        base = f"/sys/bus/pci/devices/{gpu.address}"
        evidence = (
            Evidence(f"{base}/current_link_width", f"{link.current_width} (max {link.max_width})"),
            Evidence(f"{base}/current_link_speed", f"{link.current_speed} (max {link.max_speed})"),
        )
        now = f"{link.current_speed} x{link.current_width}"
        best = f"{link.max_speed} x{link.max_width}"
        if link.current_width and link.max_width and link.current_width < link.max_width:
            yield self.finding(
                "narrow", Severity.WARNING,
                f"{gpu.address} runs at x{link.current_width} of x{link.max_width}",
                detail="Check the slot wiring, risers and BIOS bifurcation settings.",
                evidence=evidence,
            )
        elif link.current_speed and link.max_speed and link.current_speed != link.max_speed:
            yield self.finding(
                "idle-speed", Severity.INFO,
                f"{gpu.address} link at {now} (max {best}); GPUs lower the speed when idle",
                evidence=evidence,
            )
        else:
            yield self.finding("full", Severity.OK, f"{gpu.address} link at {now}", evidence=evidence)
