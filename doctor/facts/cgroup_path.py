"""The memory and cpuset files on the engine's cgroup path, from its cgroup up to the
root, under ``/sys/fs/cgroup`` (cgroup v1: the ``memory`` and ``cpuset`` hierarchies at the
same path). Read here; which of them binds is
:func:`strata_doctor.rules.limits.tightest_limits`'s to say."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

from strata_doctor.facts.cgroup import CGROUP_FS, EngineLimits, Limit, NodeSet, parse_cgroup_bytes
from strata_doctor.facts.parse import parse_cpulist
from strata_doctor.root import Root


class CgroupPath(NamedTuple):
    """The limit files from the engine's cgroup up to the root, as read; which of them
    binds is :func:`strata_doctor.rules.limits.tightest_limits`'s to say."""

    running: bool
    """Whether the engine runs or its cgroup's folder exists; else the unit's files count."""
    memory_max: Tuple[Limit, ...]
    """Every ``memory.max`` that parsed, innermost first (``max`` among them)."""
    memory_high: Tuple[Limit, ...]
    """Every ``memory.high`` likewise (none on cgroup v1)."""
    swap_max: Tuple[Limit, ...]
    """Every ``memory.swap.max`` likewise."""
    mems: Optional[NodeSet]
    """``cpuset.mems.effective`` of the nearest cgroup that has it; not read for a stopped
    unit whose files set ``AllowedMemoryNodes=``."""
    cpus: Optional[NodeSet]
    """``cpuset.cpus.effective`` likewise (``AllowedCPUs=``)."""
    files_read: Tuple[str, ...]
    """The limit files that were there to read."""


class _Layout(NamedTuple):
    """Where one cgroup hierarchy keeps the limit files."""

    memory_dir: str
    """The memory controller's mount."""
    cpuset_dir: str
    """The cpuset controller's mount."""
    memory: Tuple[str, str, str]
    """The files of memory.max, memory.high and memory.swap.max ('' where there is none)."""
    cpuset: Tuple[str, str]
    """The files of the effective mems and cpus."""


_V2 = _Layout(CGROUP_FS, CGROUP_FS, ("memory.max", "memory.high", "memory.swap.max"),
              ("cpuset.mems.effective", "cpuset.cpus.effective"))
_V1 = _Layout(f"{CGROUP_FS}/memory", f"{CGROUP_FS}/cpuset",
              ("memory.limit_in_bytes", "", "memory.memsw.limit_in_bytes"),
              ("cpuset.effective_mems", "cpuset.effective_cpus"))


def read_cgroup_path(root: Root, limits: EngineLimits, engine_runs: bool) -> Optional[CgroupPath]:
    """The memory and cpuset files from ``limits.cgroup`` up to the root; None without a cgroup."""
    cgroup = limits.cgroup
    if cgroup is None:
        return None
    layout = _V1 if limits.cgroup_v1 else _V2
    paths = _ancestors(cgroup)
    running = engine_runs or (cgroup != "/" and root.is_dir(f"{layout.memory_dir}{paths[0]}"))
    read: List[str] = []
    memory = [_read_limits(root, layout.memory_dir, paths, name, read) for name in layout.memory]
    nodes = [
        # A stopped unit's own setting is what it will get: its slices' cpusets are not read.
        _nearest_nodes(root, layout.cpuset_dir, paths, name, read)
        if running or limits.setting(key) is None else None
        for name, key in zip(layout.cpuset, ("AllowedMemoryNodes", "AllowedCPUs"))
    ]
    return CgroupPath(running, memory[0], memory[1], memory[2], nodes[0], nodes[1], tuple(read))


def _read_limits(root: Root, folder: str, paths: List[str], name: str, read: List[str]) -> Tuple[Limit, ...]:
    """Each ``name`` on ``paths`` that parses; ``read`` gains every one that was there."""
    found: List[Limit] = []
    for path in paths if name else ():
        file = f"{folder}{path}/{name}"
        text = root.read_value(file) if root.exists(file) else None
        if text is None:
            continue
        read.append(file)
        parsed = parse_cgroup_bytes(text)
        if parsed is not None:
            found.append(Limit(parsed[0], text, file))
    return tuple(found)


def _nearest_nodes(root: Root, folder: str, paths: List[str], name: str,
                   read: List[str]) -> Optional[NodeSet]:
    """The first ``name`` on ``paths`` that says something."""
    for path in paths:
        file = f"{folder}{path}/{name}"
        text = root.read_value(file) if root.exists(file) else None
        if text:
            read.append(file)
            return NodeSet(parse_cpulist(text), text, file)
    return None


def _ancestors(cgroup: str) -> List[str]:
    """``/a/b`` -> ``/a/b``, ``/a``, ``` `` (the root), innermost first."""
    parts = [p for p in cgroup.split("/") if p and p not in (".", "..")]
    return ["/" + "/".join(parts[:i]) if i else "" for i in range(len(parts), -1, -1)]
