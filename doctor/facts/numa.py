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
    """``cpulist``, ``cpumap`` (older kernels), ``links`` (only the folder's ``cpuN`` links, as
    an old POWER kernel's capture holds them), ``unclaimed`` (a node without a folder: the
    online CPUs no listed node claims) or ``none``."""
    hidden_from: Tuple[str, ...] = ()
    """For a node the capture has no folder for (:func:`hidden_nodes`), the node lists that
    name it (``online``, ``has_memory``...); empty for a node read from its folder. Such a
    node's memory is unknown and it has no distance row of its own."""

    @property
    def listed(self) -> bool:
        """Whether the node was read from its own folder."""
        return not self.hidden_from

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
    states = _node_states(root)
    columns = distance_columns(ids, states)
    nodes = []
    for node_id, cpus, source, meminfo, row in raw:
        distances = _pair_distances(node_id, columns, row, quirks)
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
    if nodes:
        nodes = sorted(nodes + hidden_nodes(nodes, columns, states, online), key=lambda n: n.id)
    quirks.extend(_symmetry_quirks(nodes))
    quirks.extend(_overlap_quirks(nodes))
    return NumaFacts(tuple(nodes), online, offline, tuple(quirks), offline_source)


NODE_STATES = ("online", "has_cpu", "has_memory", "has_normal_memory")
"""The node lists of ``/sys/devices/system/node`` that name nodes the kernel knows."""


def _node_states(root: Root) -> Dict[str, FrozenSet[int]]:
    """Each of :data:`NODE_STATES` that the capture holds and that names a node; an empty
    ``has_cpu`` (old kernels print one on hosts whose nodes all have CPUs) says nothing."""
    states = {}
    for name in NODE_STATES:
        ids = parse_cpulist(root.read(f"{NODE_DIR}/{name}") or "")
        if ids:
            states[name] = ids
    return states


def distance_columns(ids: List[int], states: Dict[str, FrozenSet[int]]) -> List[int]:
    """The node of each entry of a distance row: the kernel prints one per online node
    (``node/online``); without that file, every node a folder or a ``has_*`` list names."""
    if "online" in states:
        return sorted(states["online"] | set(ids))
    return sorted(set(ids).union(*states.values()))


def hidden_nodes(nodes: List[NumaNode], columns: List[int], states: Dict[str, FrozenSet[int]],
                 online: FrozenSet[int]) -> List[NumaNode]:
    """The nodes the kernel lists (``node/online``, ``has_cpu``, ``has_memory``) that have no
    folder in the capture. Their memory is unknown (a node's MemTotal and /proc/meminfo's
    are counted differently before Linux 3.x, so their difference is no node's size); the
    online CPUs no listed node claims are theirs when one of them alone can hold CPUs."""
    listed = {n.id for n in nodes}
    hidden = [node_id for node_id in columns if node_id not in listed]
    unclaimed = online - frozenset().union(*(n.all_cpus for n in nodes))
    with_cpus = [n for n in hidden if "has_cpu" not in states or n in states["has_cpu"]]
    found = []
    for node_id in hidden:
        cpus = unclaimed if with_cpus == [node_id] else frozenset()
        no_memory = "has_memory" in states and node_id not in states["has_memory"]
        found.append(NumaNode(
            id=node_id, cpus=cpus, all_cpus=cpus, memory_total=0 if no_memory else None,
            memory_free=0 if no_memory else None, distances=(),
            cpus_source="unclaimed" if cpus else "none",
            hidden_from=tuple(name for name in NODE_STATES if node_id in states.get(name, ())),
        ))
    return found


_RawNode = Tuple[int, FrozenSet[int], str, Dict[str, int], Optional[Tuple[str, ...]]]
"""(id, CPUs, their source, meminfo, the distance row's words or None when the file is absent)."""
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
        cpus, source = (parse_cpumap(cpumap), "cpumap") if cpumap is not None else _cpu_links(root, base)
    meminfo = parse_meminfo(root.read(f"{base}/meminfo") or "")
    distance = root.read(f"{base}/distance")
    words = None if distance is None else tuple(distance.replace("\0", "").split())
    return node_id, cpus, source, meminfo, words


def _cpu_links(root: Root, base: str) -> Tuple[FrozenSet[int], str]:
    """A node folder without cpulist and cpumap still links each of its CPUs (``cpuN ->
    ../../cpu/cpuN``), as old POWER kernels' captures hold it."""
    names = root.listdir(base)
    cpus = frozenset(int(name[3:]) for name in names if name.startswith("cpu") and name[3:].isdigit())
    return (cpus, "links") if cpus else (cpus, "none")


DISTANCE_ABSENT = "the capture holds no distance file"
"""The quirk's words for a node folder without ``distance``: a gap, not a firmware fault."""


def _is_distance(word: str) -> bool:
    """Whether a word of a distance row is a distance: a whole number up to 255."""
    return is_uint(word) and int(word) <= UNREACHABLE


def _pair_distances(
    node_id: int, ids: List[int], words: Optional[Tuple[str, ...]], quirks: List[str]
) -> Tuple[Tuple[int, int], ...]:
    """(other node, distance) for each entry of the row that is a distance, ``ids`` being
    the node of each entry (:func:`distance_columns`); each oddity of the row (missing, the
    wrong length, words that are no distance, 0, 255) is a quirk. On a host of one node no
    distance is ever used, and kernels without a SLIT print 0 there: not a quirk."""
    single = len(ids) <= 1
    if not words:
        # An absent file is the capture's gap (procfs' fixtures keep only vmstat), not the
        # firmware's; an empty one is what the kernel printed.
        if not single:
            quirks.append(f"node{node_id}: {DISTANCE_ABSENT}" if words is None
                          else f"node{node_id}: distance row is empty")
        return ()
    if len(words) != len(ids):
        quirks.append(_length_quirk(node_id, len(words), ids))
    entries = list(zip(ids, words))
    bad = [(other, word) for other, word in entries if not _is_distance(word)]
    if bad:
        quirks.append(_bad_entries(node_id, bad))
    pairs = tuple((other, int(word)) for other, word in entries if _is_distance(word))
    if not single and any(value == 0 for _, value in pairs):
        quirks.append(f"node{node_id}: distance row contains 0 (firmware gave no SLIT)")
    quirks.extend(
        f"node{node_id}: the distance to node{other} is {UNREACHABLE}: the firmware marks "
        f"node{other}'s memory unreachable from node{node_id}"
        for other, value in pairs if value == UNREACHABLE
    )
    return pairs


def _length_quirk(node_id: int, entries: int, ids: List[int]) -> str:
    """A row that is not one entry per online node, with the nodes it should have had."""
    return (f"node{node_id}: distance row has {entries} entr{'ies' if entries != 1 else 'y'} for "
            f"{len(ids):,} known node{'s' if len(ids) != 1 else ''} ({', '.join(f'node{i}' for i in ids)})")


def _bad_entries(node_id: int, bad: List[Tuple[int, str]]) -> str:
    """One line for the entries of a row that are no distance (a row of a million words
    is one line too), the first of them quoted, cut short."""
    other, word = bad[0]
    quoted = repr(word if len(word) <= 20 else word[:20] + "...")
    if len(bad) == 1:
        return (f"node{node_id}: the distance to node{other} reads {quoted}, not a distance "
                f"(a number from 0 to {UNREACHABLE}); left out")
    return (f"node{node_id}: {len(bad):,} distance entries are not distances (numbers from 0 to "
            f"{UNREACHABLE}), the first {quoted} (to node{other}); left out")


def _overlap_quirks(nodes: List[NumaNode]) -> List[str]:
    """A CPU belongs to exactly one node; firmware that lists it twice is broken. Nodes
    whose whole lists are the same say so; nodes that only share some CPUs name those."""
    if sum(len(node.all_cpus) for node in nodes) == len(frozenset().union(*(n.all_cpus for n in nodes))):
        return []  # no CPU is listed twice (the common case, without a table of every CPU)
    owners = _owners(nodes)
    lists = {n.id: n.all_cpus for n in nodes}
    quirks = []
    for ids in sorted({ids for ids in owners.values() if len(ids) > 1}):
        shared = frozenset(c for c, o in owners.items() if o == ids)
        names = ",".join(map(str, ids))
        if all(lists[i] == shared for i in ids):
            quirks.append(f"nodes {names} all list the same CPUs ({format_cpulist(shared)})")
        else:
            each = "; ".join(f"node{i}: {format_cpulist(lists[i])}" for i in ids)
            quirks.append(f"nodes {names} overlap: each lists CPUs {format_cpulist(shared)} ({each})")
    return quirks


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
