"""The only writer: carries out a :class:`~strata_doctor.plan.Plan`, and undoes it.

Order of an apply, so that a kill between any two steps leaves a revertible tree:

1. take the lock ``/var/lib/strata-doctor/lock`` (under the root);
2. save every original (or its absence) and write the journal, fsynced, *before* any change;
3. create missing directories, then write each file atomically: a temporary file in the
   same directory, fsync, rename over the target, fsync the directory; a symlink at the
   target is refused, never followed;
4. on a live host, as root only, take the runtime actions, journaling each previous value
   first;
5. mark the journal applied.

A failing step rolls back what was done; a killed apply is undone by ``fix --revert``.
Revert restores bytes, modes and owners, removes files and directories the apply created,
and removes the state directory once no apply is left in it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from strata_doctor.plan import Plan, PlannedFile, read_no_follow
from strata_doctor.root import Root

STATE_DIR = "/var/lib/strata-doctor"
JOURNAL_SCHEMA = "strata-doctor/journal/v1"
TEMP_SUFFIX = ".strata-doctor-tmp"
INTERRUPTED = "an earlier apply did not finish: run `strata-doctor fix --revert` first"
COMMAND_TIMEOUT = 120.0


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


# -- apply --------------------------------------------------------------------
def apply_plan(root: Root, plan: Plan) -> ApplyReport:
    """Write the plan's changed files and take its runtime actions; roll back on failure."""
    if plan.problems:
        raise ApplyError("the plan cannot be applied: " + "; ".join(plan.problems))
    if root.live and os.geteuid() != 0:
        raise ApplyError("writing to / needs root: run it with sudo, or write into a tree with --root DIR")
    if interrupted(root):
        raise ApplyError(INTERRUPTED)
    if plan.empty:
        return ApplyReport((), (), (), "")
    try:
        with _locked(root):
            return _apply_locked(root, plan)
    except ApplyError:
        _drop_state_if_empty(root)  # a refused or rolled-back apply leaves no state behind
        raise


def _apply_locked(root: Root, plan: Plan) -> ApplyReport:
    changes = plan.changes
    _refuse_interrupted(root)
    _verify_unchanged(root, changes)
    try:
        apply_dir = _new_apply_dir(root)
    except OSError as exc:
        raise ApplyError(f"cannot record the apply in {STATE_DIR}: {_describe(exc)}") from None
    journal: Dict[str, Any] = {"schema": JOURNAL_SCHEMA, "status": "applying", "root": plan.root,
                               "files": [], "dirs": [], "actions": []}
    try:
        _save_originals(root, apply_dir, changes, journal)
        _write_journal(root, apply_dir, journal)
        written = _write_files(root, changes, journal)
        taken, skipped = _run_actions(root, plan, apply_dir, journal)
        journal["status"] = "applied"
        _write_journal(root, apply_dir, journal)
    except (OSError, ApplyError, subprocess.SubprocessError) as exc:
        raise ApplyError(_rollback_message(root, apply_dir, exc)) from None
    return ApplyReport(written, taken, skipped, f"{_host(apply_dir)}/journal.json")


def _rollback_message(root: Root, apply_dir: Path, exc: BaseException) -> str:
    what = _describe(exc)
    try:
        _revert_dir(root, apply_dir, force=False)
    except (OSError, ApplyError, subprocess.SubprocessError) as second:
        return (f"apply failed: {what}; rolling back also failed ({_describe(second)}): run "
                "`strata-doctor fix --revert` to restore the saved originals")
    return f"apply failed: {what}; everything it had changed was restored"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    return str(exc)


def interrupted(root: Root) -> bool:
    """Whether the newest apply recorded under the root did not finish."""
    last = _last_apply_dir(root)
    if last is None:
        return False
    journal = _read_journal(last)
    return journal is None or journal.get("status") != "applied"


def _refuse_interrupted(root: Root) -> None:
    if interrupted(root):
        raise ApplyError(INTERRUPTED)


def _verify_unchanged(root: Root, changes: Tuple[PlannedFile, ...]) -> None:
    for planned in changes:
        real = root.path(planned.path)
        if os.path.islink(real):
            raise ApplyError(f"{planned.path} is a symlink; strata-doctor never writes through one")
        if read_no_follow(str(real)) != planned.current:
            raise ApplyError(f"{planned.path} changed since the plan was made; run the fix again")


def _save_originals(root: Root, apply_dir: Path, changes: Tuple[PlannedFile, ...],
                    journal: Dict[str, Any]) -> None:
    originals = apply_dir / "originals"
    originals.mkdir(mode=0o700, exist_ok=True)
    for index, planned in enumerate(changes):
        real = root.path(planned.path)
        checkpoint("save-original", planned.path)
        entry: Dict[str, Any] = {
            "path": planned.path, "existed": planned.current is not None, "original": None,
            "mode": None, "uid": None, "gid": None, "new_mode": planned.mode,
            "new_sha256": hashlib.sha256(planned.content.encode()).hexdigest(),
            "temp": _host_temp(planned.path),
        }
        if planned.current is not None:
            info = os.lstat(real)
            entry.update(mode=stat.S_IMODE(info.st_mode), uid=info.st_uid, gid=info.st_gid,
                         original=f"originals/{index}")
            _write_durably(originals / str(index), planned.current, 0o600)
        journal["files"].append(entry)
        for directory in _missing_dirs(root, planned.path):
            if directory not in journal["dirs"]:
                journal["dirs"].append(directory)
    _fsync_dir(originals)


def _missing_dirs(root: Root, host_path: str) -> List[str]:
    missing: List[str] = []
    parent = host_path.rsplit("/", 1)[0]
    while parent and not os.path.isdir(root.path(parent)):
        missing.append(parent)
        parent = parent.rsplit("/", 1)[0]
    return list(reversed(missing))


def _write_files(root: Root, changes: Tuple[PlannedFile, ...], journal: Dict[str, Any]) -> Tuple[str, ...]:
    for directory in journal["dirs"]:
        checkpoint("mkdir", directory)
        real = root.path(directory)
        os.mkdir(real, 0o755)
        os.chmod(real, 0o755)  # umask must not narrow what systemd needs to read
        _fsync_dir(real.parent)
    owner = (0, 0) if privileged(root) else None
    for planned, entry in zip(changes, journal["files"]):
        keep = (entry["uid"], entry["gid"]) if entry["existed"] and owner else owner
        atomic_write(root, planned.path, planned.content.encode(), planned.mode, keep)
    return tuple(p.path for p in changes)


def atomic_write(root: Root, host_path: str, data: bytes, mode: int,
                 owner: Optional[Tuple[int, int]] = None) -> None:
    """Replace a file: temp file in the same directory, fsync, rename, fsync the directory."""
    real = root.path(host_path)
    temp = root.path(_host_temp(host_path))
    checkpoint("write-temp", host_path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temp, flags, 0o600)
    try:
        _write_all(fd, data)
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)
        checkpoint("fsync", host_path)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(temp)
        raise
    os.close(fd)
    if os.path.islink(real):
        _unlink_quietly(temp)
        raise ApplyError(f"{host_path} became a symlink; strata-doctor never writes through one")
    checkpoint("rename", host_path)
    os.rename(temp, real)
    checkpoint("fsync-dir", host_path)
    _fsync_dir(real.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        view = view[done:]


def _host_temp(host_path: str) -> str:
    head, _, name = host_path.rpartition("/")
    return f"{head}/.{name}{TEMP_SUFFIX}"


def _run_actions(root: Root, plan: Plan, apply_dir: Path,
                 journal: Dict[str, Any]) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    if not plan.actions:
        return (), ()
    if not privileged(root):
        why = f"writing into {plan.root}" if not root.live else "not root"
        return (), tuple(f"{a.described} ({why})" for a in plan.actions)
    taken: List[str] = []
    for action in plan.actions:
        entry = {"kind": action.kind, "target": action.target, "value": action.value,
                 "previous": _runtime_value(root, action.kind, action.target)}
        journal["actions"].append(entry)
        _write_journal(root, apply_dir, journal)  # the previous value is saved before the change
        checkpoint("action", action.target)
        _take_action(root, action.kind, action.target, action.value)
        taken.append(action.described)
    return tuple(taken), ()


def _runtime_path(kind: str, target: str) -> Optional[str]:
    if kind == "sysctl":
        return "/proc/sys/" + target.replace(".", "/")
    if kind == "write-sysfs":
        return target
    return None


def _runtime_value(root: Root, kind: str, target: str) -> Optional[str]:
    path = _runtime_path(kind, target)
    if path is None:
        return None
    try:
        return root.path(path).read_text().strip()
    except OSError:
        return None


def _take_action(root: Root, kind: str, target: str, value: str) -> None:
    path = _runtime_path(kind, target)
    if path is not None:
        with open(root.path(path), "w", encoding="ascii") as handle:
            handle.write(value + "\n")
        return
    argv = ["systemctl", "daemon-reload"] if kind == "daemon-reload" else ["systemctl", "restart", target]
    proc = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ApplyError(f"`{' '.join(argv)}` exited {proc.returncode}" + (f": {err[0]}" if err else ""))


# -- revert -------------------------------------------------------------------
def revert_last(root: Root, force: bool = False) -> RevertReport:
    """Undo the newest apply, finished or interrupted, from the state directory."""
    if root.live and os.geteuid() != 0:
        raise ApplyError("reverting on / needs root: run it with sudo")
    if not root.path(STATE_DIR).is_dir():
        return RevertReport((), (), (), (), False)
    with _locked(root):
        apply_dir = _last_apply_dir(root)
        if apply_dir is None:
            report = RevertReport((), (), (), (), False)
        else:
            report = _revert_dir(root, apply_dir, force)
    _drop_state_if_empty(root)
    return report


def _revert_dir(root: Root, apply_dir: Path, force: bool) -> RevertReport:
    journal = _read_journal(apply_dir)
    if journal is None:  # stopped before the journal: nothing had been changed yet
        _remove_tree(apply_dir)
        return RevertReport((), (), (), (), True)
    restored: List[str] = []
    removed: List[str] = []
    kept: List[str] = []
    for entry in reversed(journal["files"]):
        _unlink_quietly(root.path(entry["temp"]))
        outcome = _revert_file(root, apply_dir, entry, force)
        {"restored": restored, "removed": removed, "kept": kept}.get(outcome[0], []).append(outcome[1])
    for directory in reversed(journal["dirs"]):
        _rmdir_quietly(root.path(directory))
    actions = _revert_actions(root, journal)
    if kept:
        raise ApplyError("changed since the apply, left as they are (--force restores them anyway): "
                         + "; ".join(kept))
    _remove_tree(apply_dir)
    return RevertReport(tuple(restored), tuple(removed), (), actions, journal.get("status") != "applied")


def _revert_file(root: Root, apply_dir: Path, entry: Dict[str, Any], force: bool) -> Tuple[str, str]:
    path = entry["path"]
    real = root.path(path)
    if os.path.islink(real):
        return "kept", f"{path} (now a symlink)"
    current = read_no_follow(str(real))
    ours = current is not None and hashlib.sha256(current).hexdigest() == entry["new_sha256"]
    if not entry["existed"]:
        if current is None:
            return "", path
        if not (ours or force):
            return "kept", path
        checkpoint("revert-remove", path)
        os.unlink(real)
        _fsync_dir(real.parent)
        return "removed", path
    original = (apply_dir / entry["original"]).read_bytes()
    mode = os.lstat(real).st_mode if current is not None else None
    owner_ok = current is None or _owner_matches(real, entry)
    if current == original and mode is not None and stat.S_IMODE(mode) == entry["mode"] and owner_ok:
        return "", path  # the apply never reached this file
    if current is not None and current != original and not (ours or force):
        return "kept", path
    owner = (entry["uid"], entry["gid"]) if privileged(root) else None
    atomic_write(root, path, original, entry["mode"], owner)
    return "restored", path


def _owner_matches(real: Path, entry: Dict[str, Any]) -> bool:
    info = os.lstat(real)
    return (info.st_uid, info.st_gid) == (entry["uid"], entry["gid"])


def _revert_actions(root: Root, journal: Dict[str, Any]) -> Tuple[str, ...]:
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
            _take_action(root, kind, target, value)
        except (OSError, ApplyError, subprocess.SubprocessError) as exc:
            # The files are already back; a runtime step that fails is reported, not fatal.
            label += f" failed: {_describe(exc)}"
        done.append(label)
    return tuple(done)


# -- state directory ------------------------------------------------------------
class _locked:
    """``flock`` on the state directory's lock file, so two applies cannot interleave."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.fd: Optional[int] = None

    def __enter__(self) -> None:
        state = self.root.path(STATE_DIR)
        try:
            checkpoint("state-dir", STATE_DIR)
            state.mkdir(parents=True, exist_ok=True)
            os.chmod(state, 0o700)
            self.fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            _drop_state_if_empty(self.root)
            raise ApplyError(f"cannot use the state directory {STATE_DIR}: {_describe(exc)}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            self.fd = None
            raise ApplyError("another `strata-doctor fix` is running on this host (lock held on "
                             f"{STATE_DIR}/lock)") from None

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _applies(root: Root) -> Path:
    return root.path(f"{STATE_DIR}/applies")


def _apply_dirs(root: Root) -> List[Path]:
    try:
        names = sorted(n for n in os.listdir(_applies(root)) if n.isdigit())
    except OSError:
        return []
    return [_applies(root) / n for n in names]


def _last_apply_dir(root: Root) -> Optional[Path]:
    dirs = _apply_dirs(root)
    return dirs[-1] if dirs else None


def _new_apply_dir(root: Root) -> Path:
    dirs = _apply_dirs(root)
    number = int(dirs[-1].name) + 1 if dirs else 1
    path = _applies(root) / f"{number:04d}"
    path.mkdir(mode=0o700, parents=True)
    return path


def _host(apply_dir: Path) -> str:
    return f"{STATE_DIR}/applies/{apply_dir.name}"


def _read_journal(apply_dir: Path) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads((apply_dir / "journal.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == JOURNAL_SCHEMA else None


def _write_journal(root: Root, apply_dir: Path, journal: Dict[str, Any]) -> None:
    checkpoint("journal", f"{STATE_DIR}/journal")
    text = json.dumps(journal, indent=2, sort_keys=True) + "\n"
    temp = apply_dir / "journal.json.tmp"
    _write_durably(temp, text.encode(), 0o600)
    os.rename(temp, apply_dir / "journal.json")
    _fsync_dir(apply_dir)


def _drop_state_if_empty(root: Root) -> None:
    if _apply_dirs(root):
        return
    state = root.path(STATE_DIR)
    _rmdir_quietly(_applies(root))
    _unlink_quietly(state / "lock")
    _rmdir_quietly(state)
    # /var/lib and /var exist on every real host; in a bare tree the apply made them.
    for parent in ("/var/lib", "/var"):
        _rmdir_quietly(root.path(parent))


def _write_durably(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _rmdir_quietly(path: Path) -> None:
    try:
        os.rmdir(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise


def _remove_tree(path: Path) -> None:
    for child in _walk_bottom_up(path):
        if child.is_dir() and not child.is_symlink():
            child.rmdir()
        else:
            child.unlink()
    path.rmdir()
    _fsync_dir(path.parent)


def _walk_bottom_up(path: Path) -> Iterator[Path]:
    for child in sorted(path.iterdir()):
        if child.is_dir() and not child.is_symlink():
            yield from _walk_bottom_up(child)
        yield child
