"""GPUs on the PCI bus and their links, from sysfs (nvidia-smi's view of them is
:mod:`strata_doctor.facts.nvidia_smi`'s)."""

import re
from typing import Dict, FrozenSet, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.parse import (
    format_cpulist,
    parse_cpulist,
    parse_cpumap,
    parse_int,
)
from strata_doctor.root import Root

PCI_DIR = "/sys/bus/pci/devices"


class PcieLink(NamedTuple):
    """A PCIe link's state, from ``current_link_speed``/``max_link_speed`` and widths."""

    current_speed: Optional[str]
    max_speed: Optional[str]
    current_width: Optional[int]
    max_width: Optional[int]

    @property
    def known(self) -> bool:
        """Whether the kernel reported the link at all."""
        return self.current_width is not None or self.current_speed is not None

    @property
    def current_gts(self) -> Optional[float]:
        """The current speed in GT/s (``8.0 GT/s PCIe`` -> 8.0); None when unknown."""
        return link_gts(self.current_speed)

    @property
    def max_gts(self) -> Optional[float]:
        """The maximum speed in GT/s; None when unknown."""
        return link_gts(self.max_speed)

    @property
    def now(self) -> str:
        """The link now, as people read it: ``Gen1 (2.5 GT/s) x16`` (``?`` for what is unknown)."""
        return f"{pcie_speed(self.current_gts, raw=self.current_speed)} x{self.current_width or '?'}"

    @property
    def best(self) -> str:
        """The link at its maximum: ``Gen3 (8.0 GT/s) x16``."""
        return f"{pcie_speed(self.max_gts, raw=self.max_speed)} x{self.max_width or '?'}"

    @property
    def text(self) -> Optional[str]:
        """The one way a link is written: ``Gen3 (8.0 GT/s) x16``, with ``(max Gen3 (8.0 GT/s)
        x16)`` when it
        trained below its maximum (callers write ``PCIe {text}``); None when the kernel
        reported no link."""
        if not self.known:
            return None
        return self.now if self.now == self.best else f"{self.now} (max {self.best})"


PCIE_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
"""Transfer rate in GT/s -> PCIe generation."""
GTS_BY_GENERATION = {gen: rate for rate, gen in PCIE_GENERATIONS.items()}
"""PCIe generation -> transfer rate in GT/s."""


def pcie_speed(gts: Optional[float] = None, generation: Optional[int] = None,
               raw: Optional[str] = None) -> str:
    """A PCIe speed named one way in every command: its generation and its rate once,
    ``Gen1 (2.5 GT/s)``, from either (nvidia-smi gives the generation, the kernel the rate);
    what is known alone when the other cannot be told; ``raw`` as the kernel wrote it (or
    ``?``) when neither is known."""
    if generation is None and gts is not None:
        generation = PCIE_GENERATIONS.get(gts)
    if gts is None and generation is not None:
        gts = GTS_BY_GENERATION.get(generation)
    if generation and gts:
        return f"Gen{generation} ({gts:.1f} GT/s)"
    if gts:
        return f"{gts:.1f} GT/s"
    return f"Gen{generation}" if generation else speed_text(raw)


def speed_text(speed: Optional[str]) -> str:
    """A link speed as people read it: the kernel's ``2.5 GT/s PCIe`` -> ``2.5 GT/s`` (the
    word PCIe is the caller's); ``?`` when unknown."""
    text = (speed or "").strip()
    if text.endswith(" PCIe"):
        text = text[: -len(" PCIe")].rstrip()
    return text or "?"


def link_gts(speed: Optional[str]) -> Optional[float]:
    """``8.0 GT/s PCIe`` (or ``8 GT/s``) -> 8.0; None for ``Unknown`` or garbage."""
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", speed or "")
    return float(match.group(1)) if match else None


class PathLink(NamedTuple):
    """One PCI function on the way from a GPU up to its root port, and its link."""

    address: str
    """The function's PCI address (the GPU itself, a switch port or the root port)."""
    link: PcieLink
    """Its ``current_link_*`` and ``max_link_*`` files."""


class Gpu(NamedTuple):
    """A display or 3D controller (PCI class 0x03xxxx), or an AMD accelerator that amdgpu
    drives (class 0x12, an Instinct MI300X), from ``/sys/bus/pci/devices/ADDR/``."""

    address: str
    """PCI address, ``0000:84:00.0``."""
    vendor: Optional[int]
    """PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel)."""
    device: Optional[int]
    """PCI device id."""
    pci_class: int
    """The 24-bit class code."""
    driver: Optional[str]
    """Bound driver's name, from the ``driver`` link."""
    numa_node_raw: Optional[int]
    """``numa_node`` as the kernel wrote it; -1 when firmware gave none."""
    local_cpus: FrozenSet[int]
    """From ``local_cpulist`` (else ``local_cpus``)."""
    boot_vga: Optional[bool]
    """From ``boot_vga``: the firmware's boot display."""
    link: PcieLink
    """PCIe link state."""
    largest_bar: int
    """Size in bytes of the largest memory BAR, from ``resource`` (0 without the file)."""
    has_resource: bool = False
    """Whether the ``resource`` file was there to read BAR sizes from."""
    class_source: str = "class"
    """Where ``pci_class`` came from: ``class``, or ``modalias`` when that file is missing."""
    local_cpus_conflict: Optional[str] = None
    """Set when ``local_cpulist`` and the ``local_cpus`` bitmap name different CPUs."""
    path: Tuple[PathLink, ...] = ()
    """The functions above this one up to its root port (upstream bridges, nearest first),
    from the device's folder under ``/sys/devices``; empty when the path is not known."""
    integrated: Optional[str] = None
    """What the GPU is when it is a CPU's integrated GPU (an APU's, by the KFD topology, or
    Intel's): never the compute GPU unless named. Set by the context, not read here."""

    @property
    def management(self) -> Optional[str]:
        """What the chip is when it is a BMC's or a hypervisor's display (never a compute
        GPU unless named by ``--gpu``); None for any other display function."""
        if self.vendor is None:
            return None
        for (vendor, device), name in MANAGEMENT_DISPLAYS.items():
            if self.vendor == vendor and device in (None, self.device):
                return name
        return None

    @property
    def set_aside(self) -> Optional[str]:
        """Why the GPU is never taken as the compute GPU unless named: a management or
        emulated display, or an integrated GPU; None for a GPU that may compute."""
        return self.management or self.integrated

    @property
    def path_minimum(self) -> Optional[Tuple[PathLink, str]]:
        """The slowest link on the way to the root port and what limits it (``width`` or
        ``speed``), when an upstream link is narrower or slower than the GPU's own now."""
        return self.path_limit(self.link.current_width, self.link.current_gts)

    def path_limit(
        self, own_width: Optional[int], own_gts: Optional[float]
    ) -> Optional[Tuple[PathLink, str]]:
        """Like :attr:`path_minimum`, against a width and speed of the GPU's own link read
        elsewhere (nvidia-smi's)."""
        narrow = _narrowest(self.path, own_width)
        if narrow is not None:
            return narrow, "width"
        slow = _slowest(self.path, own_gts)
        if slow is not None:
            return slow, "speed"
        return None

    @property
    def vendor_name(self) -> str:
        """A short vendor name for display."""
        return _VENDORS.get(self.vendor or -1, f"{self.vendor:#06x}" if self.vendor else "unknown")

    @property
    def ids(self) -> str:
        """``vendor:device`` in lspci's form, e.g. ``10de:1b06``."""
        if self.vendor is None or self.device is None:
            return "?:?"
        return f"{self.vendor:04x}:{self.device:04x}"


def _narrowest(path: Tuple[PathLink, ...], own_width: Optional[int]) -> Optional[PathLink]:
    """The narrowest link on ``path`` that is narrower than ``own_width``."""
    narrow = [h for h in path if h.link.current_width and own_width and h.link.current_width < own_width]
    return min(narrow, key=lambda h: h.link.current_width or 0) if narrow else None


def _slowest(path: Tuple[PathLink, ...], own_gts: Optional[float]) -> Optional[PathLink]:
    """The slowest link on ``path`` that is slower than ``own_gts``."""
    slow = [h for h in path if h.link.current_gts and own_gts and (h.link.current_gts or 0) < own_gts]
    return min(slow, key=lambda h: h.link.current_gts or 0.0) if slow else None


_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x1A03: "ASPEED", 0x102B: "Matrox",
            0x1013: "Cirrus Logic", 0x15AD: "VMware", 0x1AF4: "Red Hat (virtio)", 0x1234: "QEMU",
            0x1B36: "Red Hat (QEMU)"}


MANAGEMENT_DISPLAYS: Dict[Tuple[int, Optional[int]], str] = {
    (0x1A03, None): "a BMC's ASPEED VGA",
    (0x102B, None): "a BMC's Matrox VGA",
    (0x1013, None): "an emulated or BMC Cirrus Logic VGA",
    (0x1AF4, 0x1050): "a virtio-gpu display",
    (0x1234, 0x1111): "QEMU's emulated bochs VGA",
    (0x15AD, None): "a VMware SVGA display",
    (0x1B36, None): "a QXL display",
}
"""(vendor, device or None for any) of display chips that are never a compute GPU unless
``--gpu`` or the config names them: BMC VGA chips and hypervisors' emulated displays."""


def read_pci_functions(root: Root) -> Tuple[str, ...]:
    """The functions ``/sys/bus/pci/devices`` lists; none when the capture holds none,
    which says nothing about the host's GPUs (s390, a PS3, a tree of sys/devices/system
    alone)."""
    return tuple(root.listdir(PCI_DIR))


NVIDIA = 0x10DE
AMD = 0x1002
INTEL = 0x8086
AMD_COMPUTE_CLASSES = (0x0300, 0x0302, 0x0380, 0x1200)
"""The classes (base and sub-class) of AMD's GPUs that amdgpu drives: VGA (Radeon, APUs),
3D (older Instinct), display "other" (MI210) and processing accelerator (MI300X)."""
ACCELERATOR = 0x12
"""PCI base class of processing accelerators: a GPU only when AMD's amdgpu drives it or
``--gpu`` names it (Gaudi, NPUs and FPGAs share the class)."""


def read_gpus(root: Root, functions: Optional[Sequence[str]] = None,
              named: Optional[str] = None) -> Tuple[Gpu, ...]:
    """Read every display-class PCI function through ``root``, of ``functions`` when the
    listing is already read, and every AMD accelerator amdgpu drives; a processing
    accelerator of another vendor only when ``named`` (``--gpu``) is its address."""
    wanted = normalize_address(named) if named else None
    gpus = []
    for address in read_pci_functions(root) if functions is None else functions:
        base = f"{PCI_DIR}/{address}"
        pci_class = parse_int(root.read(f"{base}/class"))
        source = "class"
        if pci_class is None and root.reads.get(f"{base}/class") == "missing":
            pci_class, source = modalias_class(root.read_value(f"{base}/modalias")), "modalias"
        if pci_class is None or not _gpu_class(root, base, pci_class, address == wanted):
            continue
        gpus.append(_read_gpu(root, address, pci_class)._replace(class_source=source))
    return tuple(gpus)


def _gpu_class(root: Root, base: str, pci_class: int, named: bool) -> bool:
    """Whether a function of this class is a GPU: any display/3D controller, and a
    processing accelerator that is AMD's under amdgpu or that ``--gpu`` names."""
    if pci_class >> 16 == 0x03:
        return True
    if pci_class >> 16 != ACCELERATOR:
        return False
    if named:
        return True
    return (pci_class >> 8 in AMD_COMPUTE_CLASSES and parse_int(root.read(f"{base}/vendor")) == AMD
            and root.link_name(f"{base}/driver") == "amdgpu")


def modalias_class(text: Optional[str]) -> Optional[int]:
    """The 24-bit class from a PCI ``modalias`` (``pci:v000010DEd00002331sv...bc03sc02i00``)."""
    match = re.search(r"bc([0-9A-Fa-f]{2})sc([0-9A-Fa-f]{2})i([0-9A-Fa-f]{2})$", text or "")
    return int("".join(match.groups()), 16) if match else None


def _read_gpu(root: Root, address: str, pci_class: int) -> Gpu:
    base = f"{PCI_DIR}/{address}"
    cpulist = root.read(f"{base}/local_cpulist")
    bitmap = root.read(f"{base}/local_cpus")
    local = parse_cpulist(cpulist) if cpulist is not None else parse_cpumap(bitmap or "")
    conflict = None
    if cpulist is not None and bitmap is not None and parse_cpumap(bitmap) != local:
        conflict = (f"local_cpulist is {format_cpulist(local) or '(empty)'} but local_cpus "
                    f"{bitmap.strip()} is {format_cpulist(parse_cpumap(bitmap)) or '(empty)'}")
    boot = root.read_value(f"{base}/boot_vga")
    resource = root.read(f"{base}/resource")
    return Gpu(
        address=address,
        vendor=parse_int(root.read(f"{base}/vendor")),
        device=parse_int(root.read(f"{base}/device")),
        pci_class=pci_class,
        driver=root.link_name(f"{base}/driver"),
        numa_node_raw=parse_int(root.read(f"{base}/numa_node")),
        local_cpus=local,
        boot_vga=None if boot is None else boot == "1",
        link=_read_link(root, base),
        largest_bar=_largest_bar(resource or ""),
        has_resource=resource is not None,
        local_cpus_conflict=conflict,
        path=_upstream(root, address),
    )


_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _upstream(root: Root, address: str) -> Tuple[PathLink, ...]:
    """The PCI functions above ``address`` up to its root port, nearest first: the folders
    named like PCI addresses on the way from ``/sys/devices/pciDDDD:BB`` to the device."""
    target = root.readlink(f"{PCI_DIR}/{address}")
    if not target:
        return ()
    parts = [p for p in target.split("/") if p not in ("", ".", "..")]
    if "devices" not in parts:
        return ()
    parts = parts[parts.index("devices") + 1:]
    hops = []
    for depth in range(len(parts) - 2, -1, -1):
        name = parts[depth]
        if not _PCI_ADDRESS.match(name):
            break
        base = "/sys/devices/" + "/".join(parts[: depth + 1])
        hops.append(PathLink(name, _read_link(root, base)))
    return tuple(hops)


def _read_link(root: Root, base: str) -> PcieLink:
    return PcieLink(
        current_speed=root.read_value(f"{base}/current_link_speed"),
        max_speed=root.read_value(f"{base}/max_link_speed"),
        current_width=parse_int(root.read(f"{base}/current_link_width")),
        max_width=parse_int(root.read(f"{base}/max_link_width")),
    )


def _largest_bar(text: str) -> int:
    """Largest memory BAR from a PCI ``resource`` file (start end flags, hex per line)."""
    largest = 0
    for line in text.splitlines()[:6]:
        words = line.split()
        if len(words) < 3:
            continue
        try:
            start, end, flags = (int(w, 16) for w in words[:3])
        except ValueError:
            continue
        if end > start and flags & 0x200:  # IORESOURCE_MEM
            largest = max(largest, end - start + 1)
    return largest


def normalize_address(text: str) -> str:
    """Accept ``84:00.0`` or ``0000:84:00.0`` (any case) and return the full form."""
    text = text.strip().lower()
    return text if text.count(":") == 2 else f"0000:{text}"
