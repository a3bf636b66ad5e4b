"""The amdkfd topology: AMD's own map of CPU and GPU nodes, their memory and their links,
from ``/sys/class/kfd/kfd/topology`` (the kernel's drivers/gpu/drm/amd/amdkfd/kfd_topology.c).

Each ``nodes/N/properties`` is written by ``node_show`` as ``name value`` lines, one per
property (``sysfs_show_32bit_prop``/``sysfs_show_64bit_prop``: ``"%s %u\\n"``); ``mem_banks``
and ``io_links`` hold one folder per bank or link, each with its own ``properties``
(``mem_show``, ``iolink_show``). A CPU node has ``cpu_cores_count`` > 0 and ``simd_count``
0; a GPU node the reverse. ``location_id`` is the GPU's PCI bus and devfn,
``(bus << 8) | devfn`` (``pci_dev_id``), and ``domain`` its PCI domain (kernels before
5.12 lack it: domain 0).
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import parse_int
from strata_doctor.root import Root

KFD_TOPOLOGY = "/sys/class/kfd/kfd/topology"

HEAP_SYSTEM = 0
"""``HSA_MEM_HEAP_TYPE_SYSTEM``: host RAM, on a CPU node."""
VRAM_HEAPS = (1, 2)
"""``HSA_MEM_HEAP_TYPE_FB_PUBLIC`` and ``FB_PRIVATE``: the GPU's own memory (VRAM, HBM)."""
LINK_PCIE = 2
"""``HSA_IOLINKTYPE_PCIEXPRESS``."""
LINK_XGMI = 11
"""``HSA_IOLINK_TYPE_XGMI``: AMD's GPU-to-GPU fabric (an Instinct hive)."""


class KfdMemBank(NamedTuple):
    """One ``mem_banks/B/properties``."""

    heap_type: Optional[int]
    """``heap_type``: 0 system RAM, 1 and 2 the GPU's VRAM."""
    size: Optional[int]
    """``size_in_bytes``."""

    @property
    def vram(self) -> bool:
        """Whether the bank is the GPU's own memory."""
        return self.heap_type in VRAM_HEAPS


class KfdIoLink(NamedTuple):
    """One ``io_links/L/properties``."""

    type: Optional[int]
    """``type``: 2 PCIe, 11 xGMI."""
    node_from: Optional[int]
    node_to: Optional[int]
    weight: Optional[int]
    """``weight``: 20 for a GPU's PCIe link to its CPU node, 15 per xGMI hop."""


class KfdNode(NamedTuple):
    """One ``nodes/N``: a CPU node or a GPU."""

    id: int
    """N, the folder's number (KFD's own numbering: CPU nodes first)."""
    properties: Dict[str, int]
    """Every ``name value`` line of ``properties`` whose value is a number."""
    mem_banks: Tuple[KfdMemBank, ...] = ()
    io_links: Tuple[KfdIoLink, ...] = ()

    def prop(self, name: str) -> Optional[int]:
        """A property's value; None when the file lacks it."""
        return self.properties.get(name)

    @property
    def simd_count(self) -> int:
        """``simd_count``: 0 on a CPU node."""
        return self.properties.get("simd_count", 0)

    @property
    def is_gpu(self) -> bool:
        """A GPU node: it has SIMDs."""
        return self.simd_count > 0

    @property
    def address(self) -> Optional[str]:
        """The GPU's PCI address from ``domain`` and ``location_id``; None on a CPU node."""
        location = self.prop("location_id")
        if not self.is_gpu or location is None:
            return None
        domain = self.prop("domain") or 0
        bus, devfn = location >> 8, location & 0xFF
        return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"

    @property
    def vram(self) -> int:
        """Bytes of the GPU's own memory, summed over its VRAM banks."""
        return sum(b.size or 0 for b in self.mem_banks if b.vram)

    @property
    def has_vram_bank(self) -> bool:
        """Whether any bank is the GPU's own memory."""
        return any(b.vram for b in self.mem_banks)

    @property
    def integrated(self) -> bool:
        """An APU's GPU: SIMDs and no memory of its own (it computes out of host RAM)."""
        return self.is_gpu and not self.has_vram_bank

    def links_of(self, link_type: int) -> Tuple[KfdIoLink, ...]:
        """The node's io_links of one type."""
        return tuple(link for link in self.io_links if link.type == link_type)


class KfdTopology(NamedTuple):
    """The whole ``/sys/class/kfd/kfd/topology``; no nodes when the tree lacks it."""

    nodes: Tuple[KfdNode, ...]
    generation_id: Optional[int]
    """``generation_id``: the kernel bumps it each time the topology changes."""
    read: bool = True
    """False when nothing was read because the host has no AMD GPU."""

    @property
    def present(self) -> bool:
        """Whether the tree holds a topology at all."""
        return bool(self.nodes)

    def gpu_at(self, address: str) -> Optional[KfdNode]:
        """The GPU node at a PCI address."""
        return next((n for n in self.nodes if n.address == address), None)

    def node(self, node_id: Optional[int]) -> Optional[KfdNode]:
        """A node by its KFD number."""
        return next((n for n in self.nodes if n.id == node_id), None)

    def cpu_link(self, gpu: KfdNode) -> Optional[Tuple[KfdIoLink, KfdNode]]:
        """The GPU's PCIe link to a CPU node, and that node."""
        for link in gpu.links_of(LINK_PCIE):
            peer = self.node(link.node_to)
            if peer is not None and not peer.is_gpu:
                return link, peer
        return None

    def xgmi_peers(self, gpu: KfdNode) -> Tuple[KfdNode, ...]:
        """The GPUs this one reaches over xGMI."""
        peers = (self.node(link.node_to) for link in gpu.links_of(LINK_XGMI))
        return tuple(p for p in peers if p is not None)


NO_TOPOLOGY = KfdTopology((), None, read=False)
"""What a host without an AMD GPU has: nothing read."""


def parse_kfd_properties(text: str) -> Dict[str, int]:
    """``name value`` lines into a dict; a line that is not a name and an unsigned number
    of at most 20 digits (the kernel prints u64s; a truncated capture, a value in another
    form) is left out rather than guessed."""
    props: Dict[str, int] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and len(words[1]) <= 20 and words[1].isdigit() and words[1].isascii():
            props.setdefault(words[0], int(words[1]))
    return props


def parse_mem_bank(text: str) -> KfdMemBank:
    """One bank's ``properties``."""
    props = parse_kfd_properties(text)
    return KfdMemBank(props.get("heap_type"), props.get("size_in_bytes"))


def parse_io_link(text: str) -> KfdIoLink:
    """One link's ``properties``."""
    props = parse_kfd_properties(text)
    return KfdIoLink(props.get("type"), props.get("node_from"), props.get("node_to"), props.get("weight"))


def _numbered(names: List[str]) -> List[int]:
    """The numeric folder names, in order (sysfs lists ``10`` before ``2``)."""
    return sorted(int(n) for n in names if n.isdigit() and n.isascii() and len(n) <= 9)


def read_kfd(root: Root) -> KfdTopology:
    """The topology under ``root``: every node with its banks and links; none when the tree
    has no ``/sys/class/kfd`` (amdgpu not loaded, or a capture without it)."""
    base = f"{KFD_TOPOLOGY}/nodes"
    nodes = []
    for number in _numbered(root.listdir(base)):
        folder = f"{base}/{number}"
        text = root.read(f"{folder}/properties")
        if text is None:
            continue  # a node the kernel took away while it was listed: no node at all
        banks = tuple(parse_mem_bank(root.read(f"{folder}/mem_banks/{b}/properties") or "")
                      for b in _numbered(root.listdir(f"{folder}/mem_banks")))
        links = tuple(parse_io_link(root.read(f"{folder}/io_links/{i}/properties") or "")
                      for i in _numbered(root.listdir(f"{folder}/io_links")))
        nodes.append(KfdNode(number, parse_kfd_properties(text), banks, links))
    generation = parse_int(root.read(f"{KFD_TOPOLOGY}/generation_id")) if nodes else None
    return KfdTopology(tuple(nodes), generation)
