"""What every step of the writer shares: its error, the checkpoint before each change, and
reads, writes and removals by name below a folder descriptor, following no link.

The lock, the journal, the apply and the revert all change the tree through these, so a
link planted anywhere in a captured tree never leads one of them out of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import List, Optional, Tuple

from strata_doctor.inroot import InRoot, split

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
DIR_FLAGS = os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC
"""How a folder below a descriptor is opened: a folder, never through a link."""


class ApplyError(Exception):
    """An apply or revert that stopped; the message says what failed and what state is left."""


def checkpoint(step: str, path: str) -> None:
    """Called before each step that changes the tree; a no-op that tests replace to fail there.

    Callers reach it as ``steps.checkpoint`` so that one replacement covers every module."""


def describe(exc: BaseException) -> str:
    """An error in one line: the path it concerns, then the system's words."""
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    return str(exc)


def split_host(host_path: str) -> Tuple[str, str]:
    """(folder, name) of a host path; the root itself has no name and is refused."""
    parts = split(host_path)
    if not parts:
        raise OSError(errno.EISDIR, "the root itself", host_path)
    return "/" + "/".join(parts[:-1]), parts[-1]


def lstat_in(tree: InRoot, real: str) -> os.stat_result:
    """The status of ``real`` itself (a link is not followed), its folder resolved in the tree."""
    folder, name = split_host(real)
    parent = tree.open_dir(folder)
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    finally:
        os.close(parent)


def lstat_at(dir_fd: int, name: str) -> Optional[os.stat_result]:
    """The status of ``name`` itself below ``dir_fd``; None when there is nothing there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_at(dir_fd: int, name: str) -> Optional[bytes]:
    """The bytes of ``name`` below ``dir_fd``, None when absent; a link there is refused."""
    try:
        fd = os.open(name, os.O_RDONLY | NOFOLLOW | CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def read_fd(fd: int) -> bytes:
    """Everything left to read from ``fd``."""
    chunks: List[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def write_at(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write ``name`` below ``dir_fd`` in place and fsync it (files nobody else reads)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW | CLOEXEC, mode, dir_fd=dir_fd)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte, however short each write is."""
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        view = view[done:]


def unlink_at(dir_fd: int, name: str) -> None:
    """Remove a file if it is there (asking first: a read-only mount refuses even a missing name)."""
    if lstat_at(dir_fd, name) is None:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def remove_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` (a file, a link or a whole folder) below ``dir_fd``, following no link."""
    info = lstat_at(dir_fd, name)
    if info is None:
        return
    if stat.S_ISDIR(info.st_mode):
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        try:
            for child in os.listdir(fd):
                remove_at(fd, child)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def open_below(dir_fd: int, names: List[str]) -> int:
    """Open ``a/b/c`` below ``dir_fd`` one name at a time, following no link at all."""
    fd = dir_fd
    try:
        for index, name in enumerate(names):
            if name in ("", ".", "..") or "/" in name:
                raise OSError(errno.EINVAL, "not a plain name", name)
            last = index == len(names) - 1
            opened = os.open(name, os.O_RDONLY | NOFOLLOW | CLOEXEC | (0 if last else DIRECTORY), dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = opened
        return fd
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise
