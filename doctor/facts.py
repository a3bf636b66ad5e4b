"""Typed, immutable facts about a host's NUMA nodes, CPUs and GPUs.

Each reader takes a :class:`~strata_doctor.root.Root`; each parser it uses lives in
:mod:`strata_doctor.parse` and is tested on strings.
"""

import re
from operator import itemgetter
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple

from strata_doctor.parse import (
    MAX_CPU,
    cpumap_beyond_limit,
    format_cpulist,
    is_plain,
    parse_cpuinfo,
    parse_cpulist,
    parse_cpumap,
    parse_distance,
    parse_int,
    parse_meminfo,
)
from strata_doctor.root import Root

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"
PCI_DIR = "/sys/bus/pci/devices"
EXPERT_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


class NumaNode(NamedTuple):
    """One NUMA node, from ``/sys/devices/system/node/nodeN/{cpulist,cpumap,meminfo,distance}``."""

    id: int
    """The node id (ids can be sparse: 0, 8, 250...)."""
    cpus: FrozenSet[int]
    """Online CPUs of the node."""
    all_cpus: FrozenSet[int]
    """Every CPU the node lists, online or not."""
    memory_total: Optional[int]
    """MemTotal in bytes; None when the node has no meminfo."""
    memory_free: Optional[int]
    """MemFree in bytes; None when the node has no meminfo."""
    distances: Tuple[Tuple[int, int], ...]
    """(other node id, distance) pairs from the node's ``distance`` row."""
    cpus_source: str
    """``cpulist``, ``cpumap`` (older kernels) or ``none``."""

    @property
    def has_memory(self) -> bool:
        """Whether the node has any memory."""
        return bool(self.memory_total)

    @property
    def memoryless(self) -> bool:
        """A node whose meminfo says it has no memory (unknown is not zero)."""
        return self.memory_total == 0

    @property
    def memory_only(self) -> bool:
        """A node with memory but no CPUs: CXL, HBM, NVM or GPU memory."""
        return not self.all_cpus and self.has_memory

    def distance_to(self, other: int) -> Optional[int]:
        """The distance from this node to ``other``; None when not reported."""
        for node, value in self.distances:
            if node == other:
                return value
        return None


class NumaFacts(NamedTuple):
    """The host's NUMA layout, from ``/sys/devices/system/node`` and ``/sys/devices/system/cpu``."""

    nodes: Tuple[NumaNode, ...]
    """Nodes in id order; empty when the kernel exposes no NUMA directories."""
    online_cpus: FrozenSet[int]
    """From ``/sys/devices/system/cpu/online`` (else the nodes' CPUs)."""
    offline_cpus: FrozenSet[int]
    """From ``/sys/devices/system/cpu/offline``."""
    quirks: Tuple[str, ...]
    """Firmware or kernel oddities seen while reading, one line each."""

    def node(self, node_id: int) -> Optional[NumaNode]:
        """The node with this id, if present."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        return None

    @property
    def cpu_nodes(self) -> Tuple[NumaNode, ...]:
        """Nodes that have online CPUs."""
        return tuple(n for n in self.nodes if n.cpus)

    def node_of_cpus(self, cpus: FrozenSet[int]) -> Optional[int]:
        """The single node whose CPUs contain every CPU in ``cpus``; None otherwise."""
        if not cpus:
            return None
        owners = [n.id for n in self.nodes if cpus <= n.all_cpus]
        return owners[0] if len(owners) == 1 else None


def read_numa(root: Root) -> NumaFacts:
    """Read the NUMA layout through ``root``."""
    ids = sorted(
        int(name[4:])
        for name in root.listdir(NODE_DIR)
        if name.startswith("node") and name[4:].isdigit()
    )
    online = parse_cpulist(root.read(f"{CPU_DIR}/online") or "")
    offline = parse_cpulist(root.read(f"{CPU_DIR}/offline") or "")
    quirks: List[str] = []
    raw = [_read_node(root, node_id) for node_id in ids]
    quirks.extend(
        f"node{node_id}: cpumap sets CPU ids at or above {MAX_CPU}, the kernel's limit; ignored"
        for node_id, _, source, _, _ in raw
        if source == "cpumap" and cpumap_beyond_limit(root.read(f"{NODE_DIR}/node{node_id}/cpumap") or "")
    )
    if not online:
        online = frozenset().union(*(cpus for _, cpus, _, _, _ in raw)) - offline
    if not online:
        # Old or trimmed sysfs without cpu/online: the cpuN folders still list the CPUs.
        online = frozenset(
            int(name[3:]) for name in root.listdir(CPU_DIR)
            if name.startswith("cpu") and name[3:].isdigit()
        ) - offline
    nodes = []
    for node_id, cpus, source, meminfo, row in raw:
        distances = _pair_distances(node_id, ids, row, quirks)
        nodes.append(
            NumaNode(
                id=node_id,
                cpus=cpus & online if online else cpus,
                all_cpus=cpus,
                memory_total=meminfo.get("MemTotal"),
                memory_free=meminfo.get("MemFree"),
                distances=distances,
                cpus_source=source,
            )
        )
    quirks.extend(_symmetry_quirks(nodes))
    quirks.extend(_overlap_quirks(nodes))
    return NumaFacts(tuple(nodes), online, offline, tuple(quirks))


def _read_node(
    root: Root, node_id: int
) -> Tuple[int, FrozenSet[int], str, Dict[str, int], Tuple[int, ...]]:
    base = f"{NODE_DIR}/node{node_id}"
    cpulist = root.read(f"{base}/cpulist")
    if cpulist is not None:
        cpus, source = parse_cpulist(cpulist), "cpulist"
    else:
        cpumap = root.read(f"{base}/cpumap")
        cpus, source = (parse_cpumap(cpumap), "cpumap") if cpumap is not None else (frozenset(), "none")
    meminfo = parse_meminfo(root.read(f"{base}/meminfo") or "")
    row = parse_distance(root.read(f"{base}/distance") or "")
    return node_id, cpus, source, meminfo, row


def _pair_distances(
    node_id: int, ids: List[int], row: Tuple[int, ...], quirks: List[str]
) -> Tuple[Tuple[int, int], ...]:
    if not row:
        quirks.append(f"node{node_id}: distance row is missing or empty")
        return ()
    if len(row) != len(ids):
        quirks.append(
            f"node{node_id}: distance row has {len(row)} entries for {len(ids)} nodes"
        )
    pairs = tuple(zip(ids, row))
    if any(value == 0 for _, value in pairs):
        quirks.append(f"node{node_id}: distance row contains 0 (firmware gave no SLIT)")
    return pairs


def _overlap_quirks(nodes: List[NumaNode]) -> List[str]:
    """A CPU belongs to exactly one node; firmware that lists it twice is broken."""
    if sum(len(node.all_cpus) for node in nodes) == len(frozenset().union(*(n.all_cpus for n in nodes))):
        return []  # no CPU is listed twice (the common case, without a table of every CPU)
    owners: Dict[int, List[int]] = {}
    for node in nodes:
        for cpu in node.all_cpus:
            owners.setdefault(cpu, []).append(node.id)
    shared = sorted({tuple(ids) for ids in owners.values() if len(ids) > 1})
    return [
        f"nodes {','.join(map(str, ids))} all list the same CPUs "
        f"({format_cpulist(frozenset(c for c, o in owners.items() if tuple(o) == ids))})"
        for ids in shared
    ]


def _symmetry_quirks(nodes: List[NumaNode]) -> List[str]:
    quirks = []
    rows = {n.id: dict(n.distances) for n in nodes}
    for a in nodes:
        for b in nodes:
            if a.id < b.id:
                ab, ba = rows[a.id].get(b.id), rows[b.id].get(a.id)
                if ab is not None and ba is not None and ab != ba:
                    quirks.append(f"distance node{a.id}->node{b.id} is {ab} but back is {ba}")
    return quirks


class CpuFacts(NamedTuple):
    """CPU model, sockets and ISA, from ``/proc/cpuinfo`` (sockets and cores from its
    ``physical id`` and ``core id``, else ``/sys/devices/system/cpu/cpuN/topology``)."""

    model: Optional[str]
    """``model name`` of the first processor."""
    sockets: int
    """Number of distinct physical packages (0 when unknown)."""
    package_of: Tuple[Tuple[int, int], ...]
    """(cpu, package id) pairs."""
    core_of: Tuple[Tuple[int, Tuple[int, int]], ...]
    """(cpu, (package id, core id)) pairs: CPUs sharing a pair are SMT siblings."""
    flags: FrozenSet[str]
    """CPU feature flags of the first processor."""

    def cores_in(self, cpus: FrozenSet[int]) -> int:
        """Physical cores among ``cpus`` (their count when the topology is unknown)."""
        cores = {core for cpu, core in self.core_of if cpu in cpus}
        return len(cores) if cores else len(cpus)

    def packages_in(self, cpus: FrozenSet[int]) -> FrozenSet[int]:
        """Packages (sockets) that own any of ``cpus``."""
        return frozenset(pkg for cpu, pkg in self.package_of if cpu in cpus)

    @property
    def expert_isa(self) -> Tuple[str, ...]:
        """The expert-kernel ISA extensions this CPU offers, in preference order."""
        return tuple(flag for flag in EXPERT_ISA if flag in self.flags)


def read_cpu(root: Root) -> CpuFacts:
    """Read CPU facts through ``root``."""
    data = (root.read_bytes("/proc/cpuinfo") or b"").replace(b"\0", b"")  # as Root.read does
    # Model and flags come from the first processor's block, the ids from every block: a
    # host of 2,048 processors has a 3 MB cpuinfo, so plain text is decoded and parsed only
    # that far, and its ids are picked from the bytes.
    if is_plain(data):  # tabs are plain here: cpuinfo's own layout
        blocks = parse_cpuinfo(_first_cpuinfo_block(data).decode("ascii"))
        package_of, core_of = plain_cpuinfo_topology(data)
    else:
        blocks = parse_cpuinfo(data.decode("utf-8", "replace"))
        package_of, core_of = blocks_topology(blocks)
    first = blocks[0] if blocks else None
    model = (first.get("model name") or first.get("cpu")) if first else None
    flags_text = (first.get("flags") or first.get("Features") or "") if first else ""
    if not package_of:
        package_of, core_of = _sysfs_topology(root)
    return CpuFacts(
        model=model,
        sockets=len(set(package_of.values())),
        package_of=tuple(sorted(package_of.items())),
        core_of=tuple(sorted(core_of.items())),
        flags=frozenset(flags_text.split()),
    )


# Plain cpuinfo (parse.is_plain, its NULs dropped): ASCII, its only line break \n, its only
# blanks space and tab, so that the patterns below read it as parse_cpuinfo does (a block
# ends at a blank line).
# The lookahead only lets the pattern give up sooner on the 20-odd other lines of a block.
_CPUINFO_IDS = re.compile(rb"\n(?=[pc \t\n])[ \t]*(?:(processor|physical id|core id)[ \t]*:(.*)|(?=\n))")
_BLANK_LINE = re.compile(rb"\n[ \t]*(?=\n)")


def _first_cpuinfo_block(data: bytes) -> bytes:
    """Plain cpuinfo up to the end of its first block: up to the first blank line after the
    first line with a colon."""
    colon = data.find(b":")
    end = _BLANK_LINE.search(data, colon) if colon >= 0 else None
    return data[: end.start()] if end else data


Topology = Tuple[Dict[int, int], Dict[int, Tuple[int, int]]]
"""CPU -> package, and CPU -> (package, core)."""


def blocks_topology(blocks: List[Dict[str, str]]) -> Topology:
    """Packages and cores of the cpuinfo blocks that name a processor and its package."""
    package_of: Dict[int, int] = {}
    core_of: Dict[int, Tuple[int, int]] = {}
    for block in blocks:
        cpu = parse_int(block.get("processor"))
        pkg = parse_int(block.get("physical id"))
        core = parse_int(block.get("core id"))
        if cpu is not None and pkg is not None:
            package_of[cpu] = pkg
            core_of[cpu] = (pkg, core if core is not None else cpu)
    return package_of, core_of


# x86 writes these three keys in this order in every block; its blank line closes the block.
_REGULAR_IDS = [b"processor", b"physical id", b"core id", b""]


def plain_cpuinfo_topology(data: bytes) -> Topology:
    """:func:`blocks_topology` of plain cpuinfo (:func:`~strata_doctor.parse.is_plain`),
    without building a block for each of thousands of processors when every block is laid
    out alike."""
    found = _CPUINFO_IDS.findall(b"\n" + data)
    if found and found[-1][0]:
        found.append((b"", b""))  # the last block ends without a blank line
    if list(map(itemgetter(0), found)) == _REGULAR_IDS * (len(found) // 4):
        values = list(map(itemgetter(1), found))
        # int() reads what parse_int reads in decimal, up to 19 digits (parse_int refuses
        # numbers beyond 64 bits); anything else takes the long way.
        too_long = max(map(len, values), default=0) > 20  # the value keeps its leading blank
        try:
            if too_long:
                raise ValueError
            cpus, packages, cores = (list(map(int, values[column::4])) for column in range(3))
        except ValueError:
            pass
        else:
            return dict(zip(cpus, packages)), dict(zip(cpus, zip(packages, cores)))
    return blocks_topology(_id_blocks(found))


def _id_blocks(found: List[Tuple[bytes, bytes]]) -> List[Dict[str, str]]:
    """``processor``, ``physical id`` and ``core id`` of each block of plain cpuinfo (blocks
    without any of them left out), as parse_cpuinfo would give them."""
    blocks: List[Dict[str, str]] = []
    current: Dict[str, str] = {}
    for key, value in found:
        if key:
            current[key.decode("ascii")] = value.decode("ascii").strip()
        elif current:
            blocks.append(current)
            current = {}
    if current:
        blocks.append(current)
    return blocks


def _sysfs_topology(root: Root) -> Tuple[Dict[int, int], Dict[int, Tuple[int, int]]]:
    package_of: Dict[int, int] = {}
    core_of: Dict[int, Tuple[int, int]] = {}
    for name in root.listdir(CPU_DIR):
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        cpu = int(name[3:])
        pkg = parse_int(root.read(f"{CPU_DIR}/{name}/topology/physical_package_id"))
        core = parse_int(root.read(f"{CPU_DIR}/{name}/topology/core_id"))
        if pkg is not None:
            package_of[cpu] = pkg
            core_of[cpu] = (pkg, core if core is not None else cpu)
    return package_of, core_of


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


class Gpu(NamedTuple):
    """A display or 3D controller (PCI class 0x03xxxx), from ``/sys/bus/pci/devices/ADDR/``."""

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
    """Size in bytes of the largest memory BAR, from ``resource``."""

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


_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x1A03: "ASPEED", 0x102B: "Matrox"}


def read_gpus(root: Root) -> Tuple[Gpu, ...]:
    """Read every display-class PCI function through ``root``."""
    gpus = []
    for address in root.listdir(PCI_DIR):
        base = f"{PCI_DIR}/{address}"
        pci_class = parse_int(root.read(f"{base}/class"))
        if pci_class is None or pci_class >> 16 != 0x03:
            continue
        gpus.append(_read_gpu(root, address, pci_class))
    return tuple(gpus)


def _read_gpu(root: Root, address: str, pci_class: int) -> Gpu:
    base = f"{PCI_DIR}/{address}"
    cpulist = root.read(f"{base}/local_cpulist")
    local = (
        parse_cpulist(cpulist)
        if cpulist is not None
        else parse_cpumap(root.read(f"{base}/local_cpus") or "")
    )
    boot = root.read_value(f"{base}/boot_vga")
    return Gpu(
        address=address,
        vendor=parse_int(root.read(f"{base}/vendor")),
        device=parse_int(root.read(f"{base}/device")),
        pci_class=pci_class,
        driver=root.link_name(f"{base}/driver"),
        numa_node_raw=parse_int(root.read(f"{base}/numa_node")),
        local_cpus=local,
        boot_vga=None if boot is None else boot == "1",
        link=PcieLink(
            current_speed=root.read_value(f"{base}/current_link_speed"),
            max_speed=root.read_value(f"{base}/max_link_speed"),
            current_width=parse_int(root.read(f"{base}/current_link_width")),
            max_width=parse_int(root.read(f"{base}/max_link_width")),
        ),
        largest_bar=_largest_bar(root.read(f"{base}/resource") or ""),
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
