"""The host's hugepages as one fact (:class:`HugepageFacts`), and what the engine needs
from them.

Everything is read through the root, each family by its own module: the pools
(``facts/hugepage_pools.py``: every size under ``/sys/kernel/mm/hugepages/``, the
per-node pools, ``/proc/sys/vm/nr_hugepages`` and ``nr_overcommit_hugepages``), the
hugetlbfs mounts in ``/proc/mounts`` and their files (``facts/hugetlbfs.py``), the
configured state that the next boot or ``sysctl --system`` sets (``facts/sysctl.py``,
``facts/cmdline.py``), and the processes that hold hugetlb pages (``HugetlbPages:`` in
``/proc/PID/status``, their nodes from ``/proc/PID/numa_maps``). ``/proc/meminfo``
(HugePages_*, Hugepagesize, Hugetlb) comes parsed from ``HostContext.meminfo``.
"""

from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.cmdline import CmdlineHugepages, parse_hugepage_cmdline, read_configured_cmdline
from strata_doctor.facts.hugepage_pools import (
    DEFAULT_PAGE,
    NR_HUGEPAGES,
    NR_OVERCOMMIT,
    NodePool,
    PagePool,
    read_node_pools,
    read_pools,
)
from strata_doctor.facts.hugetlbfs import HugetlbfsFile, HugetlbfsMount, read_hugetlbfs
from strata_doctor.facts.meminfo import MEMINFO, meminfo_unread
from strata_doctor.facts.numa_maps import read_numa_maps
from strata_doctor.facts.parse import format_bytes, parse_int, parse_mounts
from strata_doctor.facts.pool_users import PoolUserFacts, read_pool_users
from strata_doctor.facts.processes import ProcessInfo
from strata_doctor.facts.sysctl import SysctlConfig, read_sysctl_config
from strata_doctor.root import Root

SYSCTL_KEY = "vm.nr_hugepages"


_CONTAINER_FILES = (("/.dockerenv", "docker"), ("/run/.containerenv", "podman"))
"""Files a container manager leaves at the container's root."""


_CONTAINER_CGROUPS = ("kubepods", "docker", "libpod", "lxc")
"""Words in PID 1's cgroup path that name a container manager."""


# -- small formatting helpers -------------------------------------------------------------
def format_page_size(size: int) -> str:
    """A page size the way people say it: ``2 MiB``, ``1 GiB``, ``64 KiB``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return format_bytes(size)


# -- facts --------------------------------------------------------------------------------
class Holder(NamedTuple):
    """A process that holds hugetlb pages (``HugetlbPages:`` in ``/proc/PID/status``)."""

    pid: int
    """Process id."""
    name: str
    """``Name:`` from status."""
    uid: Optional[int]
    """Real uid."""
    bytes: int
    """Hugetlb memory it maps, in bytes."""
    nodes: Tuple[Tuple[int, int], ...] = ()
    """(node, bytes) of its hugetlb pages, from the ``huge`` lines of ``/proc/PID/numa_maps``."""

    def pages_on(self, node: int, page_size: int) -> int:
        """Its hugetlb pages on one node."""
        return dict(self.nodes).get(node, 0) // page_size


class HugepageFacts(NamedTuple):
    """The host's hugepage pools, their users, and how they are configured."""

    meminfo: Tuple[Tuple[str, int], ...]
    """``/proc/meminfo`` (bytes, or counts for HugePages_*)."""
    default_size: Optional[int]
    """``Hugepagesize:`` in bytes: the size MAP_HUGETLB gets without a size flag."""
    nr_hugepages: Optional[int]
    """``/proc/sys/vm/nr_hugepages``: the default-size pool now."""
    nr_overcommit: Optional[int]
    """``/proc/sys/vm/nr_overcommit_hugepages``."""
    pools: Tuple[PagePool, ...]
    """Every page size's pool, smallest size first."""
    node_pools: Tuple[NodePool, ...]
    """Per-node pools, by node then size."""
    mounts: Tuple[HugetlbfsMount, ...]
    """hugetlbfs mounts with their files."""
    holders: Tuple[Holder, ...]
    """Processes with hugetlb pages mapped, most first."""
    sysctl: SysctlConfig
    """The configured sysctl settings (what ``sysctl --system`` or a reboot applies)."""
    cmdline: CmdlineHugepages
    """Hugepage settings on the running kernel's command line (``/proc/cmdline``)."""
    configured_cmdline: Tuple[Tuple[str, CmdlineHugepages], ...]
    """(file, settings) for the next boot's command line (GRUB, ``/etc/kernel/cmdline``)."""
    container: Optional[str]
    """The container manager when this looks like a container (``docker``, ``podman``...)."""
    sys_readonly: bool
    """Whether ``/sys`` is mounted read-only (sysfs writes will fail)."""
    unreadable: Tuple[Tuple[str, str], ...] = ()
    """(path, why) for what could not be read, e.g. ``permission denied (needs root)``."""
    users: PoolUserFacts = PoolUserFacts()
    """Devices, processes and settings that say another program may use the pools."""

    def mem(self, key: str) -> Optional[int]:
        """A ``/proc/meminfo`` value; None when the line is absent."""
        return dict(self.meminfo).get(key)

    @property
    def page_size(self) -> int:
        """The default hugepage size (2 MiB when the kernel does not say)."""
        return self.default_size or DEFAULT_PAGE

    @property
    def default_pool(self) -> Optional[PagePool]:
        """The pool MAP_HUGETLB draws from without a size flag."""
        for pool in self.pools:
            if pool.size == self.page_size:
                return pool
        return None

    def pool(self, size: int) -> Optional[PagePool]:
        """The pool of one page size."""
        for pool in self.pools:
            if pool.size == size:
                return pool
        return None

    def nodes_of(self, size: int) -> Tuple[NodePool, ...]:
        """Per-node pools of one size."""
        return tuple(p for p in self.node_pools if p.size == size)

    @property
    def files(self) -> Tuple[HugetlbfsFile, ...]:
        """Every hugetlbfs file."""
        return tuple(f for m in self.mounts for f in m.files)

    @property
    def orphans(self) -> Tuple[HugetlbfsFile, ...]:
        """hugetlbfs files no running process maps."""
        return tuple(f for f in self.files if f.orphan)

    @property
    def hugetlb_bytes(self) -> int:
        """Memory in every hugepage pool (``Hugetlb:``, or the pools' sum)."""
        line = self.mem("Hugetlb")
        return line if line is not None else sum(p.bytes for p in self.pools)

    def holder(self, pid: Optional[int]) -> Optional[Holder]:
        """The holder entry of one process."""
        return next((h for h in self.holders if h.pid == pid), None) if pid else None

    def configured_pages(self) -> Optional[Tuple[int, str]]:
        """What the next ``sysctl --system`` or boot sets the default pool to, and where.

        sysctl.d wins over the command line (it runs after the kernel has booted).
        """
        setting = self.sysctl.last(SYSCTL_KEY)
        if setting is not None and parse_int(setting.value) is not None:
            return parse_int(setting.value) or 0, setting.path
        for path, cmdline in self.configured_cmdline:
            pages = cmdline.count_for(self.page_size, self.page_size)
            if pages is not None:
                return pages, path
        return None


def read_hugepages(root: Root, processes: Sequence[ProcessInfo], meminfo: Mapping[str, int]) -> HugepageFacts:
    """Read every hugepage fact through ``root``; ``processes`` is the process table and
    ``meminfo`` ``/proc/meminfo`` as ``read_meminfo`` parsed it."""
    why = meminfo_unread(root)
    unreadable: List[Tuple[str, str]] = [(MEMINFO, why)] if why is not None else []
    default_size = meminfo.get("Hugepagesize") or None
    nr = parse_int(root.read(NR_HUGEPAGES))
    overcommit = parse_int(root.read(NR_OVERCOMMIT))
    node_pools = read_node_pools(root)
    pools = read_pools(root, meminfo, default_size, nr, overcommit, node_pools)
    mounts = parse_mounts(root.read("/proc/mounts") or root.read("/proc/self/mounts") or "")
    holders = read_holders(root, processes)
    hugetlbfs = read_hugetlbfs(root, mounts, [h.pid for h in holders], processes, unreadable)
    return HugepageFacts(
        meminfo=tuple(sorted(meminfo.items())),
        default_size=default_size,
        nr_hugepages=nr,
        nr_overcommit=overcommit,
        pools=pools,
        node_pools=node_pools,
        mounts=hugetlbfs,
        holders=holders,
        sysctl=read_sysctl_config(root),
        cmdline=parse_hugepage_cmdline(root.read("/proc/cmdline") or ""),
        configured_cmdline=read_configured_cmdline(root),
        container=detect_container(root),
        sys_readonly=any(mp == "/sys" and "ro" in opts.split(",") for _, mp, _, opts in mounts),
        unreadable=tuple(unreadable),
        users=read_pool_users(root, processes),
    )


def read_holders(root: Root, processes: Sequence[ProcessInfo]) -> Tuple[Holder, ...]:
    """The processes with hugetlb pages mapped, most first, each with its pages per node
    (the ``huge`` lines of its ``numa_maps``)."""
    return tuple(sorted(
        (Holder(p.pid, p.name, p.uid, p.hugetlb_bytes,
                tuple(sorted(read_numa_maps(root, p.pid).huge_per_node.items())))
         for p in processes if p.hugetlb_bytes > 0),
        key=lambda h: (-h.bytes, h.pid),
    ))


def detect_container(root: Root) -> Optional[str]:
    """The container manager when the root looks like a container; None on a host. Asked
    in turn: systemd's ``/run/systemd/container``, the files a manager leaves at the root,
    PID 1's ``container=`` variable, PID 1's cgroup path."""
    return (root.read_value("/run/systemd/container")
            or next((name for path, name in _CONTAINER_FILES if root.exists(path)), None)
            or _environ_container(root)
            or _cgroup_container(root))


def _environ_container(root: Root) -> Optional[str]:
    """PID 1's ``container=`` environment variable (``container`` when it is empty)."""
    environ = (root.read_bytes("/proc/1/environ") or b"").decode("utf-8", "replace")
    for entry in environ.split("\0"):
        if entry.startswith("container="):
            return entry[10:].strip() or "container"
    return None


def _cgroup_container(root: Root) -> Optional[str]:
    """The container manager PID 1's cgroup path names."""
    cgroup = root.read("/proc/1/cgroup") or ""
    return next((word for word in _CONTAINER_CGROUPS if f"/{word}" in cgroup), None)


# -- facts as data (for JSON) ----------------------------------------------------------------
def hugepages_data(facts: HugepageFacts) -> Dict[str, object]:
    """``facts.hugepages`` in the JSON output."""
    return {
        "default_size_bytes": facts.default_size,
        "nr_hugepages": facts.nr_hugepages,
        "nr_overcommit_hugepages": facts.nr_overcommit,
        "hugetlb_bytes": facts.hugetlb_bytes,
        "pools": [
            {"size_bytes": p.size, "total": p.total, "free": p.free, "reserved": p.reserved,
             "surplus": p.surplus, "overcommit": p.overcommit, "source": p.source}
            for p in facts.pools
        ],
        "nodes": [
            {"node": p.node, "size_bytes": p.size, "total": p.total, "free": p.free,
             "surplus": p.surplus}
            for p in facts.node_pools
        ],
        "hugetlbfs": [_mount_data(m) for m in facts.mounts],
        "holders": [{"pid": h.pid, "name": h.name, "uid": h.uid, "bytes": h.bytes}
                    for h in facts.holders],
        "configured": _configured_data(facts),
        "container": facts.container,
        "sys_readonly": facts.sys_readonly,
        "unreadable": [{"path": p, "reason": r} for p, r in facts.unreadable],
    }


def _mount_data(mount: HugetlbfsMount) -> Dict[str, object]:
    """One hugetlbfs mount and its files in the JSON output."""
    return {"mount_point": mount.mount_point, "options": mount.options,
            "page_size_bytes": mount.page_size, "unreadable": mount.unreadable,
            "files": [{"path": f.path, "size_bytes": f.size, "uid": f.uid, "owner": f.owner,
                       "mapped_by": list(f.mapped_by)} for f in mount.files]}


def _configured_data(facts: HugepageFacts) -> Dict[str, object]:
    """What the next ``sysctl --system`` or boot sets, in the JSON output."""
    return {
        "sysctl": [{"key": s.key, "value": s.value, "file": s.path}
                   for s in facts.sysctl.setters(SYSCTL_KEY)],
        "cmdline": [{"file": path, "pools": [list(p) for p in c.pools]}
                    for path, c in facts.configured_cmdline if c.pools],
    }
