"""One host file read whole through one descriptor, the way :class:`~strata_doctor.root.Root`
reads every file: no buffered file object (the process scan opens thousands of files), and
nothing in a captured tree that is not a regular file (a FIFO would wait for a writer and
``/dev/zero`` would never end), and never more than a bound (:func:`read_bound`): a sparse
1 TiB ``proc/meminfo`` in a tree is a file too large to read, not a MemoryError.
"""

import errno
import os
import stat
from typing import List, Optional, Tuple

OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
"""How every host file is opened."""
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
"""A captured tree is input: a FIFO there must not block the open (nor a device the read)."""
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
DIR_READ = os.O_RDONLY | DIRECTORY | getattr(os, "O_CLOEXEC", 0)
"""How a folder is opened to be walked from its descriptor."""

READ_BOUND = 16 << 20
"""The most bytes a host file is read to: kernel pseudo-files hold a few KiB and the
largest text a check reads (a config, a unit, a command's output) a few hundred; a file
over it is a fact ("too large"), never a MemoryError or a minute-long read."""
LARGE_READ_BOUND = 256 << 20
"""The bound of the per-process maps (``numa_maps``, ``smaps``, ``maps``): one line of up
to ~200 bytes per mapping, and an engine whose 46 GiB arena is mapped in pieces of mixed
NUMA policy can hold a million mappings."""
LARGE_FILES = ("/numa_maps", "/smaps", "/maps")
"""The file names :data:`LARGE_READ_BOUND` is for."""


def regular(fd: int) -> int:
    """``fd`` when it is a regular file; else closed, and OSError: in a captured tree a FIFO
    would wait for a writer and /dev/zero would never end."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    raise OSError(errno.EINVAL, "not a regular file")


def read_bound(host_path: str) -> int:
    """The most bytes ``host_path`` is read to: :data:`LARGE_READ_BOUND` for the maps of a
    process, :data:`READ_BOUND` for everything else."""
    return LARGE_READ_BOUND if host_path.endswith(LARGE_FILES) else READ_BOUND


def too_large(bound: int, size: Optional[int] = None) -> OSError:
    """The refusal of a file over ``bound`` (``EFBIG``; its strerror is the reason shown)."""
    told = f"{size} bytes, over" if size is not None else "over"
    return OSError(errno.EFBIG, f"too large ({told} the {bound}-byte bound)")


def read_all(fd: int, bound: int = READ_BOUND) -> bytes:
    """A whole file through one descriptor (closed here), without a buffered file object:
    sysfs reports 4096 for every attribute, so read until EOF, never st_size. A file over
    ``bound`` bytes is an ``OSError`` (:func:`too_large`): refused by its size when that
    is over the bound, else the read stops one byte past it (procfs says size 0)."""
    try:
        first = os.read(fd, min(65536, bound + 1))
        if not first:
            return first
        if len(first) == 65536:
            first = _reread_large(fd, first, bound)
        chunks = [first]
        total = len(first)
        while total <= bound:
            chunk = os.read(fd, min(1 << 20, bound + 1 - total))  # a large numa_maps: larger reads
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > bound:
            raise too_large(bound)
        return first if len(chunks) == 1 else b"".join(chunks)  # most files: no join
    finally:
        os.close(fd)


def _reread_large(fd: int, first: bytes, bound: int) -> bytes:
    """A large regular file (a replayed capture's numa_maps) in one read of its size, which
    saves joining chunks of 80 MB; procfs and sysfs files report no useful size. A size
    over the bound (a sparse 1 TiB file) is refused before anything more is read."""
    size = os.fstat(fd).st_size
    if size > bound:
        raise too_large(bound, size)
    if size <= len(first):
        return first
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, size + 1)


def files_below(fd: int, top: str, limit: int) -> Tuple[List[str], Optional[str]]:
    """The host paths (under ``top``) of the files in the folder open as ``fd`` (closed
    here) and its subfolders, sorted and at most ``limit``; and why the walk stopped short,
    if it did. ``os.fwalk`` opens each subfolder from its parent's descriptor and follows no
    link, so a folder swapped for a link mid-walk is never walked outside the root."""
    found: List[str] = []
    head = top.rstrip("/") + "/"
    try:
        for folder, subfolders, names, _ in os.fwalk(".", dir_fd=fd, onerror=_stop):
            subfolders.sort()
            prefix = head if folder == "." else head + folder[2:] + "/"
            for name in sorted(names):
                if len(found) >= limit:
                    return found, None
                found.append(prefix + name)
    except OSError as exc:
        why = "permission denied (needs root)" if isinstance(exc, PermissionError) else exc.strerror
        return found, why or type(exc).__name__
    finally:
        os.close(fd)
    return found, None


def _stop(exc: OSError) -> None:
    raise exc


def read_prefix(fd: int, size: int) -> Tuple[bytes, os.stat_result]:
    """The first ``size`` bytes of the file open as ``fd`` (closed here), fewer when it is
    shorter, and its ``fstat``: a model file's header, never its weights. ``size`` over
    :data:`LARGE_READ_BOUND` is refused (:func:`too_large`) before anything is read."""
    try:
        if size > LARGE_READ_BOUND:
            raise too_large(LARGE_READ_BOUND, size)
        found = os.fstat(fd)
        chunks = []
        total = 0
        while total < size:  # one read, unless the kernel hands back less (a pipe never: regular only)
            chunk = os.read(fd, size - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks), found
    finally:
        os.close(fd)
