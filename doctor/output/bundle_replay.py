"""Replaying a report bundle: unpack it safely and verify it against its manifest.

A bundle is host input from anyone: every member is checked before anything is written
(names, kinds, links, total size), files are written before links so none is written
through one, and the unpacked tree must be exactly what the manifest lists.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from strata_doctor.output.bundle import TOP

MAX_UNPACKED = 256 * 2**20  # a bundle is well under 1 MiB; refuse archive bombs


def unpack(path: str | os.PathLike[str]) -> Path:
    """Unpack a bundle into a temporary folder (removed at exit) and return its root.

    Refuses, with ValueError, anything a bundle never holds: absolute names, ``..``,
    devices, FIFOs, hard links, links that are absolute or lead outside the bundle.
    """
    try:
        with tarfile.open(path, mode="r:*") as tar:
            members = tar.getmembers()
            _validate(members)
            target = Path(tempfile.mkdtemp(prefix="strata-doctor-bundle-"))
            atexit.register(shutil.rmtree, target, ignore_errors=True)
            _extract(tar, members, target)
    except tarfile.TarError as exc:
        # tarfile lists every compression it tried on separate lines: keep the first.
        first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
        raise ValueError(f"not a readable tar archive ({first})") from None
    top = target / TOP
    if not (top / "manifest.json").is_file():
        raise ValueError(f"no {TOP}/manifest.json in the archive")
    verify_manifest(top)
    return top


def verify_manifest(top: Path) -> None:
    """Refuse, with ValueError naming the member, an unpacked bundle that is not the one
    written: a file the manifest lists that is missing or differs in size or sha256, a
    link with another target, or a file or link below a folder that the manifest does not
    list. The documents at the top (``manifest.json``, ``report.md``, ``check.json``) are
    not listed, and no replay reads them."""
    listed = _manifest_entries(top)
    base = os.path.realpath(top)
    for path, row in listed.items():
        _verify_entry(top, base, path, row)
    _refuse_unlisted(top, listed)


def _manifest_entries(top: Path) -> Dict[Any, Any]:
    """The manifest's entries by path, as written (not yet checked to be paths)."""
    try:
        rows = json.loads((top / "manifest.json").read_bytes())["entries"]
        return {row["path"]: row for row in rows}
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, not UTF-8, no entries
        raise ValueError(f"{TOP}/manifest.json lists no entries ({type(exc).__name__})") from None


def _verify_entry(top: Path, base: str, path: Any, row: Any) -> None:
    """Refuse a manifest row that names no path inside the bundle, or whose member is not
    what the row says."""
    parts = str(path).split("/")
    if not isinstance(path, str) or parts[0] or ".." in parts or not isinstance(row, dict):
        raise ValueError(f"{TOP}/manifest.json names {path!r}, which is no path in the bundle")
    member, found = TOP + path, top / path.lstrip("/")
    real = os.path.realpath(found)
    if real != base and not real.startswith(base + os.sep):
        raise ValueError(f"member {member!r} resolves outside the bundle")
    kind = row.get("kind")
    if kind == "link":
        _verify_link(member, found, row)
    elif kind == "file":
        _verify_file(member, found, row)


def _verify_link(member: str, found: Path, row: Dict[str, Any]) -> None:
    if not found.is_symlink() or os.readlink(found) != row.get("target"):
        raise ValueError(f"member {member!r} is not the link manifest.json lists "
                         f"(to {row.get('target')!r}): changed after the bundle was written")


def _verify_file(member: str, found: Path, row: Dict[str, Any]) -> None:
    if found.is_symlink() or not found.is_file():
        raise ValueError(f"member {member!r} is listed in manifest.json but missing")
    data = found.read_bytes()
    if len(data) != row.get("size") or hashlib.sha256(data).hexdigest() != row.get("sha256"):
        raise ValueError(f"member {member!r} does not match its size and sha256 in manifest.json: "
                         "changed after the bundle was written")


def _refuse_unlisted(top: Path, listed: Dict[Any, Any]) -> None:
    """Refuse a file or link below a folder of the bundle that the manifest does not list."""
    for folder, dirs, files in os.walk(top):
        below = Path(folder).relative_to(top).as_posix()
        if below == ".":
            continue  # the documents
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            if f"/{below}/{name}" not in listed:
                raise ValueError(f"member '{TOP}/{below}/{name}' is not listed in manifest.json")


def _validate(members: List[tarfile.TarInfo]) -> None:
    total = 0
    for member in members:
        _validate_member(member)
        total += member.size
        if total > MAX_UNPACKED:
            raise ValueError(f"unpacks to more than {MAX_UNPACKED // 2**20} MiB")


def _validate_member(member: tarfile.TarInfo) -> None:
    """Refuse a member a bundle never holds: an unsafe or outside name, another kind of
    file than a file, a folder or a symlink, a link that leads out."""
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or "\\" in name:
        raise ValueError(f"unsafe member name {name!r}")
    if parts[0] != TOP:
        raise ValueError(f"member {name!r} is outside {TOP}/")
    if not (member.isfile() or member.isdir() or member.issym()):
        raise ValueError(f"member {name!r} is not a file, folder or symlink")
    if member.issym():
        _validate_link(member)


def _validate_link(member: tarfile.TarInfo) -> None:
    target = member.linkname
    if target.startswith("/"):
        raise ValueError(f"link {member.name!r} is absolute ({target})")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), target))
    if resolved != TOP and not resolved.startswith(TOP + "/"):
        raise ValueError(f"link {member.name!r} leads outside the bundle ({target})")


def _extract(tar: tarfile.TarFile, members: List[tarfile.TarInfo], target: Path) -> None:
    base = os.path.realpath(target)
    links = []
    for member in members:
        dest = target / member.name
        _check_inside(base, dest.parent)
        if member.isdir():
            dest.mkdir(parents=True, exist_ok=True)
        elif member.issym():
            links.append(member)  # after the files, so none is written through a link
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            data = source.read() if source is not None else b""
            dest.write_bytes(data)
            os.chmod(dest, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    for member in links:
        dest = target / member.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        _check_inside(base, dest.parent)
        if os.path.lexists(dest):
            raise ValueError(f"member {member.name!r} appears twice")
        os.symlink(member.linkname, dest)


def _check_inside(base: str, folder: Path) -> None:
    real = os.path.realpath(folder)
    if real != base and not real.startswith(base + os.sep):
        raise ValueError(f"{folder} resolves outside the bundle")
