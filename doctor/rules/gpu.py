"""Which GPU the engine computes on, and which NUMA node it sits on."""

from typing import List, NamedTuple, Optional, Tuple

from strata_doctor.facts.gpu import AMD, INTEL, Gpu, normalize_address
from strata_doctor.facts.gpu_models import APU_GPUS, gpu_model
from strata_doctor.facts.kfd import KfdNode
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


class ComputeCandidates(NamedTuple):
    """The GPUs that may compute, and the management or emulated displays and the
    integrated GPUs set aside."""

    candidates: Tuple[Gpu, ...]
    """Functions that are no BMC's or hypervisor's display chip and no CPU's integrated GPU."""
    left_out: Tuple[Gpu, ...]
    """BMC and emulated displays, integrated GPUs: never a compute GPU unless ``--gpu`` names
    one."""

    @property
    def aside(self) -> str:
        """What the reason adds about the displays set aside (empty when none were)."""
        if not self.left_out:
            return ""
        return "; " + ", ".join(f"{g.address} is {g.set_aside}" for g in self.left_out)

    @property
    def kinds(self) -> str:
        """What was set aside, as the reason's "not a ..." names it."""
        displays = any(g.management for g in self.left_out)
        integrated = any(g.integrated and not g.management for g in self.left_out)
        if displays and integrated:
            return "a management or emulated display or an integrated GPU"
        return "an integrated GPU" if integrated else "a management or emulated display"


NO_GPU = "no GPU found"
"""The one wording, in every command, of a PCI bus listed with no display-class function."""
NO_PCI = "the tree lists no PCI function: whether a GPU exists is unknown"
"""And of a tree without the bus (a capture that left it out): unknown, never "no GPU"."""


def choose_compute_gpu(
    gpus: Tuple[Gpu, ...], wanted: Optional[str], named_by: str = "--gpu", setting: str = "--gpu",
    pci_listed: bool = True,
) -> Tuple[Optional[Gpu], str]:
    """Pick the GPU the engine computes on, with the reason (a noun phrase: "Chosen as the
    only GPU"); ``named_by`` says who named ``wanted`` (``--gpu``, ``gpu: in FILE``), and
    ``setting`` how an error names it (``--gpu``, ``FILE: gpu:``); ``pci_listed`` is false
    when the tree lists no PCI function at all, so no GPU is unknown rather than absent."""
    if wanted:
        return named_gpu(gpus, wanted, named_by, setting)
    if not gpus:
        return None, NO_GPU if pci_listed else NO_PCI
    split = compute_candidates(gpus)
    if not split.candidates:
        chips = "; ".join(f"{g.address} ({g.vendor_name} {g.ids}) is {g.set_aside}" for g in gpus)
        return None, f"no compute GPU: {chips}, never a compute GPU unless --gpu names it"
    gpu, reason = _pick(split)
    return gpu, reason + split.aside


def named_gpu(gpus: Tuple[Gpu, ...], wanted: str, named_by: str, setting: str) -> Tuple[Gpu, str]:
    """The GPU that ``--gpu`` or ``gpu:`` names, whatever it is; raises GpuChoiceError when
    no display-class function sits at that address."""
    address = normalize_address(wanted)
    for gpu in gpus:
        if gpu.address == address:
            return gpu, f"the GPU named by {named_by} ({address})"
    known = ", ".join(g.address for g in gpus) or "none"
    raise GpuChoiceError(
        f"{setting} {wanted}: no display-class PCI function at {address} (found: {known})"
    )


def compute_candidates(gpus: Tuple[Gpu, ...]) -> ComputeCandidates:
    """Split the display functions into possible compute GPUs and those set aside: management
    displays and integrated GPUs (:func:`integrated_gpu`, which the context applies)."""
    return ComputeCandidates(tuple(g for g in gpus if g.set_aside is None),
                             tuple(g for g in gpus if g.set_aside is not None))


INTEL_GPU_DRIVERS = ("i915", "xe")


def integrated_gpu(gpu: Gpu, kfd_node: Optional[KfdNode]) -> Optional[str]:
    """What ``gpu`` is when it is a CPU's integrated GPU, else None: an AMD GPU whose KFD node
    has SIMDs and no VRAM bank (an APU's: it computes out of host RAM, so an expert cache on
    it caches nothing), one the model table knows as an APU's where no KFD node shows it, or
    an Intel GPU under i915 or xe at 00:02.0, the address Intel's
    integrated graphics always take (a discrete Arc card sits behind a bridge, on another
    bus)."""
    if gpu.vendor == AMD and kfd_node is not None and kfd_node.integrated:
        return (f"an APU's integrated GPU (KFD node {kfd_node.id}: simd_count {kfd_node.simd_count}, "
                "no VRAM bank)")
    if kfd_node is None and (gpu.vendor, gpu.device) in APU_GPUS:
        return f"an APU's integrated GPU ({gpu_model(gpu.vendor, gpu.device)}, {gpu.ids})"
    if gpu.vendor == INTEL and gpu.driver in INTEL_GPU_DRIVERS and gpu.address.endswith(":00:02.0"):
        return f"an Intel integrated GPU ({gpu.driver})"
    return None


def _pick(split: ComputeCandidates) -> Tuple[Gpu, str]:
    """The only possible compute GPU, or the best of several."""
    if len(split.candidates) == 1:
        return split.candidates[0], (f"the only GPU that is not {split.kinds}"
                                     if split.left_out else "the only GPU")
    return _among_several(split.candidates)


def _among_several(candidates: Tuple[Gpu, ...]) -> Tuple[Gpu, str]:
    """The one GPU that is not the boot display, else the best of the headless ones (or of
    all, when every one drives a display)."""
    headless = [g for g in candidates if not g.boot_vga]
    if len(headless) == 1:
        display = next(g.address for g in candidates if g.boot_vga)
        return headless[0], f"the GPU that is not the boot display ({display} drives the console)"
    pool = headless or list(candidates)
    if any(g.has_resource for g in pool):
        return _largest_bar(pool)
    return _first_by_address(pool)


def _largest_bar(pool: List[Gpu]) -> Tuple[Gpu, str]:
    """The GPU with the largest memory BAR (NVIDIA, then the lower address, breaks ties)."""
    best = max(pool, key=lambda g: (g.largest_bar, g.vendor == 0x10DE, [-ord(c) for c in g.address]))
    ties = [g for g in pool if g.largest_bar == best.largest_bar]
    mib = best.largest_bar // 2**20
    if len(ties) == 1:
        return best, f"the largest memory BAR ({mib} MiB) among {len(pool):,} GPUs"
    return best, (f"the first by PCI address of {len(ties):,} GPUs with the same largest memory BAR "
                  f"({mib} MiB); pass --gpu to choose another")


def _first_by_address(pool: List[Gpu]) -> Tuple[Gpu, str]:
    """Without resource files: the first NVIDIA GPU by PCI address, else the first GPU."""
    nvidia = [g for g in pool if g.vendor == 0x10DE]
    among = nvidia or pool
    kind = "NVIDIA GPUs" if nvidia and len(nvidia) < len(pool) else "GPUs"
    return min(among, key=lambda g: g.address), (
        f"the first by PCI address of {len(among):,} {kind} (no resource file gives their memory "
        "BARs); pass --gpu to choose another")


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
