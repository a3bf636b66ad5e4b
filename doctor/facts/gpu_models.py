"""GPU model names from PCI vendor:device ids, for the GPUs Strata's users run.

The names follow the PCI ID Repository (pci-ids.ucw.cz, the ``pci.ids`` that ``lspci``
prints from) and the kernel's amdgpu id table (drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c,
``pciidlist``), shortened to the name people use. The table is deliberately small: a GPU it
lacks is named by its vendor and ids, and nvidia-smi's or rocm-smi's own name, when
captured, wins over it (``HostContext.gpu_names``).
"""

from typing import Dict, Optional, Tuple

GPU_MODELS: Dict[Tuple[int, int], str] = {
    # NVIDIA (10de): data-centre parts first, then the desktop cards of the seed box's story.
    (0x10DE, 0x2330): "H100 SXM5",
    (0x10DE, 0x2331): "H100 PCIe",
    (0x10DE, 0x2342): "GH200",
    (0x10DE, 0x20B0): "A100 SXM4",
    (0x10DE, 0x1DB1): "Tesla V100 SXM2",
    (0x10DE, 0x15F8): "Tesla P100 PCIe",
    (0x10DE, 0x2684): "GeForce RTX 4090",
    (0x10DE, 0x1B06): "GeForce GTX 1080 Ti",
    (0x10DE, 0x128B): "GeForce GT 710",
    # AMD (1002): Instinct accelerators, a Radeon desktop card and Ryzen APUs' iGPUs.
    (0x1002, 0x740F): "Instinct MI210",
    (0x1002, 0x740C): "Instinct MI250X",
    (0x1002, 0x74A1): "Instinct MI300X",
    (0x1002, 0x744C): "Radeon RX 7900 XTX",
    (0x1002, 0x164E): "Radeon Graphics (Raphael iGPU)",
    (0x1002, 0x15BF): "Radeon 780M (Phoenix iGPU)",
}
"""(vendor, device) -> the model's short name."""

APU_GPUS = frozenset({(0x1002, 0x164E), (0x1002, 0x15BF)})
"""The table's GPUs that are a Ryzen APU's own: integrated even where a capture lacks the
KFD topology that shows it (no VRAM bank)."""

_MAKERS = {0x10DE: "NVIDIA", 0x1002: "AMD"}


def gpu_model(vendor: Optional[int], device: Optional[int]) -> Optional[str]:
    """The model's name with its maker (``AMD Instinct MI210``); None for ids the table lacks."""
    if vendor is None or device is None:
        return None
    name = GPU_MODELS.get((vendor, device))
    return f"{_MAKERS[vendor]} {name}" if name is not None else None
