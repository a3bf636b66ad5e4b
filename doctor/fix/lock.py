"""The lock and the state folder ``/var/lib/strata-doctor`` (under the root).

The state folder holds the lock file and ``applies/NNNN/``, one folder per apply with its
journal and saved originals. It is made atomically when missing (a temporary folder
renamed into place, with ``made`` naming the topmost folder created for it). Once no
apply is left in it, what the tool made there is removed, then the folder and those made
for it while empty: what anyone else put there stays, and so does a state folder that
was there before (how a kill half way through that is finished:
:mod:`strata_doctor.fix.state`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import time
from typing import List, Optional

from strata_doctor.fix import steps
from strata_doctor.fix.state import (
    STATE_DIR,
    find_drop_record,
    finish_drop,
    made_folder,
    remove_drop_record,
    remove_forgotten,
    rmdir_chain,
    state_path,
    write_drop_record,
)
from strata_doctor.fix.steps import (
    DIR_FLAGS,
    ApplyError,
    describe,
    read_at,
    remove_at,
    unlink_at,
    write_at,
)
from strata_doctor.inroot import InRoot
from strata_doctor.root import Root

STATE_TEMP = re.compile(r"^\.strata-doctor-state\.(\d+)\.tmp$")
MADE_FILE = "made"
BUSY = "another `strata-doctor fix` is running (pid {pid}); wait for it, or use --wait"
_TRIES = 100


class Lock:
    """The ``flock`` on ``/var/lib/strata-doctor/lock`` under the root.

    The lock file is removed only by its holder (the revert or failed apply that leaves
    the state folder empty), and whoever takes the lock checks that the file it locked is
    still the one at that path, and starts again otherwise; so two holders never coexist.
    The holder's pid is written into the file for the message the loser prints.
    """

    def __init__(self, root: Root, wait: bool = False, create: bool = True) -> None:
        self.root = root
        self.wait = wait
        self.create = create
        self.tree: Optional[InRoot] = None
        self.state_fd = -1
        self.fd = -1

    @property
    def held(self) -> bool:
        """Whether the lock is taken (False when there was no state folder to lock)."""
        return self.fd >= 0

    def __enter__(self) -> Lock:
        try:
            self.tree = InRoot(self.root.base)
        except OSError as exc:
            raise ApplyError(f"cannot open the root {self.root.base}: {describe(exc)}") from None
        try:
            self._take()
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Let go of the lock and of every descriptor."""
        for fd in (self.fd, self.state_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.state_fd = -1
        if self.tree is not None:
            self.tree.close()
            self.tree = None

    def _take(self) -> None:
        assert self.tree is not None
        last: Optional[OSError] = None
        for _ in range(_TRIES):
            try:
                self.state_fd = _open_state(self.tree, self.create)
            except OSError as exc:
                if _nothing_to_lock(exc, self.create):
                    return  # no state folder (or none possible): nothing to lock, nothing recorded
                if not isinstance(exc, FileNotFoundError):
                    raise ApplyError(f"cannot use the state folder {STATE_DIR}: {describe(exc)}") from None
                last = exc  # a folder went while it was made (a holder removing its state): again
                continue
            self.fd = _lock_in(self.state_fd, self.wait)
            if self.held:
                return
            os.close(self.state_fd)  # the holder we waited for removed the state folder: again
            self.state_fd = -1
        why = f": {describe(last)}" if last is not None else ": it keeps being replaced"
        raise ApplyError(f"cannot take the lock {STATE_DIR}/lock{why}")


def _nothing_to_lock(exc: OSError, create: bool) -> bool:
    """Whether a failure to open the state folder means, for a lock that makes none, that
    nothing is recorded: no folder, a link loop, or a file where it should be."""
    return not create and (isinstance(exc, FileNotFoundError) or exc.errno in (errno.ELOOP, errno.ENOTDIR))


def _lock_in(state_fd: int, wait: bool) -> int:
    """The locked descriptor of the state folder's lock file, with our pid in it; -1 when the
    file went (or was replaced) meanwhile and the caller must start again."""
    try:
        fd = steps.open_to_update(state_fd, "lock")
    except FileNotFoundError:  # the holder just removed the state folder
        return -1
    except OSError as exc:
        raise ApplyError(_lock_problem(exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        pid = _holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ApplyError(BUSY.format(pid=pid)) from None
        raise ApplyError(f"cannot lock {STATE_DIR}/lock: {describe(exc)}") from None
    if not _same_file(fd, state_fd, "lock"):
        os.close(fd)
        return -1
    try:
        steps.refuse_replacing(state_fd, "lock", os.fstat(fd))  # truncated only with no other name
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise ApplyError(_lock_problem(exc, "write")) from None
    return fd


def _lock_problem(exc: OSError, doing: str = "use") -> str:
    """The one line of a lock file that cannot be used or written (a refusal says why)."""
    why = f"it {exc.strerror}" if isinstance(exc, steps.Refused) else describe(exc)
    return f"cannot {doing} the lock {STATE_DIR}/lock: {why}"


def _same_file(fd: int, dir_fd: int, name: str) -> bool:
    try:
        there = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _holder(fd: int) -> str:
    for _ in range(20):  # the holder writes its pid right after taking the lock
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.05)
    return "unknown"


# -- making the state folder ------------------------------------------------------
def _open_state(tree: InRoot, create: bool) -> int:
    """A descriptor of the state folder; made, atomically, when missing and ``create``."""
    try:
        return tree.open_dir(STATE_DIR)
    except FileNotFoundError:
        if not create:
            _clean_state_temps(tree)
            raise
    finish_drop(tree)
    try:
        existing, missing = tree.locate(STATE_DIR)
    except OSError as exc:  # a dangling link, a loop, a file in a folder's place
        raise ApplyError(f"cannot use the state folder {STATE_DIR}: {describe(exc)}") from None
    if not missing:
        return tree.open_dir(STATE_DIR)
    parent = tree.open_dir(existing)
    try:
        _clean_state_temps(tree, parent)
        _build_state(parent, existing, missing)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, f"{existing.rstrip('/')}/{missing[0]}") from None
    finally:
        os.close(parent)
    return tree.open_dir(STATE_DIR)


def _build_state(parent: int, existing: str, missing: List[str]) -> None:
    """Make the missing folders of the state folder in a temporary folder, then rename it
    into place: a kill leaves either no state folder or a whole one (with ``made`` naming
    the top folder created for it), never an empty ``var/``."""
    temp = f".strata-doctor-state.{os.getpid()}.tmp"
    steps.checkpoint("state-dir", STATE_DIR)
    os.mkdir(temp, 0o700, dir_fd=parent)
    try:
        _fill_state(parent, temp, existing, missing)
    except Exception:
        with contextlib.suppress(OSError):
            remove_at(parent, temp)
        raise


def _fill_state(parent: int, temp: str, existing: str, missing: List[str]) -> None:
    fds = [os.open(temp, DIR_FLAGS, dir_fd=parent)]
    try:
        for name in missing[1:]:
            os.mkdir(name, 0o700, dir_fd=fds[-1])
            fds.append(os.open(name, DIR_FLAGS, dir_fd=fds[-1]))
        for fd in fds[:-1]:
            os.fchmod(fd, 0o755)  # var/, var/lib/ as every host has them
        os.fchmod(fds[-1], 0o700)
        top = existing.rstrip("/") + "/" + missing[0]
        write_at(fds[-1], MADE_FILE, (top + "\n").encode(), 0o600)
        for fd in reversed(fds):
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    steps.checkpoint("state-rename", STATE_DIR)
    try:
        os.rename(temp, missing[0], src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # else another run made it first
            raise
        remove_at(parent, temp)
    os.fsync(parent)


def _clean_state_temps(tree: InRoot, parent: Optional[int] = None) -> None:
    """Remove the temporary state folders of runs that died while making one, and finish
    a removal of the state folder that a kill cut short."""
    if parent is not None:
        _remove_dead_temps(parent)
        return
    finish_drop(tree)
    try:
        existing, _ = tree.locate(STATE_DIR)
        parent = tree.open_dir(existing)
    except OSError:
        return
    try:
        _remove_dead_temps(parent)
    finally:
        os.close(parent)


def _remove_dead_temps(parent: int) -> None:
    for name in os.listdir(parent):
        found = STATE_TEMP.match(name)
        if found and steps.dead_or_mine(int(found.group(1))):
            remove_at(parent, name)


# -- removing the state folder ----------------------------------------------------
def drop_state_if_empty(lock: Lock) -> None:
    """As the lock's holder: once no apply is recorded, remove what the tool made in the
    state folder (the lock file first, see :class:`Lock`, then ``applies/`` when nothing
    else is in it) and the folders made for it, while empty; anything else there stays.

    While those folders go, a record in the folder above the topmost of them names it, so
    a kill between two removals leaves something the next run finishes, never an empty
    ``var/`` nobody knows about. A state folder nobody recorded as made (one that was
    there before) stays, with whatever it holds."""
    if not lock.held or apply_names(lock.state_fd):
        return
    assert lock.tree is not None
    tree = lock.tree
    steps.checkpoint("drop-state", STATE_DIR)
    state = lock.state_fd
    real = state_path(tree)
    made = _made_for_state(tree, state, real)
    _drop_applies(state)
    unlink_at(state, "lock")
    if made is None:
        return
    above = write_drop_record(tree, made)
    unlink_at(state, MADE_FILE)
    steps.checkpoint("drop-state-dirs", STATE_DIR)
    if rmdir_chain(tree, real, made) == real:  # it holds something else: it stays, still ours
        write_at(state, MADE_FILE, (made + "\n").encode(), 0o600)
    remove_drop_record(tree, above)


def _drop_applies(state_fd: int) -> None:
    """Remove what is left of forgotten applies, then ``applies/`` itself when that leaves
    it empty (a name the tool did not write keeps it)."""
    try:
        applies = os.open("applies", DIR_FLAGS, dir_fd=state_fd)
    except FileNotFoundError:
        return
    try:
        remove_forgotten(applies)
    finally:
        os.close(applies)
    try:
        os.rmdir("applies", dir_fd=state_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise


def drop_state_quietly(lock: Lock) -> None:
    """:func:`drop_state_if_empty`, where a folder that cannot be removed is left as it is."""
    with contextlib.suppress(OSError):  # an empty state folder left behind is harmless
        drop_state_if_empty(lock)


def _made_for_state(tree: InRoot, state_fd: int, real: str) -> Optional[str]:
    """The topmost folder made for the state folder (at ``real``, resolved): its ``made``
    record, else a removal's record a kill left above it; None when neither names one
    (a folder that was there before the tool, which it never removes)."""
    made = made_folder(read_at(state_fd, MADE_FILE), real)
    if made is not None:
        return made
    found = find_drop_record(tree, real)
    return found[1] if found else None


# -- the applies recorded in it ---------------------------------------------------
def apply_names(state_fd: int) -> List[str]:
    """The applies recorded in the state folder, oldest first (``0001``, ``0002``...)."""
    try:
        fd = os.open("applies", DIR_FLAGS, dir_fd=state_fd)
    except OSError:
        return []
    try:
        return sorted(n for n in os.listdir(fd) if n.isdigit())
    finally:
        os.close(fd)


def open_applies(lock: Lock) -> int:
    """A descriptor of ``applies/``, made when missing."""
    with contextlib.suppress(FileExistsError):
        os.mkdir("applies", 0o700, dir_fd=lock.state_fd)
    return os.open("applies", DIR_FLAGS, dir_fd=lock.state_fd)


def new_apply_dir(lock: Lock) -> str:
    """Make the folder of the next apply and return its name."""
    names = apply_names(lock.state_fd)
    name = f"{int(names[-1]) + 1:04d}" if names else "0001"
    applies = open_applies(lock)
    try:
        os.mkdir(name, 0o700, dir_fd=applies)
        os.fsync(applies)
    finally:
        os.close(applies)
    return name


def open_apply_dir(lock: Lock, name: str) -> int:
    """A descriptor of the folder of apply ``name``."""
    applies = open_applies(lock)
    try:
        return os.open(name, DIR_FLAGS, dir_fd=applies)
    finally:
        os.close(applies)
