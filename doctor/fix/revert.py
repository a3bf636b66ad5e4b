"""Undo the newest apply, finished or interrupted, from its journal.

For each journaled file, newest first, :func:`decide_revert` says, from the journal's
entry and what is on disk now, whether to restore the saved bytes, remove the file the
apply created, or leave it (and why); it reads nothing. The executor around it looks at
the file, asks, and carries the answer out. A file changed since the apply is left as it
is unless ``--force``, and then the revert stops before it forgets the apply, so that it
can be run again.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from strata_doctor.fix import apply, steps
from strata_doctor.fix.journal import FileEntry, Journal, read_journal, write_journal
from strata_doctor.fix.lock import Lock, apply_names, drop_state_if_empty, open_applies
from strata_doctor.fix.state import STATE_DIR, forget_apply
from strata_doctor.fix.steps import (
    DIR_FLAGS,
    ApplyError,
    describe,
    lstat_at,
    open_below,
    read_at,
    read_fd,
    split_host,
)
from strata_doctor.inroot import InRoot
from strata_doctor.root import Root

RESTORE = "restore"
REMOVE = "remove"
LEAVE = "leave"
CHANGED = "changed since the apply"
"""Why a file is left that differs from both what the apply wrote and what was there."""
LOST = "its saved original is missing, so it cannot be restored; --force leaves it as it is"
"""Why a file is left that still holds what the apply wrote (or nothing) and whose saved
original is gone."""

ABSENT, FILE, LINK, OTHER = "absent", "file", "link", "other"
_KINDS = {stat.S_IFREG: FILE, stat.S_IFLNK: LINK}


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


NOTHING = RevertReport((), (), (), (), False)


@dataclass(frozen=True)
class OnDisk:
    """What is at a journaled file's place now."""

    folder: bool
    """Whether its folder is there."""
    kind: str = ABSENT
    """``absent``, ``file`` (a regular one), ``link`` or ``other``."""
    mode: int = 0
    """Its permission bits, when there is something there."""
    owner: Tuple[int, int] = (-1, -1)
    """Its (uid, gid), when there is something there."""
    current: Optional[bytes] = None
    """Its bytes, when it is a regular file."""
    original: Optional[bytes] = None
    """The bytes saved before the apply, once read (see :func:`needs_original`)."""
    lost: bool = False
    """Whether the saved original was looked for and is missing from the apply's folder."""


@dataclass(frozen=True)
class RevertDecision:
    """What the revert does with one journaled file."""

    action: str
    """``restore`` (write ``data`` back), ``remove`` (the apply created it) or ``leave``."""
    why: str
    """Why, in a few words."""
    changed: bool = False
    """Left because it changed since the apply: reported, and the revert does not finish."""
    data: Optional[bytes] = None
    """The bytes to restore."""


def _leave(why: str, changed: bool = False) -> RevertDecision:
    return RevertDecision(LEAVE, why, changed)


def _ours(entry: FileEntry, now: OnDisk) -> bool:
    """Whether the file still holds what the apply wrote."""
    return now.current is not None and hashlib.sha256(now.current).hexdigest() == entry.new_sha256


def _without_original(entry: FileEntry, now: OnDisk, force: bool) -> Optional[RevertDecision]:
    """The decision when the saved original does not matter; None when it does."""
    if not now.folder:
        return _leave("its folder is gone", changed=True) if entry.existed else _leave("its folder is gone")
    if now.kind == LINK and not force:
        return _leave("now a symlink", changed=True)
    if now.kind == OTHER:
        return _leave("now not a regular file", changed=True)
    if entry.existed:
        return None
    if now.kind == ABSENT:
        return _leave("not there, as before the apply")
    if not (_ours(entry, now) or force):
        return _leave(CHANGED, changed=True)
    return RevertDecision(REMOVE, "the apply created it")


def _without_saved(entry: FileEntry, now: OnDisk, force: bool) -> RevertDecision:
    """The decision for a file whose saved original is gone (a kill while an older release
    forgot the apply, or a hand): a regular file with the mode and owner recorded that no
    longer holds what the apply wrote is the original put back already, so the step is
    done; anything else cannot be restored, and only ``force`` lets the revert finish."""
    if now.kind == FILE and not _ours(entry, now) and now.mode == entry.mode \
            and now.owner == (entry.uid, entry.gid):
        return _leave("as it was: restored already")
    return _leave(LOST, changed=not force)


def needs_original(entry: FileEntry, now: OnDisk, force: bool) -> bool:
    """Whether :func:`decide_revert` needs the saved original in ``now`` to decide."""
    return _without_original(entry, now, force) is None


def decide_revert(entry: FileEntry, now: OnDisk, force: bool) -> RevertDecision:
    """Restore, remove or leave one journaled file, from its entry and what is there now.

    ``force`` restores (or removes) a file changed since the apply, and replaces a link
    there; a non-regular file is left whatever ``force`` says."""
    early = _without_original(entry, now, force)
    if early is not None:
        return early
    if now.lost:
        return _without_saved(entry, now, force)
    if now.kind == FILE and now.current == now.original and now.mode == entry.mode \
            and now.owner == (entry.uid, entry.gid):
        return _leave("as it was: the apply never reached it")
    if now.kind != ABSENT and now.current != now.original and not (_ours(entry, now) or force):
        return _leave(CHANGED, changed=True)
    return RevertDecision(RESTORE, "the apply replaced it", data=now.original)


# -- carrying a decision out ------------------------------------------------------
def _look(dir_fd: int, name: str) -> OnDisk:
    """What is at ``name`` below ``dir_fd``, following no link."""
    info = lstat_at(dir_fd, name)
    if info is None:
        return OnDisk(True)
    kind = _KINDS.get(stat.S_IFMT(info.st_mode), OTHER)
    return OnDisk(True, kind, stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid),
                  read_at(dir_fd, name) if kind == FILE else None)


def _saved_original(apply_fd: int, entry: FileEntry) -> Optional[bytes]:
    """The bytes saved before the apply, from the apply's folder; None when they are gone."""
    assert entry.original is not None
    try:
        fd = open_below(apply_fd, entry.original.split("/"))
    except FileNotFoundError:
        return None
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def _revert_file(root: Root, tree: InRoot, apply_fd: int, entry: FileEntry, force: bool) -> RevertDecision:
    """Look at one journaled file, decide, and carry the decision out."""
    folder, name = split_host(entry.where)
    try:
        parent = tree.open_dir(folder)
    except FileNotFoundError:
        return decide_revert(entry, OnDisk(False), force)
    try:
        steps.remove_dead_temps(parent, name)  # only a killed run's own temporary files
        now = _look(parent, name)
        if needs_original(entry, now, force):
            saved = _saved_original(apply_fd, entry)
            now = replace(now, original=saved, lost=saved is None)
        decision = decide_revert(entry, now, force)
        if decision.action == REMOVE:
            steps.checkpoint("revert-remove", entry.path)
            os.unlink(name, dir_fd=parent)
            os.fsync(parent)
    finally:
        os.close(parent)
    if decision.action == RESTORE:
        assert decision.data is not None
        # A journal strata-doctor did not write may hold anything here: the write refuses it.
        owner = (entry.uid, entry.gid)  # under --root too: as far as this user may give it
        mode: int = entry.mode  # type: ignore[assignment]
        apply.write_in_tree(tree, entry.where, decision.data, mode, owner,  # type: ignore[arg-type]
                            entry.path, over_link=force)
    return decision


def _kept_line(entry: FileEntry, decision: RevertDecision) -> str:
    return entry.path if decision.why == CHANGED else f"{entry.path} ({decision.why})"


def _kept_message(kept: Tuple[str, ...]) -> str:
    """The one line naming the files a revert without --force left, and why."""
    lost = [line for line in kept if line.endswith(f"({LOST})")]
    changed = [line for line in kept if line not in lost]
    parts = []
    if changed:
        parts.append("changed since the apply, left as they are (--force restores them anyway): "
                     + "; ".join(changed))
    if lost:
        parts.append("left as they are: " + "; ".join(lost))
    return "; ".join(parts)


def _rmdir_in(tree: InRoot, directory: str) -> None:
    """Remove a folder the apply created, when it is there and empty."""
    folder, name = split_host(directory)
    try:
        parent = tree.open_dir(folder)
    except FileNotFoundError:
        return
    try:
        info = lstat_at(parent, name)
        if info is None or not stat.S_ISDIR(info.st_mode):
            return
        steps.checkpoint("revert-rmdir", directory)
        os.rmdir(name, dir_fd=parent)
        os.fsync(parent)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
    finally:
        os.close(parent)


def _revert_actions(root: Root, tree: InRoot, journal: Journal) -> Tuple[str, ...]:
    """Put back each runtime value the apply replaced, newest first, then reload systemd."""
    if not apply.privileged(root):
        return ()
    undo: List[Tuple[str, str, str]] = [
        (e.kind, e.target, e.previous) for e in reversed(journal.actions) if e.previous is not None
    ]
    if any(e.kind == "daemon-reload" for e in journal.actions):
        undo.append(("daemon-reload", "systemd", ""))
    done: List[str] = []
    for kind, target, value in undo:
        label = "systemctl daemon-reload" if kind == "daemon-reload" else f"{target} = {value}"
        try:
            apply.take_action(tree, kind, target, value)
        except apply.ACTION_ERRORS as exc:
            # The files are already back; a runtime step that fails is reported, not fatal.
            label += f" failed: {describe(exc)}"
        done.append(label)
    return tuple(done)


# -- the revert ---------------------------------------------------------------------
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
        return NOTHING
    names = ["?"]
    try:
        names = apply_names(lock.state_fd) or names
        report = revert_named(root, lock, names[-1], force) if names != ["?"] else NOTHING
        drop_state_if_empty(lock)
    except OSError as exc:
        raise ApplyError(f"revert stopped: {describe(exc)}; fix that and run "
                         "`strata-doctor fix --revert` again") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ApplyError(f"revert stopped: the journal in {STATE_DIR}/applies/{names[-1]} is not one "
                         f"strata-doctor wrote ({type(exc).__name__}: {exc})") from None
    return report


def revert_named(root: Root, lock: Lock, name: str, force: bool) -> RevertReport:
    """Undo apply ``name`` and forget it; a file changed since it stops the revert first."""
    applies = open_applies(lock)
    try:
        journal = read_journal(lock.state_fd, name)
        report = _undo(root, lock, applies, name, journal, force) if journal is not None \
            else RevertReport((), (), (), (), True)  # stopped before the journal: nothing changed yet
        if report.kept:
            raise ApplyError(_kept_message(report.kept))
        steps.checkpoint("revert-forget", name)
        forget_apply(applies, name)  # whole or forgotten: never a journal without its originals
    finally:
        os.close(applies)
    return report


def _undo(root: Root, lock: Lock, applies: int, name: str, journal: Journal, force: bool) -> RevertReport:
    """Put back what the journal's apply changed: files newest first, then folders, then
    runtime values."""
    assert lock.tree is not None
    apply_fd = os.open(name, DIR_FLAGS, dir_fd=applies)
    try:
        if journal.status != "reverting":  # a new apply refuses until the revert ends
            was = journal.was if journal.was is not None else journal.status
            write_journal(apply_fd, replace(journal, was=was, status="reverting"))
        done = [(entry, _revert_file(root, lock.tree, apply_fd, entry, force))
                for entry in reversed(journal.files)]
        for directory in reversed(journal.dirs):
            _rmdir_in(lock.tree, directory)
        actions = _revert_actions(root, lock.tree, journal)
    finally:
        os.close(apply_fd)
    return _report(done, actions, journal.finished)


def _report(done: List[Tuple[FileEntry, RevertDecision]], actions: Tuple[str, ...],
            finished: bool) -> RevertReport:
    """What the revert did with each file, in the order it did it."""
    return RevertReport(
        tuple(e.path for e, d in done if d.action == RESTORE),
        tuple(e.path for e, d in done if d.action == REMOVE),
        tuple(_kept_line(e, d) for e, d in done if d.changed),
        actions, not finished,
    )
