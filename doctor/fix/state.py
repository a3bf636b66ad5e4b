"""Removing the state folder ``/var/lib/strata-doctor`` and the folders made for it.

While those folders go, a record in the folder above the topmost of them names it
(``.strata-doctor-state.drop``), so a kill between two removals leaves something the next
run finishes (:func:`finish_drop`), never an empty ``var/`` nobody knows about.
"""

from __future__ import annotations

import errno
import os
from typing import Optional, Tuple

from strata_doctor.fix.steps import read_at, unlink_at, write_at
from strata_doctor.inroot import InRoot

STATE_DIR = "/var/lib/strata-doctor"
DROP_RECORD = ".strata-doctor-state.drop"


def made_folder(record: Optional[bytes]) -> Optional[str]:
    """The topmost folder made for the state folder, from its record; None when unknown."""
    made = record.decode("utf-8", "replace").strip() if record else ""
    if made == STATE_DIR or (made.startswith("/") and (STATE_DIR + "/").startswith(made.rstrip("/") + "/")):
        return made
    return None


def rmdir_chain(tree: InRoot, made: str) -> Optional[str]:
    """Remove the state folder and its parents up to ``made``, while empty; the folder where
    it stopped (not empty), or None."""
    folder = STATE_DIR
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


def write_drop_record(tree: InRoot, folder: str, made: str) -> None:
    """Record in ``folder`` that ``made`` and everything below it are being removed."""
    parent = tree.open_dir(folder)
    try:
        write_at(parent, DROP_RECORD, (made + "\n").encode(), 0o600)
        os.fsync(parent)
    finally:
        os.close(parent)


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


def find_drop_record(tree: InRoot) -> Optional[Tuple[str, str]]:
    """(folder, topmost made folder) of a removal of the state folder that was cut short."""
    folder = STATE_DIR.rpartition("/")[0]
    while folder:
        made = _record_in(tree, folder)
        if made is not None and made.rpartition("/")[0] in (folder, "") and made != STATE_DIR:
            return folder, made
        folder = folder.rpartition("/")[0]
    made = _record_at(tree.fd)
    return ("/", made) if made is not None and made.count("/") == 1 and made != STATE_DIR else None


def _record_in(tree: InRoot, folder: str) -> Optional[str]:
    """The folder a removal's record in ``folder`` names; None when there is none."""
    try:
        parent = tree.open_dir(folder)
    except OSError:
        return None
    try:
        return _record_at(parent)
    finally:
        os.close(parent)


def _record_at(dir_fd: int) -> Optional[str]:
    try:
        return made_folder(read_at(dir_fd, DROP_RECORD))
    except OSError:
        return None


def finish_drop(tree: InRoot) -> None:
    """Finish a removal of the state folder that a kill cut short (no state folder left)."""
    found = find_drop_record(tree)
    if found is None:
        return
    if rmdir_chain(tree, found[1]) is None:
        remove_drop_record(tree, found[0])
