"""Which CPUs exist, which run and which share a core, from /sys/devices/system/cpu:
``online``, ``offline``, ``present``, the ``cpuN`` folders with their own ``online`` files,
and each CPU's ``topology/thread_siblings_list`` (else its ``thread_siblings`` mask).

The kernel's ``cpu/offline`` is every *possible* CPU that is not online, so a box whose
firmware leaves room for 128 CPUs and has 16 lists 112 there; an offline CPU is one that
is present and not online. Captures of old or trimmed trees lack some of these files, and
each is filled in from the others as lstopo does: a CPU without a folder does not exist,
whatever a node's cpumap says.
"""

from typing import Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Set, Tuple

from strata_doctor.facts.parse import parse_cpulist, parse_cpumap
from strata_doctor.root import Root

CPU_DIR = "/sys/devices/system/cpu"


class CpuStateFiles(NamedTuple):
    """The files that say which CPUs exist and run, as read; None where a file is missing."""

    online: Optional[str]
    """``cpu/online``."""
    offline: Optional[str]
    """``cpu/offline``: possible CPUs that are not online."""
    present: Optional[str]
    """``cpu/present``."""
    folders: FrozenSet[int]
    """The CPU of each ``cpuN`` folder."""
    down: FrozenSet[int]
    """The CPUs whose ``cpuN/online`` reads 0, among those asked (:func:`asked_per_cpu`)."""


class CpuStates(NamedTuple):
    """Online and offline CPUs, and where the offline ones came from."""

    online: FrozenSet[int]
    """Online CPUs: ``cpu/online``, else the ``cpuN`` folders (else the nodes' CPUs) less
    those whose ``cpuN/online`` reads 0."""
    offline: FrozenSet[int]
    """Present CPUs that are not online; without ``cpu/present`` and folders, ``cpu/offline``
    as the kernel wrote it."""
    offline_source: str
    """The file that shows ``offline``: ``cpu/offline``, ``cpu*/online``, ``cpu/present``
    (present less online) or ``cpu*`` (the folders less online)."""
    present: Optional[FrozenSet[int]]
    """``cpu/present``, else the ``cpuN`` folders; None when the tree shows neither."""


def asked_per_cpu(online: Optional[str], folders: FrozenSet[int]) -> FrozenSet[int]:
    """The CPUs whose own ``cpuN/online`` to read: every folder without (or with an empty)
    ``cpu/online``, else only the folders it leaves out (none on a whole tree, so nothing
    more is read)."""
    return folders - parse_cpulist(online or "")


def cpu_states(files: CpuStateFiles, node_cpus: FrozenSet[int]) -> CpuStates:
    """The online and offline CPUs of ``files`` (``node_cpus``: every CPU the nodes list)."""
    present = parse_cpulist(files.present or "") or files.folders or None
    listed = parse_cpulist(files.offline or "")
    online = parse_cpulist(files.online or "")
    if not online:
        # Old or trimmed sysfs: what exists is what has a folder (lstopo counts those).
        online = (files.folders or node_cpus) - listed - files.down
    offline = present - online if present is not None else listed | files.down
    return CpuStates(online, offline, _offline_source(files, offline, listed), present)


def _offline_source(files: CpuStateFiles, offline: FrozenSet[int], listed: FrozenSet[int]) -> str:
    """The one file that names every CPU of ``offline``."""
    if not offline or offline <= listed:
        return f"{CPU_DIR}/offline"
    if offline <= files.down:
        return f"{CPU_DIR}/cpu*/online"
    if parse_cpulist(files.present or ""):
        return f"{CPU_DIR}/present"
    return f"{CPU_DIR}/cpu*"


def read_cpu_state_files(root: Root) -> CpuStateFiles:
    """Read ``cpu/{online,offline,present}``, list the ``cpuN`` folders and read the
    ``cpuN/online`` of those :func:`asked_per_cpu` names."""
    online = root.read(f"{CPU_DIR}/online")
    folders = frozenset(
        int(name[3:]) for name in root.listdir(CPU_DIR) if name.startswith("cpu") and name[3:].isdigit()
    )
    asked = asked_per_cpu(online, folders)
    down = frozenset(cpu for cpu in asked if root.read_value(f"{CPU_DIR}/cpu{cpu}/online") == "0")
    return CpuStateFiles(online, root.read(f"{CPU_DIR}/offline"), root.read(f"{CPU_DIR}/present"),
                         folders, down)


# -- physical cores: the thread_siblings groups -------------------------------------------
CorePair = Tuple[int, int]
"""(package id, core id)."""


def parse_siblings(listed: Optional[str], mask: Optional[str]) -> FrozenSet[int]:
    """A CPU's SMT siblings, itself among them, from ``thread_siblings_list``, else from the
    ``thread_siblings`` mask (kernels before 2.6.26 wrote only the mask)."""
    if listed is not None and listed.strip():
        return parse_cpulist(listed)
    return parse_cpumap(mask or "")


def count_cores(cpus: FrozenSet[int], group_of: Mapping[int, int],
                core_of: Mapping[int, CorePair]) -> Optional[int]:
    """Physical cores among ``cpus``: their distinct thread_siblings groups when each has
    one, else their distinct (package, core id) pairs when each has one; None otherwise."""
    if not cpus:
        return None
    if group_of.keys() >= cpus:
        return len({group_of[cpu] for cpu in cpus})
    if core_of.keys() >= cpus:
        return len({core_of[cpu] for cpu in cpus})
    return None


def sample_cpus(core_of: Mapping[int, CorePair]) -> List[int]:
    """The first and the last CPU of each package: whose sibling lists test the pairs."""
    by_package: Dict[int, List[int]] = {}
    for cpu in sorted(core_of):
        by_package.setdefault(core_of[cpu][0], []).append(cpu)
    return sorted({cpu for cpus in by_package.values() for cpu in (cpus[0], cpus[-1])})


def pairs_agree(read: Mapping[int, FrozenSet[int]], core_of: Mapping[int, CorePair]) -> bool:
    """Whether each sibling list as read names exactly the CPUs that share its CPU's
    (package, core id): where they do, the pairs count the cores as the lists would."""
    members: Dict[CorePair, Set[int]] = {}
    for cpu, pair in core_of.items():
        members.setdefault(pair, set()).add(cpu)
    return all(cpu in core_of and siblings == members[core_of[cpu]] for cpu, siblings in read.items())


def thread_groups(read: Mapping[int, FrozenSet[int]]) -> Dict[int, int]:
    """CPU -> the lowest CPU of its group, from the sibling lists as read; a list that
    leaves out its own CPU (missing or garbled) gives no group."""
    group_of: Dict[int, int] = {}
    for cpu in sorted(read):
        siblings = read[cpu]
        if cpu in siblings:
            first = min(siblings)
            for sibling in siblings:
                group_of.setdefault(sibling, first)
    return group_of


def _read_siblings(root: Root, cpus: Iterable[int], read: Dict[int, FrozenSet[int]]) -> bool:
    """Add the sibling list of each of ``cpus`` not yet named by one read (one file per
    core, since a core's list names its siblings); whether a mask stood in for a list."""
    named: Set[int] = set().union(*(s for c, s in read.items() if c in s))
    masks = False
    for cpu in cpus:
        if cpu in named or cpu in read:
            continue
        base = f"{CPU_DIR}/cpu{cpu}/topology"
        listed = root.read(f"{base}/thread_siblings_list")
        mask = root.read(f"{base}/thread_siblings") if listed is None else None
        read[cpu] = parse_siblings(listed, mask)
        masks = masks or (listed is None and mask is not None)
        if cpu in read[cpu]:
            named |= read[cpu]
    return masks


def read_thread_groups(root: Root, folders: List[int],
                       core_of: Mapping[int, CorePair]) -> Tuple[Dict[int, int], str]:
    """(CPU -> lowest CPU of its group, the file read). Where the (package, core id) pairs
    agree with the lists of each package's first and last CPU, only those are read (a host
    of 2,048 CPUs would otherwise read 1,024 files on every run); every CPU's otherwise."""
    read: Dict[int, FrozenSet[int]] = {}
    masks = _read_siblings(root, sample_cpus(core_of), read) if core_of else False
    if not core_of or not pairs_agree(read, core_of):
        masks = _read_siblings(root, folders, read) or masks
    return thread_groups(read), "thread_siblings" if masks else "thread_siblings_list"
