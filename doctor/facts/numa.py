"""NUMA nodes from /sys/devices/system/node: CPUs, memory, distances."""

from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.cpu_states import cpu_states, read_cpu_state_files
from strata_doctor.facts.meminfo import parse_meminfo
from strata_doctor.facts.parse import (
    MAX_CPU,
    cpumap_beyond_limit,
    format_cpulist,
    is_uint,
    parse_cpulist,
    parse_cpumap,
)
from strata_doctor.root import Root

NODE_DIR = "/sys/devices/system/node"


CPU_DIR = "/sys/devices/system/cpu"


UNREACHABLE = 255
"""The distance the ACPI SLIT gives memory a node cannot reach; its entries are one byte, so
255 is also the largest distance there is."""


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
    """(other node id, distance) pairs from the node's ``distance`` row: its entries that are
    numbers from 0 to 255 (:data:`UNREACHABLE`), others left out and named in the quirks."""
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
    """From ``/sys/devices/system/cpu/online`` (else the ``cpuN`` folders, else the nodes'
    CPUs, less each ``cpuN/online`` that reads 0)."""
    offline_cpus: FrozenSet[int]
    """Present CPUs that are not online (``cpu/present``, else the ``cpuN`` folders, less
    :attr:`online_cpus`); ``cpu/offline`` also names possible CPUs that are not present."""
    quirks: Tuple[str, ...]
    """Firmware or kernel oddities seen while reading, one line each."""
    offline_source: str = "/sys/devices/system/cpu/offline"
    """The file that names every CPU of ``offline_cpus``: ``cpu/offline``, ``cpu*/online``
    (each CPU's own file), ``cpu/present`` or ``cpu*`` (the folders) less the online CPUs."""

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
    raw = [_read_node(root, node_id) for node_id in ids]
    quirks = _cpumap_quirks(root, raw)
    online, offline, offline_source = _cpu_states(root, raw)
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


_RawNode = Tuple[int, FrozenSet[int], str, Dict[str, int], Tuple[str, ...]]
"""A node's files as read: id, CPUs, where they came from, meminfo, the distance row's words."""
_CpuStates = Tuple[FrozenSet[int], FrozenSet[int], str]
"""Online CPUs, offline CPUs, and where the offline ones came from."""


def _cpumap_quirks(root: Root, raw: List[_RawNode]) -> List[str]:
    """A node's cpumap (read when it has no cpulist) that sets CPUs beyond the kernel's limit."""
    return [
        f"node{node_id}: cpumap sets CPU ids at or above {MAX_CPU}, the kernel's limit; ignored"
        for node_id, _, source, _, _ in raw
        if source == "cpumap" and cpumap_beyond_limit(root.read(f"{NODE_DIR}/node{node_id}/cpumap") or "")
    ]


def _cpu_states(root: Root, raw: List[_RawNode]) -> _CpuStates:
    """Online and offline CPUs as :mod:`~strata_doctor.facts.cpu_states` reads them (offline:
    present and not online); the nodes' CPUs stand in for a tree without ``cpuN`` folders."""
    states = cpu_states(read_cpu_state_files(root), frozenset().union(*(cpus for _, cpus, _, _, _ in raw)))
    return states.online, states.offline, states.offline_source


def _read_node(root: Root, node_id: int) -> _RawNode:
    base = f"{NODE_DIR}/node{node_id}"
    cpulist = root.read(f"{base}/cpulist")
    if cpulist is not None:
        cpus, source = parse_cpulist(cpulist), "cpulist"
    else:
        cpumap = root.read(f"{base}/cpumap")
        cpus, source = (parse_cpumap(cpumap), "cpumap") if cpumap is not None else (frozenset(), "none")
    meminfo = parse_meminfo(root.read(f"{base}/meminfo") or "")
    words = tuple((root.read(f"{base}/distance") or "").replace("\0", "").split())
    return node_id, cpus, source, meminfo, words


def _is_distance(word: str) -> bool:
    """Whether a word of a distance row is a distance: a whole number up to 255."""
    return is_uint(word) and int(word) <= UNREACHABLE


def _pair_distances(
    node_id: int, ids: List[int], words: Tuple[str, ...], quirks: List[str]
) -> Tuple[Tuple[int, int], ...]:
    """(other node, distance) for each entry of the row that is a distance; each oddity of
    the row (missing, the wrong length, words that are no distance, 0, 255) is a quirk."""
    if not words:
        quirks.append(f"node{node_id}: distance row is missing or empty")
        return ()
    if len(words) != len(ids):
        quirks.append(
            f"node{node_id}: distance row has {len(words)} entries for {len(ids)} nodes"
        )
    entries = list(zip(ids, words))
    bad = [(other, word) for other, word in entries if not _is_distance(word)]
    if bad:
        quirks.append(_bad_entries(node_id, bad))
    pairs = tuple((other, int(word)) for other, word in entries if _is_distance(word))
    if any(value == 0 for _, value in pairs):
        quirks.append(f"node{node_id}: distance row contains 0 (firmware gave no SLIT)")
    quirks.extend(
        f"node{node_id}: the distance to node{other} is {UNREACHABLE}: the firmware marks "
        f"node{other}'s memory unreachable from node{node_id}"
        for other, value in pairs if value == UNREACHABLE
    )
    return pairs


def _bad_entries(node_id: int, bad: List[Tuple[int, str]]) -> str:
    """One line for the entries of a row that are no distance (a row of a million words
    is one line too), the first of them quoted, cut short."""
    other, word = bad[0]
    quoted = repr(word if len(word) <= 20 else word[:20] + "...")
    if len(bad) == 1:
        return (f"node{node_id}: the distance to node{other} reads {quoted}, not a distance "
                f"(a number from 0 to {UNREACHABLE}); left out")
    return (f"node{node_id}: {len(bad)} distance entries are not distances (numbers from 0 to "
            f"{UNREACHABLE}), the first {quoted} (to node{other}); left out")


def _overlap_quirks(nodes: List[NumaNode]) -> List[str]:
    """A CPU belongs to exactly one node; firmware that lists it twice is broken."""
    if sum(len(node.all_cpus) for node in nodes) == len(frozenset().union(*(n.all_cpus for n in nodes))):
        return []  # no CPU is listed twice (the common case, without a table of every CPU)
    owners = _owners(nodes)
    shared = sorted({ids for ids in owners.values() if len(ids) > 1})
    return [
        f"nodes {','.join(map(str, ids))} all list the same CPUs "
        f"({format_cpulist(frozenset(c for c, o in owners.items() if o == ids))})"
        for ids in shared
    ]


def _owners(nodes: List[NumaNode]) -> Dict[int, Tuple[int, ...]]:
    """CPU -> the ids of every node that lists it, in node order."""
    owners: Dict[int, List[int]] = {}
    for node in nodes:
        for cpu in node.all_cpus:
            owners.setdefault(cpu, []).append(node.id)
    return {cpu: tuple(ids) for cpu, ids in owners.items()}


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
