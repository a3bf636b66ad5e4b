"""Hugepage and transparent-hugepage facts, and what the engine needs from them.

Everything is read through the root: ``/proc/meminfo`` (HugePages_*, Hugepagesize,
Hugetlb), ``/proc/sys/vm/nr_hugepages`` and ``nr_overcommit_hugepages``, every size under
``/sys/kernel/mm/hugepages/``, the per-node pools under
``/sys/devices/system/node/nodeN/hugepages/``, the hugetlbfs mounts in ``/proc/mounts``
and the files in them, the processes that hold hugetlb pages (``HugetlbPages:`` in
``/proc/PID/status``) and the files no process maps (``/proc/PID/maps``). The configured
state (what the next boot or ``sysctl --system`` will set) comes from the sysctl.d(5)
files, ``/etc/sysctl.conf`` and the kernel command line, so a fix that is written but
not yet in effect can be told apart from no fix at all.

Parsers are pure functions on strings; readers take a :class:`~strata_doctor.root.Root`.
"""

import os
import re
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from strata_doctor.facts.numa import NODE_DIR
from strata_doctor.facts.parse import (
    format_bytes,
    parse_int,
    parse_meminfo,
    parse_mounts,
    parse_size,
    unescape_octal,
)
from strata_doctor.facts.processes import ProcessInfo, read_numa_maps
from strata_doctor.root import Root

HUGEPAGES_DIR = "/sys/kernel/mm/hugepages"


NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


NR_OVERCOMMIT = "/proc/sys/vm/nr_overcommit_hugepages"


SYSCTL_KEY = "vm.nr_hugepages"


SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d",
               "/lib/sysctl.d")
"""sysctl.d(5) directories, most important first: a file in /etc hides one of the same name
in /run or /usr/lib."""


SYSCTL_CONF = "/etc/sysctl.conf"


CMDLINE_FILES = ("/etc/default/grub", "/etc/kernel/cmdline")
"""Where the next boot's kernel command line is configured (GRUB, systemd-boot/UKI)."""


MAX_HUGETLBFS_FILES = 500


DEFAULT_PAGE = 2 * 1024**2
"""The seed's failure chain, in the order it happens; both the hugepages and the oomd
findings quote it when they are links of one chain."""


# -- small formatting helpers -------------------------------------------------------------
def format_page_size(size: int) -> str:
    """A page size the way people say it: ``2 MiB``, ``1 GiB``, ``64 KiB``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return format_bytes(size)


def size_dir_name(size: int) -> str:
    """The sysfs directory of a page size: ``hugepages-2048kB``."""
    return f"hugepages-{size // 1024}kB"


# -- parsers ------------------------------------------------------------------------------
def parse_size_dir(name: str) -> Optional[int]:
    """``hugepages-2048kB`` -> 2097152 bytes; None for anything else."""
    match = re.fullmatch(r"hugepages-(\d+)kB", name)
    return int(match.group(1)) * 1024 if match else None


def parse_sysctl_conf(text: str) -> List[Tuple[str, str]]:
    """(key, value) assignments of a sysctl.d(5) file, in order, keys normalised to dots.

    ``#`` and ``;`` start comments; a leading ``-`` (ignore errors) is dropped; a key whose
    first separator is ``/`` (``vm/nr_hugepages``) uses slashes, as sysctl.d(5) allows.
    """
    result: List[Tuple[str, str]] = []
    for raw in text.replace("\0", "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().lstrip("-").strip()
        if not key:
            continue
        result.append((normalize_sysctl_key(key), value.strip()))
    return result


def normalize_sysctl_key(key: str) -> str:
    """``vm/nr_hugepages`` -> ``vm.nr_hugepages``; dotted keys stay as they are."""
    slash, dot = key.find("/"), key.find(".")
    if slash != -1 and (dot == -1 or slash < dot):
        return key.replace(".", "\0").replace("/", ".").replace("\0", "/")
    return key


class CmdlineHugepages(NamedTuple):
    """Hugepage settings on a kernel command line (``default_hugepagesz=``, ``hugepagesz=``,
    ``hugepages=``, ``transparent_hugepage=``)."""

    default_size: Optional[int] = None
    """``default_hugepagesz=`` in bytes."""
    pools: Tuple[Tuple[Optional[int], Optional[int], int], ...] = ()
    """(page size or None for the default, node or None for all nodes, count) per
    ``hugepages=`` value; ``hugepages=1:512,0:0`` gives one entry per node."""
    thp: Optional[str] = None
    """``transparent_hugepage=`` (always, madvise, never)."""
    words: Tuple[str, ...] = ()
    """The hugepage words as written (``hugepagesz=2M hugepages=0:24000``), for messages."""

    def count_for(self, size: int, default_size: int) -> Optional[int]:
        """Total pages of ``size`` the command line asks for; None when it names none."""
        counts = [c for s, _, c in self.pools if (s or self.default_size or default_size) == size]
        return sum(counts) if counts else None

    def node_counts(self, size: int, default_size: int) -> Dict[int, int]:
        """Per-node counts of ``size`` (``hugepages=<node>:<count>``)."""
        return {n: c for s, n, c in self.pools
                if n is not None and (s or self.default_size or default_size) == size}


def parse_hugepage_cmdline(text: str) -> CmdlineHugepages:
    """Hugepage settings of a kernel command line, in the order the kernel applies them."""
    default_size: Optional[int] = None
    size: Optional[int] = None
    pools: List[Tuple[Optional[int], Optional[int], int]] = []
    thp: Optional[str] = None
    words: List[str] = []
    for word in text.replace("\0", " ").replace('"', " ").split():
        key, _, value = word.partition("=")
        if key in ("default_hugepagesz", "hugepagesz", "hugepages"):
            words.append(word)
        if key == "default_hugepagesz":
            default_size = _kernel_size(value)
        elif key == "hugepagesz":
            size = _kernel_size(value)
        elif key == "hugepages":
            for part in value.split(","):
                node_text, sep, count_text = part.partition(":")
                if sep and _uint(node_text) and _uint(count_text):
                    pools.append((size, int(node_text), int(count_text)))
                elif not sep and _uint(part):
                    pools.append((size, None, int(part)))
        elif key == "transparent_hugepage":
            thp = value or None
    return CmdlineHugepages(default_size, tuple(pools), thp, tuple(words))


def _kernel_size(text: str) -> Optional[int]:
    """The kernel's memparse for sizes such as ``2M``, ``1G``, ``64K`` (binary units)."""
    text = text.strip()
    units = {"k": "KiB", "m": "MiB", "g": "GiB"}
    if text and text[-1].lower() in units:
        text = text[:-1] + units[text[-1].lower()]
    try:
        return parse_size(text)
    except ValueError:
        return None


def parse_grub_cmdline(text: str) -> str:
    """The kernel arguments configured in ``/etc/default/grub`` (``GRUB_CMDLINE_LINUX*``)."""
    parts = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("GRUB_CMDLINE_LINUX=", "GRUB_CMDLINE_LINUX_DEFAULT=")):
            parts.append(line.partition("=")[2].strip().strip("'\""))
    return " ".join(parts)


def parse_maps_paths(text: str) -> Set[str]:
    """Paths of the files a process maps (``/proc/PID/maps``), without deleted ones."""
    paths: Set[str] = set()
    for line in text.replace("\0", "").splitlines():
        words = line.split(None, 5)
        if len(words) < 6:
            continue
        path = words[5].strip()
        if not path.startswith("/") or path.endswith(" (deleted)"):
            continue
        paths.add(unescape_octal(path))
    return paths


def _uint(text: str) -> bool:
    return 0 < len(text) <= 64 and text.isascii() and text.isdigit()


def parse_passwd(text: str) -> Dict[int, str]:
    """uid -> user name from ``/etc/passwd``."""
    users: Dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and _uint(fields[2]):
            users.setdefault(int(fields[2]), fields[0])
    return users


# -- facts --------------------------------------------------------------------------------
class PagePool(NamedTuple):
    """One page size's pool, from ``/sys/kernel/mm/hugepages/hugepages-<N>kB/`` (or from
    ``/proc/meminfo`` and ``/proc/sys/vm`` for the default size when sysfs lacks it)."""

    size: int
    """Page size in bytes."""
    total: int
    """``nr_hugepages``: pages in the pool, used or free."""
    free: int
    """``free_hugepages``: pages not faulted in by anyone."""
    reserved: int = 0
    """``resv_hugepages``: free pages promised to a mapping that has not touched them yet."""
    surplus: int = 0
    """``surplus_hugepages``: pages above ``total``, allowed by overcommit."""
    overcommit: int = 0
    """``nr_overcommit_hugepages``: how many surplus pages may be made on demand."""
    source: str = ""
    """The directory or file these came from."""

    @property
    def used(self) -> int:
        """Pages someone has faulted in."""
        return max(0, self.total + self.surplus - self.free)

    @property
    def bytes(self) -> int:
        """Memory the pool takes out of ordinary use."""
        return (self.total + self.surplus) * self.size


class NodePool(NamedTuple):
    """One node's share of a pool, from ``/sys/devices/system/node/nodeN/hugepages/``."""

    node: int
    """NUMA node id."""
    size: int
    """Page size in bytes."""
    total: int
    """``nr_hugepages`` on this node."""
    free: int
    """``free_hugepages`` on this node."""
    surplus: int = 0
    """``surplus_hugepages`` on this node."""


class HugetlbfsFile(NamedTuple):
    """A file in a hugetlbfs mount: its pages stay in use until it is deleted."""

    path: str
    """Host path."""
    size: Optional[int]
    """Length in bytes (``st_size``; a capture's ``.strata-doctor/stat.json`` record)."""
    uid: Optional[int]
    """Owner's uid."""
    owner: Optional[str]
    """Owner's name from ``/etc/passwd``."""
    mapped_by: Tuple[int, ...]
    """PIDs whose ``/proc/PID/maps`` name the file."""

    @property
    def orphan(self) -> bool:
        """No running process maps it, yet it keeps its pages."""
        return not self.mapped_by

    @property
    def owner_text(self) -> str:
        """``alice (uid 1000)`` or what is known of it."""
        if self.owner is not None and self.uid is not None:
            return f"{self.owner} (uid {self.uid})"
        if self.uid is not None:
            return f"uid {self.uid}"
        return "owner unknown"


class HugetlbfsMount(NamedTuple):
    """A hugetlbfs mount from ``/proc/mounts`` and the files under it."""

    mount_point: str
    """Where it is mounted, e.g. ``/dev/hugepages``."""
    options: str
    """Mount options (``pagesize=``, ``size=``, ``min_size=``...)."""
    page_size: Optional[int]
    """``pagesize=`` in bytes; None means the default size."""
    files: Tuple[HugetlbfsFile, ...]
    """Regular files under the mount (at most 500)."""
    unreadable: Optional[str] = None
    """Why the directory could not be listed, when it could not."""


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


class SysctlSetting(NamedTuple):
    """One ``key = value`` line of a sysctl.d(5) file."""

    key: str
    """Normalised key, e.g. ``vm.nr_hugepages``."""
    value: str
    """The value as written."""
    path: str
    """The file it is in."""


class SysctlConfig(NamedTuple):
    """The sysctl settings the next ``sysctl --system`` (or boot) applies, in order.

    Files from ``/etc/sysctl.d``, ``/run/sysctl.d``, ``/usr/local/lib/sysctl.d``,
    ``/usr/lib/sysctl.d`` and ``/lib/sysctl.d`` are applied in the lexicographic order of
    their names whatever the directory (a name in /etc hides the same name elsewhere; a
    link to /dev/null masks it); ``/etc/sysctl.conf`` is applied last, as ``sysctl
    --system`` does. Later assignments win.
    """

    files: Tuple[str, ...] = ()
    """The files read, in the order applied."""
    settings: Tuple[SysctlSetting, ...] = ()
    """Every assignment, in the order applied."""

    def last(self, key: str) -> Optional[SysctlSetting]:
        """The assignment that wins for ``key``; None when no file sets it."""
        found = [s for s in self.settings if s.key == key]
        return found[-1] if found else None

    def setters(self, key: str) -> Tuple[SysctlSetting, ...]:
        """Every assignment of ``key``, in the order applied."""
        return tuple(s for s in self.settings if s.key == key)

    def int_value(self, key: str) -> Optional[int]:
        """The winning value as an integer; None when unset or not a number."""
        setting = self.last(key)
        return parse_int(setting.value) if setting else None


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


def read_hugepages(root: Root, processes: Sequence[ProcessInfo]) -> HugepageFacts:
    """Read every hugepage fact through ``root``; ``processes`` is the process table."""
    unreadable: List[Tuple[str, str]] = []
    meminfo_text = root.read("/proc/meminfo")
    if meminfo_text is None:
        unreadable.append(("/proc/meminfo", root.reads.get("/proc/meminfo") or "missing"))
    meminfo = parse_meminfo(meminfo_text or "")
    default_size = meminfo.get("Hugepagesize")
    default_size = default_size if default_size else None
    nr = parse_int(root.read(NR_HUGEPAGES))
    overcommit = parse_int(root.read(NR_OVERCOMMIT))
    pools = _read_pools(root, meminfo, default_size, nr, overcommit)
    node_pools = read_node_pools(root)
    mounts_text = root.read("/proc/mounts") or root.read("/proc/self/mounts") or ""
    mounts = parse_mounts(mounts_text)
    holders = tuple(sorted(
        (Holder(p.pid, p.name, p.uid, p.hugetlb_bytes,
                tuple(sorted(read_numa_maps(root, p.pid).huge_per_node.items())))
         for p in processes if p.hugetlb_bytes > 0),
        key=lambda h: (-h.bytes, h.pid),
    ))
    hugetlbfs = _read_hugetlbfs(root, mounts, holders, processes, unreadable)
    configured = []
    for path in CMDLINE_FILES:
        text = root.read(path)
        if text is not None:
            line = parse_grub_cmdline(text) if path.endswith("grub") else text
            configured.append((path, parse_hugepage_cmdline(line)))
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
        configured_cmdline=tuple(configured),
        container=detect_container(root),
        sys_readonly=any(mp == "/sys" and "ro" in opts.split(",") for _, mp, _, opts in mounts),
        unreadable=tuple(unreadable),
    )


def _read_pools(
    root: Root, meminfo: Mapping[str, int], default_size: Optional[int], nr: Optional[int],
    overcommit: Optional[int],
) -> Tuple[PagePool, ...]:
    pools: Dict[int, PagePool] = {}
    for name in root.listdir(HUGEPAGES_DIR):
        size = parse_size_dir(name)
        if size is None:
            continue
        base = f"{HUGEPAGES_DIR}/{name}"
        values = {attr: parse_int(root.read(f"{base}/{attr}")) for attr in (
            "nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
            "nr_overcommit_hugepages")}
        pools[size] = PagePool(
            size=size,
            total=values["nr_hugepages"] or 0,
            free=values["free_hugepages"] or 0,
            reserved=values["resv_hugepages"] or 0,
            surplus=values["surplus_hugepages"] or 0,
            overcommit=values["nr_overcommit_hugepages"] or 0,
            source=base,
        )
    size = default_size or DEFAULT_PAGE
    if size not in pools and ("HugePages_Total" in meminfo or nr is not None):
        # Older kernels and trimmed captures: the default pool from meminfo and /proc/sys/vm.
        total = meminfo.get("HugePages_Total", nr if nr is not None else 0)
        pools[size] = PagePool(
            size=size,
            total=total,
            free=meminfo.get("HugePages_Free", total),
            reserved=meminfo.get("HugePages_Rsvd", 0),
            surplus=meminfo.get("HugePages_Surp", 0),
            overcommit=overcommit or 0,
            source="/proc/meminfo",
        )
    return tuple(pools[s] for s in sorted(pools))


def read_node_pools(root: Root) -> Tuple[NodePool, ...]:
    """Every node's pool of every page size, from ``nodeN/hugepages/hugepages-<N>kB/``."""
    result: List[NodePool] = []
    nodes = sorted(int(n[4:]) for n in root.listdir(NODE_DIR) if n.startswith("node") and n[4:].isdigit())
    for node in nodes:
        base = f"{NODE_DIR}/node{node}/hugepages"
        for name in root.listdir(base):
            size = parse_size_dir(name)
            if size is None:
                continue
            total = parse_int(root.read(f"{base}/{name}/nr_hugepages"))
            if total is None:
                continue
            result.append(NodePool(
                node=node, size=size, total=total,
                free=parse_int(root.read(f"{base}/{name}/free_hugepages")) or 0,
                surplus=parse_int(root.read(f"{base}/{name}/surplus_hugepages")) or 0,
            ))
    return tuple(sorted(result, key=lambda p: (p.node, p.size)))


def _read_hugetlbfs(
    root: Root, mounts: Iterable[Tuple[str, str, str, str]], holders: Sequence[Holder],
    processes: Sequence[ProcessInfo], unreadable: List[Tuple[str, str]],
) -> Tuple[HugetlbfsMount, ...]:
    entries = [(mp, opts) for _, mp, fstype, opts in mounts if fstype == "hugetlbfs"]
    if not entries:
        return ()
    users = parse_passwd(root.read("/etc/passwd") or "")
    listed: List[Tuple[str, str, Optional[int], List[str], Optional[str]]] = []
    for mount_point, options in entries:
        page = None
        for opt in options.split(","):
            if opt.startswith("pagesize="):
                page = _kernel_size(opt[9:].rstrip("B"))
        files, why = _walk(root, mount_point)
        if why:
            unreadable.append((mount_point, why))
        listed.append((mount_point, options, page, files, why))
    all_files = {f for _, _, _, files, _ in listed for f in files}
    mapped = _mappers(root, all_files, holders, processes, unreadable) if all_files else {}
    result = []
    for mount_point, options, page, files, why in listed:
        rows = []
        for path in files:
            # Root.stat: a capture records the real size in .strata-doctor/stat.json, since a
            # 46 GiB hugetlbfs file cannot be copied.
            found = root.stat(path)
            size, uid = (found.size, found.uid) if found else (None, None)
            rows.append(HugetlbfsFile(path, size, uid, users.get(uid) if uid is not None else None,
                                      tuple(sorted(mapped.get(path, ())))))
        result.append(HugetlbfsMount(mount_point, options, page, tuple(rows), why))
    return tuple(result)


def _walk(root: Root, top: str) -> Tuple[List[str], Optional[str]]:
    real = root.path(top)
    if not real.exists():
        return [], None  # an empty mount: captures (and git) do not keep empty folders
    if not real.is_dir():
        return [], "not a directory"
    found: List[str] = []
    try:
        for dirpath, dirnames, filenames in os.walk(real, onerror=_raise):
            dirnames.sort()
            rel = os.path.relpath(dirpath, real)
            for name in sorted(filenames):
                if len(found) >= MAX_HUGETLBFS_FILES:
                    return found, None
                host = top.rstrip("/") + "/" + (name if rel == "." else f"{rel}/{name}")
                found.append(host)
    except PermissionError:
        return found, "permission denied (needs root)"
    except OSError as exc:
        return found, exc.strerror or type(exc).__name__
    root.reads.setdefault(top.rstrip("/") + "/", None)
    return found, None


def _raise(exc: OSError) -> None:
    raise exc


def _mappers(
    root: Root, files: Set[str], holders: Sequence[Holder], processes: Sequence[ProcessInfo],
    unreadable: List[Tuple[str, str]],
) -> Dict[str, Set[int]]:
    """Which PIDs map each file: holders first, then (only if some file is still unmapped)
    every other process, so a host without hugetlbfs files reads no maps at all."""
    mapped: Dict[str, Set[int]] = {}
    holder_pids = [h.pid for h in holders]
    others = [p.pid for p in processes if p.pid not in set(holder_pids) and not p.kernel_thread]
    denied = 0
    for batch in (holder_pids, others):
        if batch is others and files <= set(mapped):
            break
        for pid in batch:
            text = root.read(f"/proc/{pid}/maps")
            if text is None:
                denied += (root.reads.get(f"/proc/{pid}/maps") or "").startswith("permission")
                continue
            for path in parse_maps_paths(text) & files:
                mapped.setdefault(path, set()).add(pid)
    if denied:
        unreadable.append(("/proc/PID/maps", f"{denied} processes' maps: permission denied (needs root)"))
    return mapped


def read_sysctl_config(root: Root) -> SysctlConfig:
    """The sysctl.d(5) files in the order they apply, and every assignment in them."""
    chosen: Dict[str, str] = {}
    for directory in SYSCTL_DIRS:
        for name in root.listdir(directory):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{directory}/{name}"
    files: List[str] = []
    settings: List[SysctlSetting] = []
    order = [chosen[name] for name in sorted(chosen)]
    if root.exists(SYSCTL_CONF):
        order.append(SYSCTL_CONF)
    for path in order:
        target = root.readlink(path) or ""
        if target == "/dev/null":
            continue  # masked
        if path != SYSCTL_CONF and target in ("../sysctl.conf", SYSCTL_CONF):
            continue  # 99-sysctl.conf -> ../sysctl.conf: /etc/sysctl.conf is applied last anyway
        text = root.read(path)
        if text is None:
            continue
        files.append(path)
        settings.extend(SysctlSetting(k, v, path) for k, v in parse_sysctl_conf(text))
    return SysctlConfig(tuple(files), tuple(settings))


def detect_container(root: Root) -> Optional[str]:
    """The container manager when the root looks like a container; None on a host."""
    text = root.read_value("/run/systemd/container")
    if text:
        return text
    if root.exists("/.dockerenv"):
        return "docker"
    if root.exists("/run/.containerenv"):
        return "podman"
    environ = (root.read_bytes("/proc/1/environ") or b"").decode("utf-8", "replace")
    for entry in environ.split("\0"):
        if entry.startswith("container="):
            return entry[10:].strip() or "container"
    cgroup = root.read("/proc/1/cgroup") or ""
    for word in ("kubepods", "docker", "libpod", "lxc"):
        if f"/{word}" in cgroup:
            return word
    return None


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
        "hugetlbfs": [
            {"mount_point": m.mount_point, "options": m.options, "page_size_bytes": m.page_size,
             "unreadable": m.unreadable,
             "files": [{"path": f.path, "size_bytes": f.size, "uid": f.uid, "owner": f.owner,
                        "mapped_by": list(f.mapped_by)} for f in m.files]}
            for m in facts.mounts
        ],
        "holders": [{"pid": h.pid, "name": h.name, "uid": h.uid, "bytes": h.bytes}
                    for h in facts.holders],
        "configured": {
            "sysctl": [{"key": s.key, "value": s.value, "file": s.path}
                       for s in facts.sysctl.setters(SYSCTL_KEY)],
            "cmdline": [{"file": path, "pools": [list(p) for p in c.pools]}
                        for path, c in facts.configured_cmdline if c.pools],
        },
        "container": facts.container,
        "sys_readonly": facts.sys_readonly,
        "unreadable": [{"path": p, "reason": r} for p, r in facts.unreadable],
    }
