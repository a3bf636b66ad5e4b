"""The only writer: carries out a :class:`~strata_doctor.fix.plan.FixPlan`.

Order of an apply, so that a kill between any two steps leaves a revertible tree:

1. take the lock: an ``flock`` on ``/var/lib/strata-doctor/lock`` (under the root), before
   the checks run and the plan is made (``fix --apply`` holds it from planning to the end;
   :mod:`strata_doctor.fix.lock`);
2. save every original (or its absence) and write the journal, fsynced, *before* any
   change; the journal names every folder the apply will create
   (:mod:`strata_doctor.fix.journal`);
3. create those folders, then write each file atomically: a temporary file created new
   (``O_EXCL``, a name nobody can guess) in the same folder, fsync, rename over the
   target, fsync the folder; a symlink, a hard link or a non-regular file at the target
   is refused, never followed or written;
4. on a live host, as root only, take the runtime actions, journaling each previous value
   first;
5. mark the journal applied.

Every path is resolved inside the root (:mod:`strata_doctor.inroot`): each write, removal
and ``chmod`` is made by name relative to a folder descriptor opened there, with
``O_NOFOLLOW``, so no link in the tree leads a change out of it.

A failing step rolls back what was done; a killed apply is undone by ``fix --revert``
(:mod:`strata_doctor.fix.revert`). This module is also the only one that runs a command
(``systemctl``), for the apply's runtime actions and for the revert's.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from strata_doctor.fix import steps
from strata_doctor.fix.journal import ActionEntry, FileEntry, Journal, refuse_unfinished, write_journal
from strata_doctor.fix.lock import Lock, drop_state_quietly, new_apply_dir, open_apply_dir
from strata_doctor.fix.plan import FixPlan
from strata_doctor.fix.plan_files import PlannedFile
from strata_doctor.fix.state import STATE_DIR
from strata_doctor.fix.steps import (
    DIR_FLAGS,
    ApplyError,
    describe,
    lstat_at,
    lstat_in,
    read_at,
    read_fd,
    replace_problem,
    split_host,
    unlink_at,
    write_all,
    write_at,
)
from strata_doctor.inroot import InRoot
from strata_doctor.root import Root

COMMAND_TIMEOUT = 120.0
ACTION_ERRORS = (OSError, ApplyError, subprocess.SubprocessError)
"""What a failing runtime action raises."""


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


def privileged(root: Root) -> bool:
    """Whether runtime actions may run: the live host, as uid 0."""
    return root.live and os.geteuid() == 0


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
        raise ApplyError(f"apply failed: {describe(exc)}; nothing was changed") from None


def _apply_locked(root: Root, plan: FixPlan, lock: Lock) -> ApplyReport:
    assert lock.tree is not None
    tree = lock.tree
    changes = plan.changes
    targets = [_target(tree, planned.path) for planned in changes]
    _verify_unchanged(tree, changes, targets)
    try:
        name = new_apply_dir(lock)
    except OSError as exc:
        raise ApplyError(f"cannot record the apply in {STATE_DIR}: {describe(exc)}") from None
    apply_fd = -1
    try:
        apply_fd = open_apply_dir(lock, name)
        journal = _save_originals(tree, apply_fd, changes, targets, Journal("applying", plan.root, (), ()))
        write_journal(apply_fd, journal)
        written = _write_files(root, tree, changes, journal)
        journal, taken, skipped = _run_actions(root, tree, plan, apply_fd, journal)
        write_journal(apply_fd, replace(journal, status="applied"))
    except ACTION_ERRORS as exc:
        raise ApplyError(_rollback_message(root, lock, name, exc)) from None
    finally:
        if apply_fd >= 0:
            os.close(apply_fd)
    return ApplyReport(written, taken, skipped, f"{STATE_DIR}/applies/{name}/journal.json")


def _rollback_message(root: Root, lock: Lock, name: str, exc: BaseException) -> str:
    # The revert writes through this module: imported here, where an apply goes back.
    from strata_doctor.fix.revert import revert_named

    what = describe(exc)
    try:
        revert_named(root, lock, name, force=False)
    except ACTION_ERRORS as second:
        return (f"apply failed: {what}; rolling back also failed ({describe(second)}): run "
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
        raise ApplyError(f"{path}: cannot write there: {describe(exc)}") from None
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
    """A regular file's bytes, None when absent; a symlink, a hard link or another type is refused."""
    folder, name = split_host(real)
    parent = tree.open_dir(folder)
    try:
        info = lstat_at(parent, name)
        if info is None:
            return None
        problem = replace_problem(info)
        if problem is not None:
            raise ApplyError(f"{shown} {problem}")
        return read_at(parent, name)
    finally:
        os.close(parent)


def _save_originals(tree: InRoot, apply_fd: int, changes: Tuple[PlannedFile, ...], targets: List[_Target],
                    journal: Journal) -> Journal:
    """Save each file's bytes, mode and owner (or its absence) in the apply's folder; the
    journal that records them, and every folder to create."""
    os.mkdir("originals", 0o700, dir_fd=apply_fd)
    originals = os.open("originals", DIR_FLAGS, dir_fd=apply_fd)
    files: List[FileEntry] = []
    dirs: List[str] = []
    try:
        for index, (planned, target) in enumerate(zip(changes, targets)):
            steps.checkpoint("save-original", planned.path)
            files.append(_saved(tree, originals, index, planned, target))
            dirs.extend(d for d in target.dirs if d not in dirs)
        os.fsync(originals)
    finally:
        os.close(originals)
    return replace(journal, files=tuple(files), dirs=tuple(dirs))


def _saved(tree: InRoot, originals: int, index: int, planned: PlannedFile, target: _Target) -> FileEntry:
    """The journal's entry for one planned file, its original saved as ``originals/INDEX``."""
    entry = FileEntry(planned.path, target.real, planned.current is not None, None, None, None, None,
                      planned.mode, hashlib.sha256(planned.content.encode()).hexdigest(),
                      _host_temp(target.real))  # the name its temporary file will have
    if planned.current is None:
        return entry
    info = lstat_in(tree, target.real)
    write_at(originals, str(index), planned.current, 0o600)
    return replace(entry, mode=stat.S_IMODE(info.st_mode), uid=info.st_uid, gid=info.st_gid,
                   original=f"originals/{index}")


def _write_files(root: Root, tree: InRoot, changes: Tuple[PlannedFile, ...],
                 journal: Journal) -> Tuple[str, ...]:
    """Create the journal's folders, then write each planned file atomically."""
    for directory in journal.dirs:
        steps.checkpoint("mkdir", directory)
        folder, name = split_host(directory)
        parent = tree.open_dir(folder)
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
            made = os.open(name, DIR_FLAGS, dir_fd=parent)
            try:
                os.fchmod(made, 0o755)  # umask must not narrow what systemd needs to read
            finally:
                os.close(made)
            os.fsync(parent)
        finally:
            os.close(parent)
    new_owner = (0, 0) if privileged(root) else None
    for planned, entry in zip(changes, journal.files):
        # A replaced file keeps its owner and group, under --root too (as far as we may give them).
        owner = (entry.uid, entry.gid) if entry.existed else new_owner
        write_in_tree(tree, entry.where, planned.content.encode(), planned.mode, owner,  # type: ignore[arg-type]
                      planned.path, temp=split_host(entry.temp)[1])
    return tuple(p.path for p in changes)


def atomic_write(root: Root, host_path: str, data: bytes, mode: int,
                 owner: Optional[Tuple[int, int]] = None) -> None:
    """Replace a file inside the root: a new temp file in the same folder, fsync, rename, fsync the folder.

    :func:`strata_doctor.output.files.write_bytes`, the writer of the files a user names
    (``--output``, ``--bundle``), uses the same method (a temporary file created new beside
    the target, fsync, rename; a link or a non-regular file at the target refused) but not
    this code: here the folders are resolved inside the captured root and the file is
    written by name below its folder's descriptor (a tree's links, hard links included,
    never lead out of it), the temporary name embeds the pid and the apply's is journaled
    (a revert after a kill removes it, and only it), each step is a
    :func:`~strata_doctor.fix.steps.checkpoint`, the owner is set, and a failure is an
    :class:`ApplyError`; there the path is the user's own, resolved as typed.
    """
    with InRoot(root.base) as tree:
        write_in_tree(tree, host_path, data, mode, owner, host_path)


def write_in_tree(tree: InRoot, real: str, data: bytes, mode: int, owner: Optional[Tuple[int, int]],
                  shown: str, over_link: bool = False, temp: Optional[str] = None) -> None:
    """Write ``data`` to ``real`` through a temporary file created new (``temp``, else a
    fresh :func:`~strata_doctor.fix.steps.temp_name`); a link or a hard link there is refused
    (a link is replaced, never followed, when ``over_link``: a forced revert). ``shown`` is
    the path the messages name."""
    folder, name = split_host(real)
    parent = tree.open_dir(folder)
    try:
        steps.remove_dead_temps(parent, name)
        temp = temp or steps.temp_name(name)
        steps.checkpoint("write-temp", shown)
        steps.write_new(parent, temp, data, mode, owner, shown)
        problem = replace_problem(lstat_at(parent, name), over_link)
        if problem is not None:
            unlink_at(parent, temp)
            raise ApplyError(f"{shown} changed: it {problem}")
        steps.checkpoint("rename", shown)
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        steps.checkpoint("fsync-dir", shown)
        os.fsync(parent)
    finally:
        os.close(parent)


def _host_temp(host_path: str) -> str:
    head, _, name = host_path.rpartition("/")
    return f"{head}/{steps.temp_name(name)}"


def _run_actions(root: Root, tree: InRoot, plan: FixPlan, apply_fd: int,
                 journal: Journal) -> Tuple[Journal, Tuple[str, ...], Tuple[str, ...]]:
    """Take the plan's runtime actions, as root on the live host only; the journal that
    records them, and what was taken and what was not (with why)."""
    if not plan.actions:
        return journal, (), ()
    if not privileged(root):
        why = f"writing into {plan.root}" if not root.live else "not root"
        return journal, (), tuple(f"{a.described} ({why})" for a in plan.actions)
    taken: List[str] = []
    for action in plan.actions:
        entry = ActionEntry(action.kind, action.target, action.value,
                            _runtime_value(tree, action.kind, action.target))
        journal = replace(journal, actions=(*journal.actions, entry))
        write_journal(apply_fd, journal)  # the previous value is saved before the change
        steps.checkpoint("action", action.target)
        take_action(tree, action.kind, action.target, action.value)
        taken.append(action.described)
    return journal, tuple(taken), ()


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
        return read_fd(fd).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)


def take_action(tree: InRoot, kind: str, target: str, value: str) -> None:
    """Set a runtime value (sysctl, sysfs) or run ``systemctl``; a failing command is an
    :class:`ApplyError` with the first line it printed."""
    path = _runtime_path(kind, target)
    if path is not None:
        # Written in place on purpose: a sysctl or sysfs value is a kernel knob, not a file
        # to replace, and only on the live host as root (privileged()), where procfs and
        # sysfs take no hard links and ignore O_TRUNC. Nothing is created (no O_CREAT).
        if not path.startswith(("/proc/sys/", "/sys/")):
            raise ApplyError(f"{path}: not a runtime value under /proc/sys or /sys")
        fd = tree.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            write_all(fd, (value + "\n").encode("ascii"))
        finally:
            os.close(fd)
        return
    argv = ["systemctl", "daemon-reload"] if kind == "daemon-reload" else ["systemctl", "restart", target]
    proc = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ApplyError(f"`{' '.join(argv)}` exited {proc.returncode}" + (f": {err[0]}" if err else ""))


