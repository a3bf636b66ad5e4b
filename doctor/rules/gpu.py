"""Which GPU the engine computes on, and which NUMA node it sits on."""

from typing import NamedTuple, Optional, Tuple

from strata_doctor.facts.gpu import Gpu, normalize_address
from strata_doctor.facts.numa import NumaFacts
from strata_doctor.facts.parse import format_cpulist


class GpuPlacement(NamedTuple):
    """The compute GPU, its node, and how each was decided."""

    gpu: Gpu
    """The chosen compute GPU."""
    choice_reason: str
    """Why this GPU was taken as the compute GPU."""
    node: Optional[int]
    """Its NUMA node; None when neither ``numa_node`` nor ``local_cpulist`` tells."""
    node_source: str
    """``numa_node``, ``local_cpulist`` or ``none``."""
    contradiction: Optional[str] = None
    """Set when ``numa_node`` and ``local_cpulist`` disagree."""


class GpuChoiceError(Exception):
    """``--gpu`` names no display-class function on this host."""


def choose_compute_gpu(
    gpus: Tuple[Gpu, ...], wanted: Optional[str], named_by: str = "--gpu", setting: str = "--gpu",
) -> Tuple[Optional[Gpu], str]:
    """Pick the GPU the engine computes on, with the reason (a noun phrase: "Chosen as the
    only GPU"); ``named_by`` says who named ``wanted`` (``--gpu``, ``gpu: in FILE``), and
    ``setting`` how an error names it (``--gpu``, ``FILE: gpu:``)."""
    if wanted:
        address = normalize_address(wanted)
        for gpu in gpus:
            if gpu.address == address:
                return gpu, f"the GPU named by {named_by} ({address})"
        known = ", ".join(g.address for g in gpus) or "none"
        raise GpuChoiceError(
            f"{setting} {wanted}: no display-class PCI function at {address} (found: {known})"
        )
    if not gpus:
        return None, "no display-class PCI function found"
    candidates = [g for g in gpus if g.management is None]
    if not candidates:
        chips = "; ".join(f"{g.address} ({g.vendor_name} {g.ids}) is {g.management}" for g in gpus)
        return None, f"no compute GPU: {chips}, never a compute GPU unless --gpu names it"
    left_out = [g for g in gpus if g.management is not None]
    aside = ("; " + ", ".join(f"{g.address} is {g.management}" for g in left_out)) if left_out else ""
    if len(candidates) == 1:
        return candidates[0], ("the only GPU" if not left_out else "the only GPU that is not a "
                               "management or emulated display") + aside
    headless = [g for g in candidates if not g.boot_vga]
    if len(headless) == 1 and len(candidates) > 1:
        display = next(g.address for g in candidates if g.boot_vga)
        return headless[0], f"the GPU that is not the boot display ({display} drives the console)" + aside
    pool = headless or candidates
    if any(g.has_resource for g in pool):
        best = max(pool, key=lambda g: (g.largest_bar, g.vendor == 0x10DE, [-ord(c) for c in g.address]))
        ties = [g for g in pool if g.largest_bar == best.largest_bar]
        if len(ties) == 1:
            return best, (f"the largest memory BAR ({best.largest_bar // 2**20} MiB) among {len(pool)} "
                          "GPUs") + aside
        return best, (f"the first by PCI address of {len(ties)} GPUs with the same largest memory BAR "
                      f"({best.largest_bar // 2**20} MiB); pass --gpu to choose another") + aside
    nvidia = [g for g in pool if g.vendor == 0x10DE]
    first = min(nvidia or pool, key=lambda g: g.address)
    kind = "NVIDIA GPUs" if nvidia and len(nvidia) < len(pool) else "GPUs"
    return first, (f"the first by PCI address of {len(nvidia or pool)} {kind} (no resource file "
                   "gives their memory BARs); pass --gpu to choose another") + aside


def place_gpu(gpu: Gpu, numa: NumaFacts) -> Tuple[Optional[int], str, Optional[str]]:
    """The GPU's node: ``numa_node`` when >= 0, else the node matching ``local_cpulist``."""
    by_cpus = numa.node_of_cpus(gpu.local_cpus)
    raw = gpu.numa_node_raw
    if raw is not None and raw >= 0 and numa.node(raw) is not None:
        contradiction = _contradiction(gpu, raw, numa)
        return raw, "numa_node", contradiction
    if by_cpus is not None:
        return by_cpus, "local_cpulist", None
    if len(numa.nodes) == 1:
        return numa.nodes[0].id, "single-node", None
    return None, "none", None


def _contradiction(gpu: Gpu, node_id: int, numa: NumaFacts) -> Optional[str]:
    node = numa.node(node_id)
    if node is None or not gpu.local_cpus or not node.all_cpus:
        return None
    if gpu.local_cpus <= node.all_cpus:
        return None
    other = numa.node_of_cpus(gpu.local_cpus)
    where = f" (those are node {other}'s CPUs)" if other is not None else ""
    return (
        f"numa_node says {node_id} but local_cpulist is {format_cpulist(gpu.local_cpus)}{where}"
    )
