"""One host file read whole through one descriptor, the way :class:`~strata_doctor.root.Root`
reads every file: no buffered file object (the process scan opens thousands of files), and
nothing in a captured tree that is not a regular file (a FIFO would wait for a writer and
``/dev/zero`` would never end).
"""

import errno
import os
import stat
from pathlib import Path
from typing import Optional

OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
"""How every host file is opened."""
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
"""A captured tree is input: a FIFO there must not block the open (nor a device the read)."""
DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
"""How a folder is opened only to ask where it really is."""


def plain_path(folder: str, name: str) -> bool:
    """Whether a relative path has no ``.`` or ``..`` component (those take the slow road)."""
    return name not in ("", ".", "..") and "/." not in f"/{folder}".replace("/.strata-doctor", "")


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


def read_all(fd: int) -> bytes:
    """A whole file through one descriptor (closed here), without a buffered file object:
    sysfs reports 4096 for every attribute, so read until EOF, never st_size."""
    try:
        first = os.read(fd, 65536)
        if not first:
            return first
        if len(first) == 65536:
            first = _reread_large(fd, first)
        chunk = os.read(fd, 1 << 20)  # most files end here: the common case skips the join
        if not chunk:
            return first
        chunks = [first, chunk]
        while chunk:
            chunk = os.read(fd, 1 << 20)  # a large numa_maps: fewer, larger reads
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _reread_large(fd: int, first: bytes) -> bytes:
    """A large regular file (a replayed capture's numa_maps) in one read of its size, which
    saves joining chunks of 80 MB; procfs and sysfs files report no useful size."""
    size = os.fstat(fd).st_size
    if size <= len(first):
        return first
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, size + 1)


def read_optional(path: Path) -> Optional[str]:
    """A regular file's text with universal newlines; None when it cannot be read."""
    try:
        text = read_all(regular(os.open(path, OPEN_FLAGS | NONBLOCK))).decode("utf-8", "replace")
    except OSError:
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text's universal newlines
