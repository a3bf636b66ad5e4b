"""What every step of the writer shares: its error, the checkpoint before each change, and
reads, writes and removals by name below a folder descriptor, following no link.

The lock, the journal, the apply and the revert all change the tree through these, so a
link planted anywhere in a captured tree never leads one of them out of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from typing import List, Optional, Tuple

from strata_doctor.inroot import InRoot, split

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
DIR_FLAGS = os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC
"""How a folder below a descriptor is opened: a folder, never through a link."""
NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC
"""How every file the writer makes is opened: created new, never an existing one."""
UPDATE_FLAGS = os.O_RDWR | NOFOLLOW | CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
"""How a file updated in place (the lock) is opened: never through a link, never blocking on a FIFO."""
TEMP_SUFFIX = ".strata-doctor-tmp"
_TEMP = re.compile(r"^\.(.+)\.(\d+)\.[0-9a-f]{16}" + re.escape(TEMP_SUFFIX) + "$")


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
    """Replace ``name`` below ``dir_fd`` with ``data``: a new temporary file, fsynced, then
    renamed over it (files nobody else reads: the journal, the originals, the records)."""
    remove_dead_temps(dir_fd, name)
    temp = temp_name(name)
    write_new(dir_fd, temp, data, mode)
    try:
        refuse_replacing(dir_fd, name)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        unlink_at(dir_fd, temp)
        raise


def write_new(dir_fd: int, temp: str, data: bytes, mode: int, owner: Optional[Tuple[int, int]] = None,
              shown: Optional[str] = None) -> None:
    """Create ``temp`` new below ``dir_fd`` with ``data``, its owner, then its mode (a chown
    may clear set-id bits), fsynced; removed again when a step fails. ``shown``: the path a
    checkpoint before the fsync names (the apply's targets)."""
    fd = open_new(dir_fd, temp)
    try:
        write_all(fd, data)
        if owner is not None:
            keep_owner(fd, owner)
        os.fchmod(fd, mode)
        if shown is not None:
            checkpoint("fsync", shown)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        unlink_at(dir_fd, temp)
        raise
    os.close(fd)


# -- files created new ----------------------------------------------------------------
def temp_name(name: str) -> str:
    """A temporary name for ``name`` that nobody can guess: ``.NAME.PID.RANDOM.strata-doctor-tmp``.

    The pid tells whose it is, so that only one of a run that no longer runs is ever
    removed (:func:`remove_dead_temps`)."""
    return f".{name}.{os.getpid()}.{secrets.token_hex(8)}{TEMP_SUFFIX}"


def open_new(dir_fd: int, name: str) -> int:
    """A descriptor of a file created new at ``name`` (mode 0600 until it is written):
    whatever is there already, a file, a link or a hard link, is never opened."""
    return os.open(name, NEW_FLAGS, 0o600, dir_fd=dir_fd)


def keep_owner(fd: int, owner: Tuple[int, int]) -> None:
    """Give ``fd`` the owner and group; without root, what can be kept (the group, when
    ours), as a file's owner is root's to give."""
    try:
        os.fchown(fd, *owner)
    except PermissionError:
        with contextlib.suppress(PermissionError):
            os.fchown(fd, -1, owner[1])


def replace_problem(info: Optional[os.stat_result], over_link: bool = False) -> Optional[str]:
    """Why the file ``info`` describes must not be replaced; None when it may be (absent,
    or a regular file with no other name; a symlink too when ``over_link``)."""
    if info is None or (over_link and stat.S_ISLNK(info.st_mode)):
        return None
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink; strata-doctor never writes through one"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_nlink > 1:
        return f"has {info.st_nlink} links; strata-doctor never writes a file that has another name"
    return None


class Refused(OSError):
    """A file the writer must not write or replace (a link, a hard link, not a regular file)."""


def refuse_replacing(dir_fd: int, name: str, info: Optional[os.stat_result] = None) -> None:
    """Raise :class:`Refused`, naming the file, when ``name`` (or what ``info`` describes,
    when given) must not be written or replaced."""
    problem = replace_problem(info if info is not None else lstat_at(dir_fd, name))
    if problem is not None:
        raise Refused(errno.EMLINK if "links" in problem else errno.EINVAL, problem, shown_at(dir_fd, name))


def open_to_update(dir_fd: int, name: str) -> int:
    """A read-write descriptor of ``name`` below ``dir_fd`` (the lock file): a regular file
    with no other name, made new (``O_EXCL``) when missing; a FIFO or device there is not
    even opened. ``FileNotFoundError`` when the folder went meanwhile."""
    for _ in range(100):
        try:
            refuse_replacing(dir_fd, name)
            fd = os.open(name, UPDATE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            try:
                fd = os.open(name, UPDATE_FLAGS | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
            except FileExistsError:
                continue  # another run made it first: open theirs
        try:
            refuse_replacing(dir_fd, name, os.fstat(fd))  # what was opened, not what was looked at
        except OSError:
            os.close(fd)
            raise
        return fd
    raise OSError(errno.EAGAIN, "it keeps being replaced", shown_at(dir_fd, name))


def shown_at(dir_fd: int, name: str) -> str:
    """``name`` below ``dir_fd`` as a path on this machine, for a message; ``name`` alone
    when the kernel does not say where the folder is."""
    try:
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
    except OSError:
        return name


def remove_dead_temps(dir_fd: int, name: str) -> None:
    """Remove the temporary files of ``name`` that a killed run left below ``dir_fd``: only
    names of :func:`temp_name`'s pattern made by this process or by one that no longer
    runs, and only plain files with no other name. Nothing else is ever removed."""
    for entry in os.listdir(dir_fd):
        found = _TEMP.match(entry)
        if found is None or found.group(1) != name or not dead_or_mine(int(found.group(2))):
            continue
        info = lstat_at(dir_fd, entry)
        if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            unlink_at(dir_fd, entry)


def dead_or_mine(pid: int) -> bool:
    """Whether what process ``pid`` made is left over: it is this one, or it no longer runs."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


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


def make_folders(tree: InRoot, folder: str, mode: int = 0o755) -> None:
    """Make ``folder`` and the folders missing above it inside the tree, each by name below
    its parent's descriptor (as ``mkdir -p``, but a link swapped in never leads out; a
    dangling link or a file in a folder's place is an ``OSError`` naming it)."""
    existing, missing = tree.locate(folder)
    fd = tree.open_dir(existing)
    try:
        for name in missing:
            with contextlib.suppress(FileExistsError):  # made meanwhile by another run
                os.mkdir(name, mode, dir_fd=fd)
            below = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = below
    finally:
        os.close(fd)
