"""The state folder ``/var/lib/strata-doctor``: its records, and removing it and what the
tool made for it.

Every path here is the state folder's *resolved* host path (:func:`state_path`): under a
root whose ``var`` links to ``/``, the state folder is ``/lib/strata-doctor``, and the
folders made for it (``made``) and removed with it are named as they are on disk.

While those folders go, a record in the folder above the topmost of them names it
(``.strata-doctor-state.drop``), so a kill between two removals leaves something the next
run finishes (:func:`finish_drop`), never an empty ``var/`` nobody knows about.

A forgotten apply is first renamed out of the applies (``applies/.NNNN.forgotten``, one
atomic step), then removed one file at a time (:func:`forget_apply`): a kill leaves the
apply whole, with every saved original its journal names, or forgotten, never a journal
that names originals that are gone.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import Optional, Tuple

from strata_doctor.fix import steps
from strata_doctor.fix.steps import DIR_FLAGS, lstat_at, read_at, unlink_at, write_at
from strata_doctor.inroot import InRoot

STATE_DIR = "/var/lib/strata-doctor"
DROP_RECORD = ".strata-doctor-state.drop"
FORGOTTEN = re.compile(r"^\.\d+\.forgotten$")
"""The name of an apply being forgotten, below ``applies/``."""


def state_path(tree: InRoot) -> str:
    """The state folder's host path with every link resolved inside the root (its missing
    folders as written); ``OSError`` for a loop or a file in a folder's place."""
    return tree.resolve(STATE_DIR)


def _parent(path: str) -> str:
    return path.rpartition("/")[0] or "/"


def made_folder(record: Optional[bytes], state: str) -> Optional[str]:
    """The topmost folder made for the state folder at ``state`` (resolved), from its
    record; None when the record names no folder on the way to it."""
    made = record.decode("utf-8", "replace").strip().rstrip("/") if record else ""
    if made.startswith("/") and (made == state or state.startswith(made + "/")):
        return made
    return None  # never the root itself, nor a folder off the state folder's way


def rmdir_chain(tree: InRoot, state: str, made: str) -> Optional[str]:
    """Remove the state folder ``state`` and its parents up to ``made``, while empty; the
    folder where it stopped (not empty), or None."""
    folder = state
    while True:
        head, _, name = folder.rpartition("/")
        if not _rmdir_if_empty(tree, head or "/", name):
            return folder
        if folder == made or not head:
            return None
        folder = head


def _rmdir_if_empty(tree: InRoot, folder: str, name: str) -> bool:
    """Remove ``folder/name`` if it is there; False when it is not empty."""
    try:
        parent = tree.open_dir(folder)
    except FileNotFoundError:
        return True
    try:
        os.rmdir(name, dir_fd=parent)
        os.fsync(parent)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        if exc.errno != errno.ENOENT:
            raise
    finally:
        os.close(parent)
    return True


def write_drop_record(tree: InRoot, made: str) -> str:
    """Record, in the folder above ``made``, that ``made`` and everything below it are being
    removed; that folder."""
    folder = _parent(made)
    parent = tree.open_dir(folder)
    try:
        write_at(parent, DROP_RECORD, (made + "\n").encode(), 0o600)
        os.fsync(parent)
    finally:
        os.close(parent)
    return folder


def remove_drop_record(tree: InRoot, folder: str) -> None:
    """Forget the removal recorded in ``folder``: it is done."""
    try:
        parent = tree.open_dir(folder)
    except FileNotFoundError:
        return
    try:
        unlink_at(parent, DROP_RECORD)
        os.fsync(parent)
    finally:
        os.close(parent)


def find_drop_record(tree: InRoot, state: str) -> Optional[Tuple[str, str]]:
    """(folder, topmost made folder) of a removal of the state folder at ``state``
    (resolved) that was cut short; the record names a folder right below the one it is in."""
    folder = state
    while folder != "/":
        folder = _parent(folder)
        made = _record_in(tree, folder, state)
        if made is not None and _parent(made) == folder:
            return folder, made
    return None


def _record_in(tree: InRoot, folder: str, state: str) -> Optional[str]:
    """The folder a removal's record in ``folder`` names; None when there is none."""
    try:
        parent = tree.open_dir(folder)
    except OSError:
        return None
    try:
        return made_folder(read_at(parent, DROP_RECORD), state)
    except OSError:
        return None
    finally:
        os.close(parent)


def finish_drop(tree: InRoot) -> None:
    """Finish a removal of the state folder that a kill cut short (no state folder left)."""
    try:
        state = state_path(tree)
    except OSError:
        return  # no state folder can be there, so none was being removed
    found = find_drop_record(tree, state)
    if found is not None and rmdir_chain(tree, state, found[1]) is None:
        remove_drop_record(tree, found[0])


# -- forgetting an apply ------------------------------------------------------------
def forget_apply(applies: int, name: str) -> None:
    """Forget apply ``name`` below the descriptor ``applies``: renamed out of the applies in
    one step, then removed (with any other apply a kill left half forgotten)."""
    remove_forgotten(applies)  # a leftover of the same name would block the rename
    os.rename(name, f".{name}.forgotten", src_dir_fd=applies, dst_dir_fd=applies)
    os.fsync(applies)
    remove_forgotten(applies)


def remove_forgotten(applies: int) -> None:
    """Remove what is left of applies being forgotten; nothing else below ``applies``."""
    for name in sorted(os.listdir(applies)):
        if FORGOTTEN.match(name):
            _remove_tree(applies, name, f"{STATE_DIR}/applies/{name}")
    os.fsync(applies)


def _remove_tree(dir_fd: int, name: str, shown: str) -> None:
    """Remove ``name`` below ``dir_fd`` and all it holds, one checkpoint before each
    removal, following no link."""
    info = lstat_at(dir_fd, name)
    if info is None:
        return
    if stat.S_ISDIR(info.st_mode):
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        try:
            for child in sorted(os.listdir(fd)):
                _remove_tree(fd, child, f"{shown}/{child}")
        finally:
            os.close(fd)
        steps.checkpoint("forget-file", shown)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        steps.checkpoint("forget-file", shown)
        os.unlink(name, dir_fd=dir_fd)
