"""The journal of one apply: ``applies/NNNN/journal.json`` in the state folder.

It is written, fsynced, before the apply changes anything, again before each runtime
action (with the value it replaces) and once more when the apply is done; a revert marks
it ``reverting`` before it starts. On disk it is ``strata-doctor/journal/v1``: JSON with
sorted keys and an indent of 2, read into :class:`Journal` and written back from it.

The state folder is part of the tree, and under ``--root`` the tree is input: a journal
whose entries point anywhere but where an apply writes is treated like no journal at all
(an apply killed before it wrote one).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from strata_doctor.fix import steps
from strata_doctor.fix.lock import Lock, apply_names
from strata_doctor.fix.state import STATE_DIR
from strata_doctor.fix.steps import ApplyError, open_below, read_fd, write_at
from strata_doctor.inroot import InRoot
from strata_doctor.root import Root

JOURNAL_SCHEMA = "strata-doctor/journal/v1"
INTERRUPTED = "an earlier apply did not finish: run `strata-doctor fix --revert` first"
REVERT_INTERRUPTED = "an earlier revert did not finish: run `strata-doctor fix --revert` again"
_ORIGINAL = re.compile(r"^originals/\d+$")


@dataclass(frozen=True)
class FileEntry:
    """One file an apply writes, as it was before."""

    path: str
    """The host path the plan names."""
    real: Optional[str]
    """The host path with every folder resolved inside the root; None in a journal without it."""
    existed: bool
    """Whether there was a file before the apply."""
    original: Optional[str]
    """Where its saved bytes are, relative to the apply's folder (``originals/N``); None when new."""
    mode: Optional[int]
    """Its permission bits before; None when new."""
    uid: Optional[int]
    """Its owner before; None when new."""
    gid: Optional[int]
    """Its group before; None when new."""
    new_mode: Optional[int]
    """The permission bits the apply gives it (never read back)."""
    new_sha256: str
    """The SHA-256 of the bytes the apply writes: a file that still has them is ours."""
    temp: str
    """The host path of the temporary file it is written through."""

    @property
    def where(self) -> str:
        """The resolved host path the revert works on."""
        return self.real if self.real is not None else self.path

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> FileEntry:
        """The entry as read (values are not converted, so it is written back as it was)."""
        return cls(data["path"], data.get("real"), data["existed"], data["original"], data["mode"],
                   data["uid"], data["gid"], data.get("new_mode"), data["new_sha256"], data["temp"])

    def to_json(self) -> Dict[str, Any]:
        """The entry as the journal holds it."""
        data: Dict[str, Any] = {
            "path": self.path, "existed": self.existed, "original": self.original, "mode": self.mode,
            "uid": self.uid, "gid": self.gid, "new_mode": self.new_mode, "new_sha256": self.new_sha256,
            "temp": self.temp,
        }
        if self.real is not None:
            data["real"] = self.real
        return data


@dataclass(frozen=True)
class ActionEntry:
    """One runtime action an apply took."""

    kind: str
    """``sysctl``, ``write-sysfs``, ``daemon-reload`` or ``restart-unit``."""
    target: str
    """The key, sysfs path or unit it acts on."""
    value: str
    """The value it set."""
    previous: Optional[str]
    """The value before, read just before the change; None when there is none to put back."""

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> ActionEntry:
        """The entry as read."""
        return cls(data["kind"], data["target"], data["value"], data.get("previous"))

    def to_json(self) -> Dict[str, Any]:
        """The entry as the journal holds it."""
        return {"kind": self.kind, "target": self.target, "value": self.value, "previous": self.previous}


@dataclass(frozen=True)
class Journal:
    """What one apply did, in the order it did it: enough to undo it byte for byte."""

    status: Optional[str]
    """``applying``, ``applied`` or ``reverting``."""
    root: Optional[str]
    """The root the plan was made for, as the plan names it; None in a journal without it."""
    files: Tuple[FileEntry, ...]
    """The files it writes, in order."""
    dirs: Tuple[str, ...]
    """The folders it creates, outermost first (resolved host paths)."""
    actions: Tuple[ActionEntry, ...] = ()
    """The runtime actions it took, in order."""
    was: Optional[str] = None
    """While reverting: the status before the revert began; None before that."""

    @property
    def finished(self) -> bool:
        """Whether the apply being undone had finished (status before any revert)."""
        return (self.was if self.was is not None else self.status) == "applied"

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> Journal:
        """The journal as read; ``data`` has passed :func:`_journal_problem`."""
        return cls(data.get("status"), data.get("root"), tuple(FileEntry.from_json(e) for e in data["files"]),
                   tuple(data["dirs"]), tuple(ActionEntry.from_json(e) for e in data.get("actions", [])),
                   data.get("was"))

    def to_json(self) -> Dict[str, Any]:
        """The journal as written."""
        data: Dict[str, Any] = {
            "schema": JOURNAL_SCHEMA, "status": self.status,
            "files": [e.to_json() for e in self.files], "dirs": list(self.dirs),
            "actions": [e.to_json() for e in self.actions],
        }
        if self.root is not None:
            data["root"] = self.root
        if self.was is not None:
            data["was"] = self.was
        return data


def read_journal(state_fd: int, name: str) -> Optional[Journal]:
    """The journal of apply ``name``; None when it has none an apply wrote.

    A journal that passes the checks but lacks a field is a ``KeyError`` (and the like),
    which the revert reports as a journal strata-doctor did not write."""
    data = _load(state_fd, name)
    return Journal.from_json(data) if data is not None else None


def write_journal(apply_fd: int, journal: Journal) -> None:
    """Replace the journal in the apply's folder, fsynced: a new file under a temporary name
    renamed over it (:func:`~strata_doctor.fix.steps.write_at`); a hard link there is refused."""
    steps.checkpoint("journal", f"{STATE_DIR}/journal")
    text = json.dumps(journal.to_json(), indent=2, sort_keys=True) + "\n"
    write_at(apply_fd, "journal.json", text.encode(), 0o600)
    os.fsync(apply_fd)


def _load(state_fd: int, name: str) -> Optional[Dict[str, Any]]:
    """The journal's JSON, when it is one an apply could have written."""
    try:
        fd = open_below(state_fd, ["applies", name, "journal.json"])
    except OSError:
        return None
    try:
        data = json.loads(read_fd(fd).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("schema") != JOURNAL_SCHEMA:
        return None
    if _journal_problem(data) is not None:
        return None  # not one an apply wrote: treated like an apply killed before its journal
    return data


def _host(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("/") and "\0" not in value


def _journal_problem(journal: Dict[str, Any]) -> Optional[str]:
    """Why a journal's entries would point anywhere but where an apply writes; None when
    they do not."""
    files, dirs = journal.get("files"), journal.get("dirs")
    if not isinstance(files, list) or not isinstance(dirs, list) or not all(_host(d) for d in dirs):
        return "files and dirs must be lists of host paths"
    for entry in files:
        problem = _entry_problem(entry)
        if problem is not None:
            return problem
    return None


def _entry_problem(entry: Any) -> Optional[str]:
    if not isinstance(entry, dict) or not all(_host(entry.get(k)) for k in ("path", "temp")) \
            or not _host(entry.get("real", entry.get("path"))):
        return f"bad file entry {entry!r:.80}"
    if entry.get("existed") and not (isinstance(entry.get("original"), str)
                                     and _ORIGINAL.match(entry["original"])):
        return f"bad original {entry.get('original')!r:.80}"
    return None


# -- an apply or revert that did not finish --------------------------------------
def unfinished(state_fd: int) -> Optional[str]:
    """Why the newest apply in the state folder blocks a new one (it did not finish, or its
    revert did not); None when it finished or there is none."""
    names = apply_names(state_fd)
    if not names:
        return None
    status = (_load(state_fd, names[-1]) or {}).get("status")
    if status == "applied":
        return None
    return REVERT_INTERRUPTED if status == "reverting" else INTERRUPTED


def interrupted(root: Root) -> bool:
    """Whether the newest apply recorded under the root did not finish (or is being undone)."""
    try:
        with InRoot(root.base) as tree:
            state = tree.open_dir(STATE_DIR)
    except OSError:
        return False
    try:
        return unfinished(state) is not None
    finally:
        os.close(state)


def refuse_unfinished(lock: Lock) -> None:
    """Under the lock: refuse to start over an apply or revert that did not finish."""
    if lock.held:
        why = unfinished(lock.state_fd)
        if why is not None:
            raise ApplyError(why)
