"""Which CPUs exist and which run, from /sys/devices/system/cpu: ``online``, ``offline``,
``present`` and the ``cpuN`` folders with their own ``online`` files.

The kernel's ``cpu/offline`` is every *possible* CPU that is not online, so a box whose
firmware leaves room for 128 CPUs and has 16 lists 112 there; an offline CPU is one that
is present and not online. Captures of old or trimmed trees lack some of these files, and
each is filled in from the others as lstopo does: a CPU without a folder does not exist,
whatever a node's cpumap says.
"""

from typing import FrozenSet, NamedTuple, Optional

from strata_doctor.facts.parse import parse_cpulist
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
