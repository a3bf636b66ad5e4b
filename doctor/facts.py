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
from strata_doctor.root import Command, Root

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
    """From ``/sys/devices/system/cpu/offline`` (without ``cpu/online``, also each ``cpuN/online``
    that reads 0)."""
    quirks: Tuple[str, ...]
    """Firmware or kernel oddities seen while reading, one line each."""
    offline_source: str = "/sys/devices/system/cpu/offline"
    """Where ``offline_cpus`` came from: ``cpu/offline``, or ``cpu*/online`` when a capture
    without ``cpu/online`` says it per CPU."""

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
    offline_source = f"{CPU_DIR}/offline"
    if root.read(f"{CPU_DIR}/online") is None:
        # Old or trimmed sysfs without cpu/online: each cpuN/online still says 0 for an
        # offline CPU (lstopo drops those); a CPU without the file (cpu0) is online.
        per_cpu = _per_cpu_online(root)
        if per_cpu is not None:
            present, down = per_cpu
            if not down <= offline:
                offline_source = f"{CPU_DIR}/cpu*/online"
            offline = offline | down
            online = (online or present) - offline
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
    return NumaFacts(tuple(nodes), online, offline, tuple(quirks), offline_source)


def _per_cpu_online(root: Root) -> Optional[Tuple[FrozenSet[int], FrozenSet[int]]]:
    """(every cpuN folder, those whose ``cpuN/online`` reads 0); None when no CPU is offline
    that way, so that the common tree is read as before."""
    cpus = [int(name[3:]) for name in root.listdir(CPU_DIR) if name.startswith("cpu") and name[3:].isdigit()]
    down = frozenset(cpu for cpu in cpus if root.read_value(f"{CPU_DIR}/cpu{cpu}/online") == "0")
    return (frozenset(cpus), down) if down else None


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
    vendor_family_model: Optional[Tuple[str, int, int]] = None
    """(``vendor_id``, ``cpu family``, ``model``) of the first processor, when cpuinfo says."""

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
        vendor_family_model=_vendor_family_model(first),
    )


def _vendor_family_model(block: Optional[Dict[str, str]]) -> Optional[Tuple[str, int, int]]:
    if not block:
        return None
    family, model = parse_int(block.get("cpu family")), parse_int(block.get("model"))
    vendor = block.get("vendor_id")
    if vendor is None or family is None or model is None:
        return None
    return vendor, family, model


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
        """The link now, as people read it: ``2.5 GT/s x16`` (``?`` for what is unknown)."""
        return f"{speed_text(self.current_speed)} x{self.current_width or '?'}"

    @property
    def best(self) -> str:
        """The link at its maximum: ``8.0 GT/s x16``."""
        return f"{speed_text(self.max_speed)} x{self.max_width or '?'}"

    @property
    def text(self) -> Optional[str]:
        """The one way a link is written: ``8.0 GT/s x16``, with ``(max 8.0 GT/s x16)`` when it
        trained below its maximum (callers write ``PCIe {text}``); None when the kernel
        reported no link."""
        if not self.known:
            return None
        return self.now if self.now == self.best else f"{self.now} (max {self.best})"


PCIE_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
"""Transfer rate in GT/s -> PCIe generation."""


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
    def path_minimum(self) -> Optional[Tuple[PathLink, str]]:
        """The slowest link on the way to the root port and what limits it (``width`` or
        ``speed``), when an upstream link is narrower or slower than the GPU's own now."""
        return self.path_limit(self.link.current_width, self.link.current_gts)

    def path_limit(
        self, own_width: Optional[int], own_gts: Optional[float]
    ) -> Optional[Tuple[PathLink, str]]:
        """Like :attr:`path_minimum`, against a width and speed of the GPU's own link read
        elsewhere (nvidia-smi's)."""
        narrow = [h for h in self.path
                  if h.link.current_width and own_width and h.link.current_width < own_width]
        if narrow:
            return min(narrow, key=lambda h: h.link.current_width or 0), "width"
        slow = [h for h in self.path
                if h.link.current_gts and own_gts and (h.link.current_gts or 0) < own_gts]
        if slow:
            return min(slow, key=lambda h: h.link.current_gts or 0.0), "speed"
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


def read_gpus(root: Root) -> Tuple[Gpu, ...]:
    """Read every display-class PCI function through ``root``."""
    gpus = []
    for address in root.listdir(PCI_DIR):
        base = f"{PCI_DIR}/{address}"
        pci_class = parse_int(root.read(f"{base}/class"))
        source = "class"
        if pci_class is None and root.reads.get(f"{base}/class") == "missing":
            pci_class, source = modalias_class(root.read_value(f"{base}/modalias")), "modalias"
        if pci_class is None or pci_class >> 16 != 0x03:
            continue
        gpus.append(_read_gpu(root, address, pci_class)._replace(class_source=source))
    return tuple(gpus)


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


# -- nvidia-smi's view of the GPUs (captured as commands, docs/capture-layout.md) -------------
NVIDIA_SMI_QUERY = Command(
    "nvidia-smi-query",
    ("nvidia-smi",
     "--query-gpu=pci.bus_id,name,memory.total,driver_version,uuid,serial,"
     "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
     "--format=csv,noheader"),
    timeout=10.0,
)
"""The GPU query (docs/report.md lists its fields): parsed by :func:`parse_smi_query` only,
read once per host as ``HostContext.smi_query``; the last four columns are the PCIe link
as the driver sees it."""
NVIDIA_SMI_Q = Command("nvidia-smi-q", ("nvidia-smi", "-q"), timeout=10.0)
"""``nvidia-smi -q``: every GPU's settings, persistence mode among them."""


class SmiGpuState(NamedTuple):
    """What nvidia-smi says of one GPU: its row of :data:`NVIDIA_SMI_QUERY` (model, memory,
    driver, the PCIe link's generation and width now and at most) and its persistence mode."""

    gen_current: Optional[int] = None
    """``pcie.link.gen.current``."""
    gen_max: Optional[int] = None
    """``pcie.link.gen.max``."""
    width_current: Optional[int] = None
    """``pcie.link.width.current``."""
    width_max: Optional[int] = None
    """``pcie.link.width.max``."""
    persistence: Optional[bool] = None
    """``Persistence Mode`` from ``nvidia-smi -q``; None when not captured."""
    name: Optional[str] = None
    """``name``: the marketing name (``NVIDIA GeForce GTX 1080 Ti``)."""
    memory: Optional[str] = None
    """``memory.total`` as printed (``11264 MiB``)."""
    driver: Optional[str] = None
    """``driver_version``."""
    uuid: Optional[str] = None
    """``uuid`` as printed (``GPU-...``): the report only redacts it."""
    serial: Optional[str] = None
    """``serial`` (``[N/A]`` on GeForce boards): the report only redacts it."""

    @property
    def link_known(self) -> bool:
        """Whether the query gave the link's generation and width."""
        return None not in (self.gen_current, self.gen_max, self.width_current, self.width_max)


def smi_address(text: str) -> Optional[str]:
    """``00000000:84:00.0`` (nvidia-smi's 8-digit domain) -> ``0000:84:00.0``."""
    match = re.match(r"^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", text.strip())
    if not match:
        return None
    return f"{int(match.group(1), 16):04x}:{match.group(2).lower()}"


def parse_smi_query(text: str) -> Dict[str, SmiGpuState]:
    """:data:`NVIDIA_SMI_QUERY`'s rows by PCI address: the one parser of that output.

    A row with fewer columns (a capture of an older, shorter query) gives what it has; the
    link needs all ten. Lines that name no PCI address (a header, garbage) are skipped.
    """
    rows: Dict[str, SmiGpuState] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        address = smi_address(fields[0]) if len(fields) >= 2 else None
        if address is None:
            continue
        name, memory, driver, uuid, serial = (fields[1:6] + [""] * 5)[:5]
        gen_now, gen_max, width_now, width_max = (
            (parse_int(f) for f in fields[-4:]) if len(fields) >= 10 else (None, None, None, None))
        rows[address] = SmiGpuState(
            gen_now, gen_max, width_now, width_max, name=name or None, memory=memory or None,
            driver=driver or None, uuid=uuid or None, serial=serial or None,
        )
    return rows


def parse_smi_persistence(text: str) -> Dict[str, bool]:
    """``Persistence Mode`` of each GPU section (``GPU 00000000:41:00.0``) of ``nvidia-smi -q``."""
    found: Dict[str, bool] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            current = smi_address(line[4:])
            continue
        key, _, value = line.partition(":")
        if current and key.strip() == "Persistence Mode" and value.strip() in ("Enabled", "Disabled"):
            found[current] = value.strip() == "Enabled"
    return found


def read_smi_query(root: Root) -> Dict[str, SmiGpuState]:
    """:data:`NVIDIA_SMI_QUERY`'s row of each GPU, by PCI address (run live, replayed under
    a captured root); empty without nvidia-smi."""
    query = root.run(NVIDIA_SMI_QUERY)
    return parse_smi_query(query.stdout) if query.ok else {}


def read_smi_states(root: Root, query: Dict[str, SmiGpuState]) -> Dict[str, SmiGpuState]:
    """Each GPU's query row (:func:`read_smi_query`'s, read once by the caller) with its
    persistence mode from ``nvidia-smi -q``, by PCI address; empty without nvidia-smi."""
    detail = root.run(NVIDIA_SMI_Q)
    states = dict(query)
    for address, enabled in (parse_smi_persistence(detail.stdout) if detail.ok else {}).items():
        states[address] = states.get(address, SmiGpuState())._replace(persistence=enabled)
    return states


# -- the instruction sets the kernel gives, not only those the CPU has ------------------------
XCOMP_AVX512 = 0xE0
"""XSAVE state components 5-7 (opmask, ZMM_Hi256, Hi16_ZMM): AVX-512's registers."""
XCOMP_AMX = 0x60000
"""XSAVE state components 17-18 (XTILECFG, XTILEDATA): AMX's tiles."""

# (vendor_id, cpu family, model) -> (code name, ISA the silicon has); a kernel or hypervisor
# that hides them leaves no trace in /proc/cpuinfo's flags, so the model has to tell.
_INTEL_MODELS: Dict[int, Tuple[str, Tuple[str, ...]]] = {
    85: ("Skylake-SP/Cascade Lake", ("avx512f",)),
    106: ("Ice Lake-SP", ("avx512f",)),
    108: ("Ice Lake-D", ("avx512f",)),
    143: ("Sapphire Rapids", ("avx512f", "amx_tile")),
    207: ("Emerald Rapids", ("avx512f", "amx_tile")),
    173: ("Granite Rapids", ("avx512f", "amx_tile")),
    174: ("Granite Rapids-D", ("avx512f", "amx_tile")),
}


def model_isa(vendor_family_model: Optional[Tuple[str, int, int]]) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """(code name, ISA the silicon has) of a server CPU known to have AVX-512 or AMX; None
    for any other (or unknown) model."""
    if vendor_family_model is None:
        return None
    vendor, family, model = vendor_family_model
    if vendor == "GenuineIntel" and family == 6:
        return _INTEL_MODELS.get(model)
    if vendor == "AuthenticAMD" and family == 25 and (0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F
                                                       or 0xA0 <= model <= 0xAF):
        return "Zen 4", ("avx512f",)
    if vendor == "AuthenticAMD" and family == 26:
        return "Zen 5", ("avx512f",)
    return None


class KernelIsa(NamedTuple):
    """What the running kernel lets a process use of the CPU's vector state: its release,
    the ``arch_prctl`` answers (live, or replayed from a capture) and the boot options that
    hide features."""

    release: Optional[str]
    """``/proc/sys/kernel/osrelease``."""
    version: Optional[Tuple[int, int]]
    """(major, minor) of the release; None when unreadable."""
    xcomp_supported: Optional[int]
    """``ARCH_GET_XCOMP_SUPP``'s mask of XSAVE components; None when not asked or refused."""
    amx_request: Optional[str]
    """``ok`` when ``ARCH_REQ_XCOMP_PERM(XTILEDATA)`` succeeded, else the errno name
    (``EINVAL`` on kernels before 5.16); None when it was not tried (captured host)."""
    hidden_by_cmdline: Tuple[str, ...]
    """``clearcpuid=``, ``noxsave``... words of ``/proc/cmdline`` that hide vector state."""

    def before(self, major: int, minor: int) -> bool:
        """Whether the kernel is known to be older than ``major.minor``."""
        return self.version is not None and self.version < (major, minor)

    @property
    def amx_backported(self) -> bool:
        """A RHEL 9.2+ kernel (``5.14.0-284`` and later ``el9``): 5.14 with AMX backported."""
        match = re.match(r"5\.14\.0-(\d+)\..*el9", self.release or "")
        return match is not None and (parse_int(match.group(1)) or 0) >= 284


def parse_xcomp(text: str) -> Tuple[Optional[int], Optional[str]]:
    """(supported mask, AMX request answer) from :meth:`Root.xcomp_permission`'s text."""
    mask: Optional[int] = None
    request: Optional[str] = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key.strip() == "ARCH_GET_XCOMP_SUPP" and value.lower().startswith("0x"):
            mask = parse_int(value)
        elif key.strip() == "ARCH_REQ_XCOMP_PERM XTILEDATA" and re.fullmatch(r"ok|E[A-Z]+|\d+", value):
            request = value
    return mask, request


_HIDING = re.compile(r"^(clearcpuid=\S+|noxsave|noxsaves|noxsaveopt|noavx512|noavx2|noavx)$")


def read_kernel_isa(root: Root) -> KernelIsa:
    """The running kernel's side of the ISA: release, arch_prctl's answers, boot options."""
    release = root.read_value("/proc/sys/kernel/osrelease")
    match = re.match(r"(\d+)\.(\d+)", release or "")
    numbers = (parse_int(match.group(1)), parse_int(match.group(2))) if match else (None, None)
    version = (numbers[0], numbers[1]) if numbers[0] is not None and numbers[1] is not None else None
    answer = root.xcomp_permission()
    mask, request = parse_xcomp(answer.stdout) if answer.ok else (None, None)
    cmdline = (root.read("/proc/cmdline") or "").split()
    return KernelIsa(release, version, mask, request, tuple(w for w in cmdline if _HIDING.match(w)))
