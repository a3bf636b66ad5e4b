"""The only writer: carries out a :class:`~strata_doctor.fix.plan.FixPlan`, and undoes it.

Order of an apply, so that a kill between any two steps leaves a revertible tree:

1. take the lock: an ``flock`` on ``/var/lib/strata-doctor/lock`` (under the root), before
   the checks run and the plan is made (``fix --apply`` holds it from planning to the end);
2. save every original (or its absence) and write the journal, fsynced, *before* any
   change; the journal names every folder the apply will create;
3. create those folders, then write each file atomically: a temporary file in the same
   folder, fsync, rename over the target, fsync the folder; a symlink at the target is
   refused, never followed;
4. on a live host, as root only, take the runtime actions, journaling each previous value
   first;
5. mark the journal applied.

Every path is resolved inside the root (:mod:`strata_doctor.inroot`): each write, removal
and ``chmod`` is made by name relative to a folder descriptor opened there, with
``O_NOFOLLOW``, so no link in the tree leads a change out of it.

A failing step rolls back what was done; a killed apply is undone by ``fix --revert``.
Revert restores bytes, modes and owners, removes the files and folders the apply created
(and no others), and removes the state folder, with the folders made for it, once no apply
is left in it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from strata_doctor.fix.plan import FixPlan, PlannedFile
from strata_doctor.inroot import InRoot, split
from strata_doctor.root import Root

STATE_DIR = "/var/lib/strata-doctor"
JOURNAL_SCHEMA = "strata-doctor/journal/v1"
TEMP_SUFFIX = ".strata-doctor-tmp"
STATE_TEMP = re.compile(r"^\.strata-doctor-state\.(\d+)\.tmp$")
MADE_FILE = "made"
DROP_RECORD = ".strata-doctor-state.drop"
INTERRUPTED = "an earlier apply did not finish: run `strata-doctor fix --revert` first"
REVERT_INTERRUPTED = "an earlier revert did not finish: run `strata-doctor fix --revert` again"
BUSY = "another `strata-doctor fix` is running (pid {pid}); wait for it, or use --wait"
COMMAND_TIMEOUT = 120.0

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class ApplyError(Exception):
    """An apply or revert that stopped; the message says what failed and what state is left."""


def checkpoint(step: str, path: str) -> None:
    """Called before each step that changes the tree; a no-op that tests replace to fail there."""


@dataclass(frozen=True)
class ApplyReport:
    """What an apply did."""

    written: Tuple[str, ...]
    """Host paths written."""
    actions: Tuple[str, ...]
    """Runtime actions taken."""
    skipped_actions: Tuple[str, ...]
    """Runtime actions not taken, with the reason."""
    journal: str
    """Host path of the journal that ``--revert`` will use."""


@dataclass(frozen=True)
class RevertReport:
    """What a revert did."""

    restored: Tuple[str, ...]
    """Host paths put back as they were."""
    removed: Tuple[str, ...]
    """Host paths the apply had created, now removed."""
    kept: Tuple[str, ...]
    """Host paths changed since the apply and left alone (without --force), with why."""
    actions: Tuple[str, ...]
    """Runtime actions taken to restore the previous state."""
    interrupted: bool
    """True when the apply being undone had not finished."""

    @property
    def nothing(self) -> bool:
        """True when there was no apply to undo."""
        return not (self.restored or self.removed or self.kept or self.actions or self.interrupted)


def privileged(root: Root) -> bool:
    """Whether runtime actions may run: the live host, as uid 0."""
    return root.live and os.geteuid() == 0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    return str(exc)


# -- the lock -----------------------------------------------------------------
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
            raise ApplyError(f"cannot open the root {self.root.base}: {_describe(exc)}") from None
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
        for _ in range(100):
            try:
                self.state_fd = _open_state(self.tree, self.create)
            except FileNotFoundError as exc:
                if not self.create:
                    return  # no state folder: nothing to lock, nothing recorded
                last = exc  # a folder went while it was made (a holder removing its state): again
                continue
            except OSError as exc:
                if not self.create and exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return  # a link loop or a file where it should be: nothing can be recorded there
                raise ApplyError(f"cannot use the state folder {STATE_DIR}: {_describe(exc)}") from None
            try:
                fd = os.open("lock", os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600,
                             dir_fd=self.state_fd)
            except FileNotFoundError:  # the holder just removed the state folder: start again
                os.close(self.state_fd)
                self.state_fd = -1
                continue
            except OSError as exc:
                raise ApplyError(f"cannot use the lock {STATE_DIR}/lock: {_describe(exc)}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
            except OSError as exc:
                pid = _holder(fd)
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise ApplyError(BUSY.format(pid=pid)) from None
                raise ApplyError(f"cannot lock {STATE_DIR}/lock: {_describe(exc)}") from None
            if _same_file(fd, self.state_fd, "lock"):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self.fd = fd
                return
            os.close(fd)  # the holder we waited for removed the state folder: start again
            os.close(self.state_fd)
            self.state_fd = -1
        why = f": {_describe(last)}" if last is not None else ": it keeps being replaced"
        raise ApplyError(f"cannot take the lock {STATE_DIR}/lock{why}")


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


def _open_state(tree: InRoot, create: bool) -> int:
    """A descriptor of the state folder; made, atomically, when missing and ``create``."""
    try:
        return tree.open_dir(STATE_DIR)
    except FileNotFoundError:
        if not create:
            _clean_state_temps(tree)
            raise
    _finish_drop(tree)
    try:
        existing, missing = tree.locate(STATE_DIR)
    except OSError as exc:  # a dangling link, a loop, a file in a folder's place
        raise ApplyError(f"cannot use the state folder {STATE_DIR}: {_describe(exc)}") from None
    if not missing:
        return tree.open_dir(STATE_DIR)
    parent = tree.open_dir(existing)
    try:
        _clean_state_temps(tree, parent)
        _build_state(tree, parent, existing, missing)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, f"{existing.rstrip('/')}/{missing[0]}") from None
    finally:
        os.close(parent)
    return tree.open_dir(STATE_DIR)


def _build_state(tree: InRoot, parent: int, existing: str, missing: List[str]) -> None:
    """Make the missing folders of the state folder in a temporary folder, then rename it
    into place: a kill leaves either no state folder or a whole one (with ``made`` naming
    the top folder created for it), never an empty ``var/``."""
    temp = f".strata-doctor-state.{os.getpid()}.tmp"
    checkpoint("state-dir", STATE_DIR)
    os.mkdir(temp, 0o700, dir_fd=parent)
    try:
        _fill_state(parent, temp, existing, missing)
    except Exception:
        with contextlib.suppress(OSError):
            _remove_at(parent, temp)
        raise


def _fill_state(parent: int, temp: str, existing: str, missing: List[str]) -> None:
    fds = [os.open(temp, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)]
    try:
        for name in missing[1:]:
            os.mkdir(name, 0o700, dir_fd=fds[-1])
            fds.append(os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fds[-1]))
        for fd in fds[:-1]:
            os.fchmod(fd, 0o755)  # var/, var/lib/ as every host has them
        os.fchmod(fds[-1], 0o700)
        top = existing.rstrip("/") + "/" + missing[0]
        _write_at(fds[-1], MADE_FILE, (top + "\n").encode(), 0o600)
        for fd in reversed(fds):
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    checkpoint("state-rename", STATE_DIR)
    try:
        os.rename(temp, missing[0], src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # else another run made it first
            raise
        _remove_at(parent, temp)
    os.fsync(parent)


def _clean_state_temps(tree: InRoot, parent: Optional[int] = None) -> None:
    """Remove the temporary state folders of runs that died while making one, and finish
    a removal of the state folder that a kill cut short."""
    if parent is None:
        _finish_drop(tree)
    own = parent is None
    if own:
        try:
            existing, _ = tree.locate(STATE_DIR)
            parent = tree.open_dir(existing)
        except OSError:
            return
    assert parent is not None
    try:
        for name in os.listdir(parent):
            found = STATE_TEMP.match(name)
            if found and (int(found.group(1)) == os.getpid() or not _alive(int(found.group(1)))):
                _remove_at(parent, name)
    finally:
        if own:
            os.close(parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def drop_state_if_empty(lock: Lock) -> None:
    """As the lock's holder: once no apply is recorded, remove the state folder and the
    folders made for it, the lock file first (see :class:`Lock`).

    While those folders go, a record in the folder above the topmost of them names it, so
    a kill between two removals leaves something the next run finishes, never an empty
    ``var/`` nobody knows about."""
    if not lock.held or _apply_names(lock):
        return
    assert lock.tree is not None
    tree = lock.tree
    checkpoint("drop-state", STATE_DIR)
    state = lock.state_fd
    record = _read_at(state, MADE_FILE)
    made = _made(record)
    if made is None:
        found = _find_drop_record(tree)
        made = found[1] if found else STATE_DIR
    for name in ("applies", "lock"):
        _remove_at(state, name)
    above = made.rpartition("/")[0] or "/"
    if made != STATE_DIR:
        _write_record(tree, above, made)
    _remove_at(state, MADE_FILE)
    checkpoint("drop-state-dirs", STATE_DIR)
    stopped = _rmdir_chain(tree, made)
    if stopped == STATE_DIR:  # someone is using it already: it keeps its record
        _write_at(state, MADE_FILE, (made + "\n").encode(), 0o600)
    if made != STATE_DIR:
        _remove_record(tree, above)


def _made(record: Optional[bytes]) -> Optional[str]:
    """The topmost folder made for the state folder, from its record; None when unknown."""
    made = record.decode("utf-8", "replace").strip() if record else ""
    if made == STATE_DIR or (made.startswith("/") and (STATE_DIR + "/").startswith(made.rstrip("/") + "/")):
        return made
    return None


def _rmdir_chain(tree: InRoot, made: str) -> Optional[str]:
    """Remove the state folder and its parents up to ``made``, while empty; the folder where
    it stopped (not empty), or None."""
    folder = STATE_DIR
    while True:
        head, _, name = folder.rpartition("/")
        try:
            parent = tree.open_dir(head or "/")
        except FileNotFoundError:
            parent = -1
        if parent >= 0:
            try:
                os.rmdir(name, dir_fd=parent)
                os.fsync(parent)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    return folder
                if exc.errno != errno.ENOENT:
                    raise
            finally:
                os.close(parent)
        if folder == made or not head:
            return None
        folder = head


def _write_record(tree: InRoot, folder: str, made: str) -> None:
    parent = tree.open_dir(folder)
    try:
        _write_at(parent, DROP_RECORD, (made + "\n").encode(), 0o600)
        os.fsync(parent)
    finally:
        os.close(parent)


def _remove_record(tree: InRoot, folder: str) -> None:
    try:
        parent = tree.open_dir(folder)
    except FileNotFoundError:
        return
    try:
        _unlink_at(parent, DROP_RECORD)
        os.fsync(parent)
    finally:
        os.close(parent)


def _find_drop_record(tree: InRoot) -> Optional[Tuple[str, str]]:
    """(folder, topmost made folder) of a removal of the state folder that was cut short."""
    folder = STATE_DIR.rpartition("/")[0]
    while folder:
        try:
            parent = tree.open_dir(folder)
        except OSError:
            parent = -1
        if parent >= 0:
            try:
                made = _made(_read_at(parent, DROP_RECORD))
            except OSError:
                made = None
            finally:
                os.close(parent)
            if made is not None and made.rpartition("/")[0] in (folder, "") and made != STATE_DIR:
                return folder, made
        folder = folder.rpartition("/")[0]
    try:
        made = _made(_read_at(tree.fd, DROP_RECORD))
    except OSError:
        made = None
    return ("/", made) if made is not None and made.count("/") == 1 and made != STATE_DIR else None


def _finish_drop(tree: InRoot) -> None:
    """Finish a removal of the state folder that a kill cut short (no state folder left)."""
    found = _find_drop_record(tree)
    if found is None:
        return
    if _rmdir_chain(tree, found[1]) is None:
        _remove_record(tree, found[0])


# -- apply --------------------------------------------------------------------
def apply_plan(root: Root, plan: FixPlan, lock: Optional[Lock] = None) -> ApplyReport:
    """Write the plan's changed files and take its runtime actions; roll back on failure.

    ``lock`` is the lock the plan was made under; without it the lock is taken here."""
    if plan.problems:
        raise ApplyError("the plan cannot be applied: " + "; ".join(plan.problems))
    if root.live and os.geteuid() != 0:
        raise ApplyError("writing to / needs root: run it with sudo, or write into a tree with --root DIR")
    if lock is None:
        with Lock(root) as taken:
            return _apply_held(root, plan, taken)
    return _apply_held(root, plan, lock)


def _apply_held(root: Root, plan: FixPlan, lock: Lock) -> ApplyReport:
    try:
        refuse_unfinished(lock)
        if plan.empty:
            drop_state_quietly(lock)
            return ApplyReport((), (), (), "")
        return _apply_locked(root, plan, lock)
    except ApplyError:
        drop_state_quietly(lock)  # a refused or rolled-back apply leaves no state behind
        raise
    except OSError as exc:
        drop_state_quietly(lock)
        raise ApplyError(f"apply failed: {_describe(exc)}; nothing was changed") from None


def drop_state_quietly(lock: Lock) -> None:
    """:func:`drop_state_if_empty`, where a folder that cannot be removed is left as it is."""
    with contextlib.suppress(OSError):  # an empty state folder left behind is harmless
        drop_state_if_empty(lock)


def _apply_locked(root: Root, plan: FixPlan, lock: Lock) -> ApplyReport:
    assert lock.tree is not None
    tree = lock.tree
    changes = plan.changes
    targets = [_target(tree, planned.path) for planned in changes]
    _verify_unchanged(tree, changes, targets)
    try:
        name = _new_apply_dir(lock)
    except OSError as exc:
        raise ApplyError(f"cannot record the apply in {STATE_DIR}: {_describe(exc)}") from None
    journal: Dict[str, Any] = {"schema": JOURNAL_SCHEMA, "status": "applying", "root": plan.root,
                               "files": [], "dirs": [], "actions": []}
    apply_fd = -1
    try:
        apply_fd = _open_apply_dir(lock, name)
        _save_originals(tree, apply_fd, changes, targets, journal)
        _write_journal(apply_fd, journal)
        written = _write_files(root, tree, changes, journal)
        taken, skipped = _run_actions(root, tree, plan, apply_fd, journal)
        journal["status"] = "applied"
        _write_journal(apply_fd, journal)
    except (OSError, ApplyError, subprocess.SubprocessError) as exc:
        raise ApplyError(_rollback_message(root, lock, name, exc)) from None
    finally:
        if apply_fd >= 0:
            os.close(apply_fd)
    return ApplyReport(written, taken, skipped, f"{STATE_DIR}/applies/{name}/journal.json")


def _rollback_message(root: Root, lock: Lock, name: str, exc: BaseException) -> str:
    what = _describe(exc)
    try:
        _revert_named(root, lock, name, force=False)
    except (OSError, ApplyError, subprocess.SubprocessError) as second:
        return (f"apply failed: {what}; rolling back also failed ({_describe(second)}): run "
                "`strata-doctor fix --revert` to restore the saved originals")
    return f"apply failed: {what}; everything it had changed was restored"


@dataclass(frozen=True)
class _Target:
    """Where a planned file lands inside the root."""

    real: str
    """Its host path with every folder resolved inside the root."""
    dirs: Tuple[str, ...]
    """Folders to create for it, outermost first (host paths, resolved)."""


def _target(tree: InRoot, path: str) -> _Target:
    folder, _, name = path.rpartition("/")
    try:
        existing, missing = tree.locate(folder or "/")
    except OSError as exc:
        raise ApplyError(f"{path}: cannot write there: {_describe(exc)}") from None
    dirs: List[str] = []
    here = existing.rstrip("/")
    for part in missing:
        here = f"{here}/{part}"
        dirs.append(here)
    return _Target(f"{here}/{name}", tuple(dirs))


def _verify_unchanged(tree: InRoot, changes: Tuple[PlannedFile, ...], targets: List[_Target]) -> None:
    for planned, target in zip(changes, targets):
        if target.dirs:
            current: Optional[bytes] = None
        else:
            current = _read_file(tree, target.real, planned.path)
        if current != planned.current:
            raise ApplyError(f"{planned.path} changed since the plan was made; run the fix again")


def _read_file(tree: InRoot, real: str, shown: str) -> Optional[bytes]:
    """A regular file's bytes, None when absent; a symlink or other type is refused."""
    folder, name = _split(real)
    parent = tree.open_dir(folder)
    try:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            raise ApplyError(f"{shown} is a symlink; strata-doctor never writes through one")
        if not stat.S_ISREG(info.st_mode):
            raise ApplyError(f"{shown} exists and is not a regular file")
        return _read_at(parent, name)
    finally:
        os.close(parent)


def _save_originals(tree: InRoot, apply_fd: int, changes: Tuple[PlannedFile, ...], targets: List[_Target],
                    journal: Dict[str, Any]) -> None:
    os.mkdir("originals", 0o700, dir_fd=apply_fd)
    originals = os.open("originals", os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=apply_fd)
    try:
        for index, (planned, target) in enumerate(zip(changes, targets)):
            checkpoint("save-original", planned.path)
            entry: Dict[str, Any] = {
                "path": planned.path, "real": target.real, "existed": planned.current is not None,
                "original": None, "mode": None, "uid": None, "gid": None, "new_mode": planned.mode,
                "new_sha256": hashlib.sha256(planned.content.encode()).hexdigest(),
                "temp": _host_temp(target.real),
            }
            if planned.current is not None:
                info = _lstat(tree, target.real)
                entry.update(mode=stat.S_IMODE(info.st_mode), uid=info.st_uid, gid=info.st_gid,
                             original=f"originals/{index}")
                _write_at(originals, str(index), planned.current, 0o600)
            journal["files"].append(entry)
            for directory in target.dirs:
                if directory not in journal["dirs"]:
                    journal["dirs"].append(directory)
        os.fsync(originals)
    finally:
        os.close(originals)


def _write_files(root: Root, tree: InRoot, changes: Tuple[PlannedFile, ...],
                 journal: Dict[str, Any]) -> Tuple[str, ...]:
    for directory in journal["dirs"]:
        checkpoint("mkdir", directory)
        folder, name = _split(directory)
        parent = tree.open_dir(folder)
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
            made = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
            try:
                os.fchmod(made, 0o755)  # umask must not narrow what systemd needs to read
            finally:
                os.close(made)
            os.fsync(parent)
        finally:
            os.close(parent)
    owner = (0, 0) if privileged(root) else None
    for planned, entry in zip(changes, journal["files"]):
        keep = (entry["uid"], entry["gid"]) if entry["existed"] and owner else owner
        _atomic_write(tree, entry["real"], planned.content.encode(), planned.mode, keep, planned.path)
    return tuple(p.path for p in changes)


def atomic_write(root: Root, host_path: str, data: bytes, mode: int,
                 owner: Optional[Tuple[int, int]] = None) -> None:
    """Replace a file inside the root: temp file in the same folder, fsync, rename, fsync the folder.

    The other atomic writer, :func:`strata_doctor.output.files.write_bytes`, writes the files a
    user names (``--output``, ``--bundle``). They share the method (a temporary file beside
    the target, fsync, rename over it; a link or a non-regular file at the target refused)
    but not the code, because three things must differ:

    - Links. Here the folders of ``host_path`` are resolved inside the captured root
      (:class:`~strata_doctor.inroot.InRoot`: a link to ``/etc`` is ``ROOT/etc``, ``..``
      stops at the root) and the file is written by name relative to that folder's fd
      with ``O_NOFOLLOW``: a host tree comes from another machine and its links must
      never lead out of it. A user's output path is resolved by the kernel as typed:
      links in its folders are the user's own choice.
    - The temporary name. Here it is fixed (``.NAME`` + ``TEMP_SUFFIX``) and recorded in
      the journal before it is written, so that a revert after a kill finds and removes it;
      there it is random (``mkstemp``), as the folder may be a shared one such as /tmp.
    - What a step is. Here each step is a :func:`checkpoint` that the interruption tests
      stop at, the owner is set and the folder is fsynced, and a failure is an
      :class:`ApplyError` of the fix; there a failure is an ``OutputError``, exit 2.
    """
    with InRoot(root.base) as tree:
        _atomic_write(tree, host_path, data, mode, owner, host_path)


def _atomic_write(tree: InRoot, real: str, data: bytes, mode: int, owner: Optional[Tuple[int, int]],
                  shown: str, over_link: bool = False) -> None:
    """Write ``data`` to ``real`` through a temporary file; a link there is refused unless
    ``over_link`` (a forced revert), and then replaced, never followed."""
    folder, name = _split(real)
    temp = _split(_host_temp(real))[1]
    parent = tree.open_dir(folder)
    try:
        checkpoint("write-temp", shown)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=parent)
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
            checkpoint("fsync", shown)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_at(parent, temp)
            raise
        os.close(fd)
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode) \
                and not (over_link and stat.S_ISLNK(info.st_mode)):
            _unlink_at(parent, temp)
            kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a regular file"
            raise ApplyError(f"{shown} became {kind}; strata-doctor never writes through one")
        checkpoint("rename", shown)
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        checkpoint("fsync-dir", shown)
        os.fsync(parent)
    finally:
        os.close(parent)


def _host_temp(host_path: str) -> str:
    head, _, name = host_path.rpartition("/")
    return f"{head}/.{name}{TEMP_SUFFIX}"


def _run_actions(root: Root, tree: InRoot, plan: FixPlan, apply_fd: int,
                 journal: Dict[str, Any]) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    if not plan.actions:
        return (), ()
    if not privileged(root):
        why = f"writing into {plan.root}" if not root.live else "not root"
        return (), tuple(f"{a.described} ({why})" for a in plan.actions)
    taken: List[str] = []
    for action in plan.actions:
        entry = {"kind": action.kind, "target": action.target, "value": action.value,
                 "previous": _runtime_value(tree, action.kind, action.target)}
        journal["actions"].append(entry)
        _write_journal(apply_fd, journal)  # the previous value is saved before the change
        checkpoint("action", action.target)
        _take_action(tree, action.kind, action.target, action.value)
        taken.append(action.described)
    return tuple(taken), ()


def _runtime_path(kind: str, target: str) -> Optional[str]:
    if kind == "sysctl":
        return "/proc/sys/" + target.replace(".", "/")
    if kind == "write-sysfs":
        return target
    return None


def _runtime_value(tree: InRoot, kind: str, target: str) -> Optional[str]:
    path = _runtime_path(kind, target)
    if path is None:
        return None
    try:
        fd = tree.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return _read_fd(fd).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)


def _take_action(tree: InRoot, kind: str, target: str, value: str) -> None:
    path = _runtime_path(kind, target)
    if path is not None:
        fd = tree.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            _write_all(fd, (value + "\n").encode("ascii"))
        finally:
            os.close(fd)
        return
    argv = ["systemctl", "daemon-reload"] if kind == "daemon-reload" else ["systemctl", "restart", target]
    proc = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ApplyError(f"`{' '.join(argv)}` exited {proc.returncode}" + (f": {err[0]}" if err else ""))


# -- revert -------------------------------------------------------------------
def interrupted(root: Root) -> bool:
    """Whether the newest apply recorded under the root did not finish (or is being undone)."""
    try:
        with InRoot(root.base) as tree:
            state = tree.open_dir(STATE_DIR)
    except OSError:
        return False
    try:
        return _unfinished(state) is not None
    finally:
        os.close(state)


def _unfinished(state_fd: int) -> Optional[str]:
    names = _apply_names_at(state_fd)
    if not names:
        return None
    status = (_read_journal(state_fd, names[-1]) or {}).get("status")
    if status == "applied":
        return None
    return REVERT_INTERRUPTED if status == "reverting" else INTERRUPTED


def refuse_unfinished(lock: Lock) -> None:
    """Under the lock: refuse to start over an apply or revert that did not finish."""
    if lock.held:
        why = _unfinished(lock.state_fd)
        if why is not None:
            raise ApplyError(why)


def revert_last(root: Root, force: bool = False, lock: Optional[Lock] = None,
                wait: bool = False) -> RevertReport:
    """Undo the newest apply, finished or interrupted, from the state folder."""
    if root.live and os.geteuid() != 0:
        raise ApplyError("reverting on / needs root: run it with sudo")
    if lock is None:
        with Lock(root, wait=wait, create=False) as taken:
            return _revert_held(root, taken, force)
    return _revert_held(root, lock, force)


def _revert_held(root: Root, lock: Lock, force: bool) -> RevertReport:
    if not lock.held:
        return RevertReport((), (), (), (), False)
    names = ["?"]
    try:
        names = _apply_names(lock) or names
        report = (_revert_named(root, lock, names[-1], force) if names != ["?"]
                  else RevertReport((), (), (), (), False))
        drop_state_if_empty(lock)
    except OSError as exc:
        raise ApplyError(f"revert stopped: {_describe(exc)}; fix that and run "
                         "`strata-doctor fix --revert` again") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ApplyError(f"revert stopped: the journal in {STATE_DIR}/applies/{names[-1]} is not one "
                         f"strata-doctor wrote ({type(exc).__name__}: {exc})") from None
    return report


def _revert_named(root: Root, lock: Lock, name: str, force: bool) -> RevertReport:
    assert lock.tree is not None
    tree = lock.tree
    applies = _open_applies(lock)
    try:
        journal = _read_journal(lock.state_fd, name)
        if journal is None:  # stopped before the journal: nothing had been changed yet
            checkpoint("revert-forget", name)
            _remove_at(applies, name)
            os.fsync(applies)
            return RevertReport((), (), (), (), True)
        apply_fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=applies)
        try:
            was = journal.get("was", journal.get("status"))
            if journal.get("status") != "reverting":
                journal["was"], journal["status"] = was, "reverting"
                _write_journal(apply_fd, journal)  # a new apply refuses until the revert ends
            restored: List[str] = []
            removed: List[str] = []
            kept: List[str] = []
            for entry in reversed(journal["files"]):
                outcome = _revert_file(root, tree, apply_fd, entry, force)
                lists = {"restored": restored, "removed": removed, "kept": kept}
                lists.get(outcome[0], []).append(outcome[1])
            for directory in reversed(journal["dirs"]):
                _rmdir_in(tree, directory)
            actions = _revert_actions(root, tree, journal)
        finally:
            os.close(apply_fd)
        if kept:
            raise ApplyError("changed since the apply, left as they are (--force restores them anyway): "
                             + "; ".join(kept))
        checkpoint("revert-forget", name)
        _remove_at(applies, name)
        os.fsync(applies)
    finally:
        os.close(applies)
    return RevertReport(tuple(restored), tuple(removed), (), actions, was != "applied")


def _revert_file(root: Root, tree: InRoot, apply_fd: int, entry: Dict[str, Any],
                 force: bool) -> Tuple[str, str]:
    path = entry["path"]
    real = entry.get("real", path)
    folder, name = _split(real)
    try:
        parent = tree.open_dir(folder)
    except FileNotFoundError:
        return ("kept", f"{path} (its folder is gone)") if entry["existed"] else ("", path)
    try:
        _unlink_at(parent, _split(entry["temp"])[1])
        try:
            info: Optional[os.stat_result] = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode) and not force:
            return "kept", f"{path} (now a symlink)"
        if info is not None and not stat.S_ISLNK(info.st_mode) and not stat.S_ISREG(info.st_mode):
            return "kept", f"{path} (now not a regular file)"
        current = _read_at(parent, name) if info is not None and stat.S_ISREG(info.st_mode) else None
        ours = current is not None and hashlib.sha256(current).hexdigest() == entry["new_sha256"]
        if not entry["existed"]:
            if info is None:
                return "", path
            if not (ours or force):
                return "kept", path
            checkpoint("revert-remove", path)
            os.unlink(name, dir_fd=parent)
            os.fsync(parent)
            return "removed", path
        try:
            fd = _open_below(apply_fd, entry["original"].split("/"))
        except FileNotFoundError:
            fd = -1
        original = _read_fd(fd) if fd >= 0 else None
        if fd >= 0:
            os.close(fd)
        if original is None:
            raise ApplyError(f"the saved original of {path} is missing from the journal's folder")
        if info is not None and stat.S_ISREG(info.st_mode) and current == original \
                and stat.S_IMODE(info.st_mode) == entry["mode"] \
                and (info.st_uid, info.st_gid) == (entry["uid"], entry["gid"]):
            return "", path  # the apply never reached this file
        if info is not None and current != original and not (ours or force):
            return "kept", path
    finally:
        os.close(parent)
    owner = (entry["uid"], entry["gid"]) if privileged(root) else None
    _atomic_write(tree, real, original, entry["mode"], owner, path, over_link=force)
    return "restored", path


def _rmdir_in(tree: InRoot, directory: str) -> None:
    """Remove a folder the apply created, when it is there and empty."""
    folder, name = _split(directory)
    try:
        parent = tree.open_dir(folder)
    except FileNotFoundError:
        return
    try:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            return
        checkpoint("revert-rmdir", directory)
        os.rmdir(name, dir_fd=parent)
        os.fsync(parent)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
    finally:
        os.close(parent)


def _revert_actions(root: Root, tree: InRoot, journal: Dict[str, Any]) -> Tuple[str, ...]:
    if not privileged(root):
        return ()
    steps: List[Tuple[str, str, str]] = [
        (e["kind"], e["target"], e["previous"]) for e in reversed(journal.get("actions", []))
        if e.get("previous") is not None
    ]
    if any(e["kind"] == "daemon-reload" for e in journal.get("actions", [])):
        steps.append(("daemon-reload", "systemd", ""))
    done: List[str] = []
    for kind, target, value in steps:
        label = "systemctl daemon-reload" if kind == "daemon-reload" else f"{target} = {value}"
        try:
            _take_action(tree, kind, target, value)
        except (OSError, ApplyError, subprocess.SubprocessError) as exc:
            # The files are already back; a runtime step that fails is reported, not fatal.
            label += f" failed: {_describe(exc)}"
        done.append(label)
    return tuple(done)


# -- the state folder -----------------------------------------------------------
def _apply_names(lock: Lock) -> List[str]:
    return _apply_names_at(lock.state_fd)


def _apply_names_at(state_fd: int) -> List[str]:
    try:
        fd = os.open("applies", os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=state_fd)
    except OSError:
        return []
    try:
        return sorted(n for n in os.listdir(fd) if n.isdigit())
    finally:
        os.close(fd)


def _open_applies(lock: Lock) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir("applies", 0o700, dir_fd=lock.state_fd)
    return os.open("applies", os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=lock.state_fd)


def _new_apply_dir(lock: Lock) -> str:
    names = _apply_names(lock)
    name = f"{int(names[-1]) + 1:04d}" if names else "0001"
    applies = _open_applies(lock)
    try:
        os.mkdir(name, 0o700, dir_fd=applies)
        os.fsync(applies)
    finally:
        os.close(applies)
    return name


def _open_apply_dir(lock: Lock, name: str) -> int:
    applies = _open_applies(lock)
    try:
        return os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=applies)
    finally:
        os.close(applies)


def _read_journal(state_fd: int, name: str) -> Optional[Dict[str, Any]]:
    try:
        fd = _open_below(state_fd, ["applies", name, "journal.json"])
    except OSError:
        return None
    try:
        data = json.loads(_read_fd(fd).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("schema") != JOURNAL_SCHEMA:
        return None
    try:
        _check_journal(data)
    except ValueError:
        return None  # not one an apply wrote: treated like an apply killed before its journal
    return data


_ORIGINAL = re.compile(r"^originals/\d+$")


def _check_journal(journal: Dict[str, Any]) -> None:
    """Refuse a journal whose entries would point anywhere but where an apply writes: the
    state folder is part of the tree, and under --root the tree is input."""
    def host(value: Any) -> bool:
        return isinstance(value, str) and value.startswith("/") and "\0" not in value

    files, dirs = journal.get("files"), journal.get("dirs")
    if not isinstance(files, list) or not isinstance(dirs, list) or not all(host(d) for d in dirs):
        raise ValueError("files and dirs must be lists of host paths")
    for entry in files:
        if not isinstance(entry, dict) or not all(host(entry.get(k)) for k in ("path", "temp")) \
                or not host(entry.get("real", entry.get("path"))):
            raise ValueError(f"bad file entry {entry!r:.80}")
        if entry.get("existed") and not (isinstance(entry.get("original"), str)
                                         and _ORIGINAL.match(entry["original"])):
            raise ValueError(f"bad original {entry.get('original')!r:.80}")


def _open_below(dir_fd: int, names: List[str]) -> int:
    """Open ``a/b/c`` below ``dir_fd`` one name at a time, following no link at all."""
    fd = dir_fd
    try:
        for index, name in enumerate(names):
            if name in ("", ".", "..") or "/" in name:
                raise OSError(errno.EINVAL, "not a plain name", name)
            last = index == len(names) - 1
            flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | (0 if last else _DIRECTORY)
            opened = os.open(name, flags, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = opened
        return fd
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise


def _write_journal(apply_fd: int, journal: Dict[str, Any]) -> None:
    checkpoint("journal", f"{STATE_DIR}/journal")
    text = json.dumps(journal, indent=2, sort_keys=True) + "\n"
    _write_at(apply_fd, "journal.json.tmp", text.encode(), 0o600)
    os.rename("journal.json.tmp", "journal.json", src_dir_fd=apply_fd, dst_dir_fd=apply_fd)
    os.fsync(apply_fd)


# -- descriptor helpers -----------------------------------------------------------
def _split(host_path: str) -> Tuple[str, str]:
    parts = split(host_path)
    if not parts:
        raise OSError(errno.EISDIR, "the root itself", host_path)
    return "/" + "/".join(parts[:-1]), parts[-1]


def _lstat(tree: InRoot, real: str) -> os.stat_result:
    folder, name = _split(real)
    parent = tree.open_dir(folder)
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    finally:
        os.close(parent)


def _read_at(dir_fd: int, name: str) -> Optional[bytes]:
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def _read_fd(fd: int) -> bytes:
    chunks: List[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_at(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        view = view[done:]


def _unlink_at(dir_fd: int, name: str) -> None:
    """Remove a file if it is there (asking first: a read-only mount refuses even a missing name)."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def _remove_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` (a file, a link or a whole folder) below ``dir_fd``, following no link."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
        try:
            for child in os.listdir(fd):
                _remove_at(fd, child)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)

