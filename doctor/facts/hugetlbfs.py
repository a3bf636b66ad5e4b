"""hugetlbfs mounts and the files in them: a file keeps its hugepages until it is deleted,
so a file no running process maps (``/proc/PID/maps``) is pool memory nobody uses.

Read through the root: the files under each hugetlbfs mount of ``/proc/mounts`` (at most
:data:`MAX_HUGETLBFS_FILES`), their size and owner (``Root.stat``; ``/etc/passwd`` for the
name) and the maps of the processes that might map them.
"""

from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from strata_doctor.facts.parse import is_uint, parse_kernel_size, unescape_octal
from strata_doctor.facts.processes import ProcessInfo
from strata_doctor.root import Root

MAX_HUGETLBFS_FILES = 500


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


class _Listing(NamedTuple):
    """A hugetlbfs mount with the paths of its files, before they are stat'ed."""

    mount_point: str
    """Where it is mounted."""
    options: str
    """Mount options."""
    page_size: Optional[int]
    """``pagesize=`` in bytes."""
    paths: List[str]
    """Host paths of the files under it."""
    unreadable: Optional[str]
    """Why the directory could not be listed."""


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


def parse_passwd(text: str) -> Dict[int, str]:
    """uid -> user name from ``/etc/passwd``."""
    users: Dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and is_uint(fields[2]):
            users.setdefault(int(fields[2]), fields[0])
    return users


def page_size_option(options: str) -> Optional[int]:
    """A hugetlbfs mount's ``pagesize=`` in bytes (the last one given); None without one."""
    page = None
    for opt in options.split(","):
        if opt.startswith("pagesize="):
            page = parse_kernel_size(opt[9:].rstrip("B"))
    return page


def read_hugetlbfs(
    root: Root, mounts: Iterable[Tuple[str, str, str, str]], holder_pids: Sequence[int],
    processes: Sequence[ProcessInfo], unreadable: List[Tuple[str, str]],
) -> Tuple[HugetlbfsMount, ...]:
    """Every hugetlbfs mount of ``mounts`` (``/proc/mounts`` parsed) with its files, who
    owns and who maps each; ``holder_pids`` are the processes with hugetlb pages, whose
    maps are read first. What could not be read is added to ``unreadable``."""
    listed = [_list_mount(root, mount_point, options)
              for _, mount_point, fstype, options in mounts if fstype == "hugetlbfs"]
    if not listed:
        return ()
    users = parse_passwd(root.read("/etc/passwd") or "")
    unreadable.extend((m.mount_point, m.unreadable) for m in listed if m.unreadable)
    mapped = _mappers(root, {path for m in listed for path in m.paths}, holder_pids, processes, unreadable)
    return tuple(_mount(root, m, users, mapped) for m in listed)


def _list_mount(root: Root, mount_point: str, options: str) -> _Listing:
    """One mount's options and the paths under it."""
    paths, why = _walk(root, mount_point)
    return _Listing(mount_point, options, page_size_option(options), paths, why)


def _mount(root: Root, listing: _Listing, users: Dict[int, str],
           mapped: Dict[str, Set[int]]) -> HugetlbfsMount:
    """One mount with its files stat'ed and their mappers named."""
    files = tuple(_file(root, path, users, mapped) for path in listing.paths)
    return HugetlbfsMount(listing.mount_point, listing.options, listing.page_size, files, listing.unreadable)


def _file(root: Root, path: str, users: Dict[int, str], mapped: Dict[str, Set[int]]) -> HugetlbfsFile:
    """One file: its size and owner, and the processes that map it."""
    # Root.stat: a capture records the real size in .strata-doctor/stat.json, since a
    # 46 GiB hugetlbfs file cannot be copied.
    found = root.stat(path)
    size, uid = (found.size, found.uid) if found else (None, None)
    return HugetlbfsFile(path, size, uid, users.get(uid) if uid is not None else None,
                         tuple(sorted(mapped.get(path, ()))))


def _walk(root: Root, top: str) -> Tuple[List[str], Optional[str]]:
    return root.files_below(top, MAX_HUGETLBFS_FILES)


def _mappers(
    root: Root, files: Set[str], holder_pids: Sequence[int], processes: Sequence[ProcessInfo],
    unreadable: List[Tuple[str, str]],
) -> Dict[str, Set[int]]:
    """Which PIDs map each file: holders first, then (only if some file is still unmapped)
    every other process, so a host without hugetlbfs files reads no maps at all."""
    if not files:
        return {}
    mapped, denied = _maps_naming(root, holder_pids, files)
    if not files <= set(mapped):
        holders = set(holder_pids)
        others = [p.pid for p in processes if p.pid not in holders and not p.kernel_thread]
        more, more_denied = _maps_naming(root, others, files)
        denied += more_denied
        for path, pids in more.items():
            mapped.setdefault(path, set()).update(pids)
    if denied:
        unreadable.append(("/proc/PID/maps", f"{denied:,} processes' maps: permission denied (needs root)"))
    return mapped


def _maps_naming(root: Root, pids: Sequence[int], files: Set[str]) -> Tuple[Dict[str, Set[int]], int]:
    """(file -> the PIDs of ``pids`` whose maps name it, how many of their maps were denied)."""
    mapped: Dict[str, Set[int]] = {}
    denied = 0
    for pid in pids:
        text = root.read(f"/proc/{pid}/maps")
        if text is None:
            denied += (root.reads.get(f"/proc/{pid}/maps") or "").startswith("permission")
            continue
        for path in parse_maps_paths(text) & files:
            mapped.setdefault(path, set()).add(pid)
    return mapped, denied
