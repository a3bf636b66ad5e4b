"""AMD's view of its GPUs: the amdkfd topology, rocm-smi and amd-smi, and the models of every GPU.

A part of :class:`~strata_doctor.context.HostContext`, which inherits it: its facts are read
once per host, on first use, like the rest of the context's. A method that needs another of
the context's facts declares it under ``TYPE_CHECKING`` as a read-only property (as
``context_gpus.py`` does ``engine_pid``), which the context's own cached property fills.
"""

from functools import cached_property
from typing import TYPE_CHECKING, Dict, NamedTuple, Optional, Tuple

from strata_doctor.facts.gpu import AMD, NVIDIA, Gpu, normalize_address, read_gpus
from strata_doctor.facts.gpu_models import gpu_model
from strata_doctor.facts.kfd import NO_TOPOLOGY, KfdTopology, read_kfd
from strata_doctor.facts.rocm_smi import RocmGpu, read_rocm_gpus
from strata_doctor.root import Root
from strata_doctor.rules.gpu import integrated_gpu

if TYPE_CHECKING:
    from strata_doctor.facts.nvidia_smi import SmiGpuState
    from strata_doctor.rules.gpu import GpuPlacement

class GpuRuntime(NamedTuple):
    """The words of the compute GPU's runtime: what pins host memory, the stack, its tool."""

    pin: str
    """``cudaHostRegister`` or ``hipHostRegister``."""
    stack: str
    """``CUDA`` or ``ROCm``."""
    tool: str
    """``nvidia-smi`` or ``rocm-smi``."""
    pins: str
    """What pins registered host memory, as a sentence says it: ``NVIDIA's driver pins``."""


CUDA = GpuRuntime("cudaHostRegister", "CUDA", "nvidia-smi", "NVIDIA's driver pins")
ROCM = GpuRuntime("hipHostRegister", "ROCm", "rocm-smi",
                  "amdgpu's KFD pins (hipHostRegister, as an HMM user page range)")


class AcceleratorFacts:
    """AMD's view of its GPUs: the amdkfd topology, rocm-smi and amd-smi, and the models of every
    GPU."""

    root: Root
    gpu_choice: Optional[str]
    if TYPE_CHECKING:  # HostContext's own facts that this part reads
        @property
        def pci_addresses(self) -> Tuple[str, ...]: ...

        @property
        def gpus(self) -> Tuple[Gpu, ...]: ...

        @property
        def placement(self) -> Optional["GpuPlacement"]: ...

        @property
        def smi_query(self) -> Dict[str, "SmiGpuState"]: ...

    @cached_property
    def display_functions(self) -> Tuple[Gpu, ...]:
        """The GPUs as sysfs lists them (facts/gpu.py), before the KFD topology says which
        are integrated: :attr:`classified_gpus` is what ``ctx.gpus`` holds."""
        return read_gpus(self.root, self.pci_addresses, self.gpu_choice)

    @cached_property
    def kfd(self) -> KfdTopology:
        """The amdkfd topology (facts/kfd.py), read only when the host has an AMD GPU."""
        if not any(g.vendor == AMD for g in self.display_functions):
            return NO_TOPOLOGY
        return read_kfd(self.root)

    @cached_property
    def classified_gpus(self) -> Tuple[Gpu, ...]:
        """:attr:`display_functions`, each integrated GPU marked with what it is
        (rules/gpu.py's ``integrated_gpu``): an APU's by its KFD node, an Intel one by its
        driver and address."""
        return tuple(g._replace(integrated=integrated_gpu(g, self.kfd.gpu_at(g.address)))
                     for g in self.display_functions)

    @cached_property
    def rocm_gpus(self) -> Tuple[RocmGpu, ...]:
        """rocm-smi's GPUs (product name, bus, node), asked only when the host has an AMD GPU
        that amdgpu drives and that may compute (an iGPU beside an NVIDIA card asks nothing)."""
        if not any(g.vendor == AMD and g.driver == "amdgpu" and g.set_aside is None for g in self.gpus):
            return ()
        return read_rocm_gpus(self.root)

    @cached_property
    def gpu_names(self) -> Dict[str, str]:
        """Each GPU's model by PCI address: nvidia-smi's name for an NVIDIA GPU and
        rocm-smi's product name for an AMD one when captured, else the model table's
        (facts/gpu_models.py); a GPU none of them knows is left out."""
        names = {g.address: name for g in self.gpus
                 for name in (gpu_model(g.vendor, g.device),) if name is not None}
        names.update(self._smi_names())
        names.update(self._rocm_names())
        return names

    def _smi_names(self) -> Dict[str, str]:
        """nvidia-smi's GPU names, asked only where an NVIDIA GPU is on the bus."""
        if not any(g.vendor == NVIDIA for g in self.gpus):
            return {}
        return {normalize_address(a): row.name for a, row in self.smi_query.items() if row.name}

    def _rocm_names(self) -> Dict[str, str]:
        """rocm-smi's product names, by the bus it prints or else by its KFD node."""
        by_node = {n.id: n.address for n in self.kfd.nodes if n.address}
        names = {}
        for row in self.rocm_gpus:
            address = row.bus or (by_node.get(row.kfd_node) if row.kfd_node is not None else None)
            if address and row.series:
                names[normalize_address(address)] = row.series
        return names

    def gpu_label(self, gpu: Gpu) -> str:
        """A GPU as a finding names it: ``AMD Instinct MI210 (1002:740f)``, or ``AMD
        1002:740f`` when no source names its model."""
        name = self.gpu_names.get(gpu.address)
        return f"{name} ({gpu.ids})" if name else f"{gpu.vendor_name} {gpu.ids}"

    @property
    def gpu_runtime(self) -> GpuRuntime:
        """The compute GPU's runtime words: ROCm's for an AMD GPU, CUDA's otherwise (and
        without a compute GPU, as the engine's default build is CUDA's)."""
        placement = self.placement
        return ROCM if placement is not None and placement.gpu.vendor == AMD else CUDA
