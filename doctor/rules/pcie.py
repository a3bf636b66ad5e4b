"""How the compute GPU's PCIe link trained, against its maximum and the links above it."""

from typing import NamedTuple, Optional, Tuple

from strata_doctor.facts.gpu import GTS_BY_GENERATION, Gpu, PathLink, pcie_speed
from strata_doctor.facts.nvidia_smi import SmiGpuState


class LinkReading(NamedTuple):
    """The GPU's own link as one source reads it, and the slowest link above it."""

    width_now: Optional[int]
    """Lanes the link trained to."""
    width_max: Optional[int]
    """Lanes the card supports."""
    now: str
    """The link now, as ``Gen3 (8.0 GT/s) x16`` (``facts.gpu.pcie_speed``), from either source."""
    best: str
    """The link at its best, worded alike."""
    slower: bool
    """Whether it runs below its top speed now."""
    source: str
    """``nvidia-smi`` (the driver's view) or ``sysfs``."""
    limit: Optional[Tuple[PathLink, str]]
    """The link on the path to the root port that carries less, and what it lacks
    (``width`` or ``speed``); None when none does."""


def read_link(gpu: Gpu, smi: Optional[SmiGpuState]) -> LinkReading:
    """nvidia-smi's reading when it has every link value, else the kernel's."""
    if smi is not None and smi.link_known:
        gts = GTS_BY_GENERATION.get(smi.gen_current or 0)
        return LinkReading(
            smi.width_current, smi.width_max,
            f"{pcie_speed(generation=smi.gen_current)} x{smi.width_current}",
            f"{pcie_speed(generation=smi.gen_max)} x{smi.width_max}",
            (smi.gen_current or 0) < (smi.gen_max or 0), "nvidia-smi",
            gpu.path_limit(smi.width_current, gts),
        )
    link = gpu.link
    return LinkReading(
        link.current_width, link.max_width, link.now, link.best,
        bool(link.current_speed and link.max_speed and link.current_gts != link.max_gts), "sysfs",
        gpu.path_minimum,
    )


def link_verdict(reading: LinkReading) -> str:
    """The finding the link earns: ``narrow`` (its own width), ``narrow-path`` (a narrower
    link above), ``idle-speed`` (its own speed, which load raises), ``slow-path`` (a slower
    link above) or ``full``."""
    if reading.width_now and reading.width_max and reading.width_now < reading.width_max:
        return "narrow"
    if reading.limit is not None and reading.limit[1] == "width":
        return "narrow-path"
    if reading.slower:
        return "idle-speed"
    return "slow-path" if reading.limit is not None else "full"
