"""Where a command writes a file: one rule for every option that names an output path.

``report --bundle``, ``report --output`` and ``check --output`` all follow it
(docs/report.md#output-paths):

- ``-`` is standard output, as for tar.
- A path that does not exist is created; an existing regular file is replaced atomically
  (a temporary file in the same folder, then a rename), so no reader sees half a file.
- A character device (``/dev/null``, a terminal, ``/dev/stdout`` named by its target) or a
  FIFO is written through, as every Unix tool writes to it: opened for writing without
  creating, truncating or renaming anything, so the device or the FIFO stays as it is and
  its reader gets the data. Nothing else is ever replaced by a regular file.
- Any other existing path (a folder, a socket, a block device) is refused: the doctor
  runs as root, and neither replacing it nor writing a report onto a disk is what the
  user meant.
- A symbolic link is refused too, even one to a regular file: in a shared folder such as
  /tmp, a link would let another user choose the file that root replaces. Name the target
  itself.

Refusals raise :class:`OutputError` with one line; the command line turns it into exit 2.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from typing import Optional

STDOUT = "-"

WRITTEN_THROUGH = (stat.S_ISCHR, stat.S_ISFIFO)
"""The kinds of file opened and written as they are (never replaced)."""

KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class OutputError(OSError):
    """An output path that is refused or cannot be written; the message is one line
    (an OSError, so callers that already handle write errors handle these too)."""


def is_stdout(path: Optional[str]) -> bool:
    """``path`` names standard output (``-``)."""
    return path == STDOUT


def check_path(path: str) -> None:
    """Raise :class:`OutputError` when the rule refuses ``path`` (``-`` is always fine).

    Commands call this before doing any work, so a refused path costs nothing; the
    writers call it again right before they write.
    """
    if is_stdout(path):
        return
    if not path:
        raise OutputError("an empty path names no file")
    info = _existing(path)
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise OutputError(f"{path}: is a symbolic link (to {target}); name the file itself")
    if stat.S_ISREG(info.st_mode) or written_through(info):
        return
    raise OutputError(f"{path}: is {_kind(info)}, not a regular file; refusing to replace it")


def written_through(info: os.stat_result) -> bool:
    """A character device or a FIFO: opened and written, never replaced."""
    return any(test(info.st_mode) for test in WRITTEN_THROUGH)


def _kind(info: os.stat_result) -> str:
    return next((name for test, name in KINDS if test(info.st_mode)), "not a regular file")


def writes_through(path: Optional[str]) -> bool:
    """``path`` exists now as a character device or a FIFO (written through, never replaced)."""
    found = _lstat(path)
    return found is not None and written_through(found)


def is_terminal(path: Optional[str]) -> bool:
    """``path`` is a terminal device (binary data is not written there, as gzip refuses)."""
    if not path or is_stdout(path):
        return False
    try:
        if not stat.S_ISCHR(os.lstat(path).st_mode):
            return False
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def is_null(path: Optional[str]) -> bool:
    """``path`` is the null device (``/dev/null``, or another name of the same device)."""
    found = _lstat(path)
    return found is not None and _null_device(found)


def _lstat(path: Optional[str]) -> Optional[os.stat_result]:
    """``lstat`` of a path the user named for output; None for standard output or no file."""
    if not path or is_stdout(path):
        return None
    try:
        return os.lstat(path)
    except OSError:
        return None


def _null_device(info: os.stat_result) -> bool:
    try:
        null = os.stat(os.devnull)
    except OSError:  # a container without /dev/null: nothing is the null device
        return False
    return stat.S_ISCHR(info.st_mode) and stat.S_ISCHR(null.st_mode) and info.st_rdev == null.st_rdev


def same_file(first: str, second: str) -> bool:
    """Two output paths name one file: the same path however spelled (``./``, ``../``, a
    linked folder) or, when both exist, one file under two names (a hard link). Standard
    output, the null device, a terminal or a FIFO take any number of outputs (each is
    written through, one after the other; nothing replaces another)."""
    if any(is_stdout(p) or writes_through(p) for p in (first, second)):
        return False
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        one, other = os.stat(first), os.stat(second)
    except OSError:  # one does not exist yet: then realpath has said it
        return False
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def write_bytes(path: str, data: bytes, mode: Optional[int] = None) -> int:
    """Write ``data`` to ``path`` under the rule and return how many bytes were written.

    ``-`` writes to standard output; a character device or a FIFO is opened and written
    through (:func:`_write_through`). Otherwise the file is replaced atomically; it gets
    ``mode`` when given, else the mode of the file it replaces, else what ``open`` would
    give (0666 less the umask).

    ``fix --apply`` writes host files with the other atomic writer,
    :func:`strata_doctor.fix.apply.atomic_write`: the same method, but a path inside a captured
    root, whose folders are resolved inside that root (a link never leads out of it), and
    a temporary name embedding its pid that its journal records for a revert after a kill. Here the path
    is the user's own, its folders are resolved by the kernel as typed (links in them are
    the user's choice; only a link at the file itself is refused), and the temporary name
    is random, as the folder may be shared (/tmp). Its docstring lists the differences.
    """
    check_path(path)
    if is_stdout(path):
        return _write_stdout(data)
    if writes_through(path):
        return _write_through(path, data)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".strata-doctor.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    made: Optional[os.stat_result] = None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            # By descriptor, not by name: in a folder others may write, the name could be
            # a link by now, and a chmod by name would follow it.
            os.fchmod(handle.fileno(), _mode_for(path) if mode is None else mode)
            os.fsync(handle.fileno())
            made = os.fstat(handle.fileno())
        _still_ours(tmp, made)
        check_path(path)  # again: it may have changed while the data was written
        _still_replaceable(path)
        os.replace(tmp, path)
    except BaseException as exc:
        _drop_temp(tmp, made)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise
    return len(data)


def _write_through(path: str, data: bytes) -> int:
    """Open a character device or a FIFO for writing and write ``data`` to it, as a shell's
    ``>`` does, minus creating and truncating: a FIFO waits for its reader; ``/dev/full``
    says it is full. Opened without following a link, and written only while what was
    opened is still a device or a FIFO (a regular file put there meanwhile is refused,
    never written into)."""
    flags = os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not written_through(info):
            raise OutputError(f"{path}: is {_kind(info)} now, no longer a device or a FIFO; "
                              "refusing to write into it")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return len(data)


def _existing(path: str) -> Optional[os.stat_result]:
    """``lstat`` of an output path; None when nothing is there yet, one line when it cannot
    be asked."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _still_replaceable(path: str) -> None:
    """Right before the rename: ``path`` is still absent or a regular file (a device or
    FIFO put there meanwhile is not replaced)."""
    info = _existing(path)
    if info is None:
        return
    if not stat.S_ISREG(info.st_mode):
        raise OutputError(f"{path}: is {_kind(info)} now, not a regular file; refusing to replace it")


def _still_ours(tmp: str, made: os.stat_result) -> None:
    """Refuse to rename ``tmp`` into place when it is no longer the file written."""
    try:
        there = os.lstat(tmp)
    except OSError as exc:
        raise OutputError(f"{tmp}: the temporary file went while it was written: {exc.strerror}") from None
    if (there.st_dev, there.st_ino) != (made.st_dev, made.st_ino):
        raise OutputError(f"{tmp}: the temporary file was replaced while it was written")


def _drop_temp(tmp: str, made: Optional[os.stat_result]) -> None:
    """Remove our temporary file, and only ours (what replaced it is someone else's)."""
    try:
        there = os.lstat(tmp)
    except OSError:
        return
    if made is None or (there.st_dev, there.st_ino) == (made.st_dev, made.st_ino):
        os.unlink(tmp)


def _write_stdout(data: bytes) -> int:
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # pragma: no cover - every real stdout has one
        raise OutputError("standard output takes no bytes")
    stream.write(data)
    stream.flush()
    return len(data)


def write_text(path: str, text: str, mode: Optional[int] = None) -> int:
    """:func:`write_bytes` for UTF-8 text."""
    return write_bytes(path, text.encode("utf-8"), mode)


def stdout_is_terminal() -> bool:
    """Standard output is a terminal (binary data is not written there, as gzip refuses)."""
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def _mode_for(path: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
