"""Replaying a report bundle: unpack it safely and verify it against its manifest.

A bundle is host input from anyone: it must be a regular file; every member's header is
checked before anything is written (names, kinds, links, how many, how much), files are
written before links so none is written through one, and the unpacked tree must be exactly
what the manifest lists.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import hashlib
import json
import os
import posixpath
import shutil
import signal
import stat
import tarfile
import tempfile
from pathlib import Path
from types import FrameType
from typing import IO, Any, Dict, Iterator, List, Optional, Protocol

from strata_doctor.output.bundle import TOP
from strata_doctor.output.files import KINDS

MAX_MEMBERS = 50_000  # a 4-socket server's bundle holds 1,103: refuse a flood of headers
MAX_UNPACKED = 256 * 2**20  # the tar stream, headers and data; a bundle is well under 1 MiB
DOCUMENTS = ("manifest.json", "report.md", "check.json")  # at the top, not listed: files only
REMOVE_ON = (signal.SIGTERM, signal.SIGINT)
"""Signals that end a replay: its folder goes first (atexit handlers do not run on them)."""

_SCRATCH: List[str] = []  # the folders this process unpacked into and has not removed
_TAKEN: Dict[int, Any] = {}  # signal -> the handler a replay took it from


def unpack(path: str | os.PathLike[str], on_signal: bool = False) -> Path:
    """Unpack a bundle into a temporary folder (removed at exit) and return its root.

    Refuses, with ValueError, anything a bundle never holds: a path that is no regular
    file, absolute names, ``..``, devices, FIFOs, hard links, links that are absolute or
    lead outside the bundle, more than :data:`MAX_MEMBERS` members or a tar stream of more
    than :data:`MAX_UNPACKED` bytes. With ``on_signal`` (the command line), SIGTERM and
    SIGINT remove the folder and end the process by that signal, until :func:`release`.
    """
    with _open_regular(path) as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"  # as report --bundle writes it; else a plain tar
        raw.seek(0)
        stream = _Bounded(gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw, MAX_UNPACKED)
        try:
            with tarfile.open(fileobj=stream, mode="r:") as tar:
                members = _read_headers(tar)
                target = _scratch_folder(on_signal)
                _extract(tar, members, target)
        except tarfile.TarError as exc:
            # The first line of tarfile's message only.
            first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
            raise ValueError(f"not a readable tar archive ({first})") from None
    top = target / TOP
    if not (top / "manifest.json").is_file():
        raise ValueError(f"no {TOP}/manifest.json in the archive")
    verify_manifest(top)
    return top


def release() -> None:
    """The replay is over: remove its folders now and give SIGTERM and SIGINT back to the
    handlers :func:`unpack` took them from."""
    _remove_scratch()
    for signum, previous in list(_TAKEN.items()):
        with contextlib.suppress(ValueError):  # only the main thread sets handlers
            signal.signal(signum, previous)
            del _TAKEN[signum]


@contextlib.contextmanager
def _open_regular(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """The bundle, opened without waiting (a FIFO opens at once) and refused unless it is a
    regular file: ``/dev/zero`` never ends, a FIFO may never be written."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in KINDS if test(mode)), "not a file")
            raise ValueError(f"{kind}, not a regular file")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


class _Stream(Protocol):
    """What the archive is read through: the file, or gzip over it."""

    def read(self, size: int = -1, /) -> bytes: ...
    def seek(self, pos: int, whence: int = os.SEEK_SET, /) -> int: ...
    def tell(self) -> int: ...
    def close(self) -> None: ...


class _Bounded:
    """A tar stream read through this ends, with ValueError, past ``limit`` bytes: headers
    count too (tarfile reads a pax header whole, whatever size it claims)."""

    def __init__(self, inner: _Stream, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    def read(self, size: int = -1) -> bytes:
        room = self.limit - self.inner.tell()
        data = self.inner.read(room + 1 if size < 0 or size > room else size)
        self._within()
        return data

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET and pos > self.limit:
            raise ValueError(_too_big())
        done = self.inner.seek(pos, whence)
        self._within()
        return done

    def tell(self) -> int:
        return self.inner.tell()

    def write(self, data: bytes) -> int:
        raise OSError("a bundle is read, never written")

    def close(self) -> None:
        self.inner.close()

    def _within(self) -> None:
        if self.inner.tell() > self.limit:
            raise ValueError(_too_big())


def _too_big() -> str:
    return f"unpacks to more than {MAX_UNPACKED // 2**20} MiB"


def _read_headers(tar: tarfile.TarFile) -> List[tarfile.TarInfo]:
    """Every member's header, each checked as it is read; the count and the sizes are
    bounded while reading, so a flood of members stops at the first one over the bound."""
    members: List[tarfile.TarInfo] = []
    total = 0
    while True:
        member = tar.next()
        if member is None:
            return members
        if len(members) >= MAX_MEMBERS:
            raise ValueError(f"holds more than {MAX_MEMBERS:,} members")
        _validate_member(member)
        total += member.size
        if total > MAX_UNPACKED:
            raise ValueError(_too_big())
        members.append(member)


def _scratch_folder(on_signal: bool) -> Path:
    """A new temporary folder, removed at exit; with ``on_signal`` also on SIGTERM and SIGINT.

    The signals wait while the folder is made and recorded, so none can end the process
    between the two and leave the folder behind.
    """
    block = getattr(signal, "pthread_sigmask", None)
    held = block(signal.SIG_BLOCK, REMOVE_ON) if block is not None and on_signal else None
    try:
        _SCRATCH.append(tempfile.mkdtemp(prefix="strata-doctor-bundle-"))
        if on_signal:
            _take_signals()
    finally:
        if block is not None and held is not None:
            block(signal.SIG_SETMASK, held)
    return Path(_SCRATCH[-1])


def _take_signals() -> None:
    for signum in REMOVE_ON:
        previous = signal.getsignal(signum)
        # Ignored by whoever started us (a background job ignores SIGINT): it stays ignored.
        # None: a handler not set from Python, which could not be given back.
        if signum in _TAKEN or previous in (signal.SIG_IGN, None):
            continue
        with contextlib.suppress(ValueError):  # only the main thread sets handlers
            signal.signal(signum, _end_by_signal)
            _TAKEN[signum] = previous


def _end_by_signal(signum: int, frame: Optional[FrameType]) -> None:
    """Remove the folders, then end as the signal would have: killed by it (status 143 for
    SIGTERM, 130 for SIGINT in a shell), never an exit code that reads as a verdict."""
    _remove_scratch()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # pragma: no cover - the signal ends the process first


def _remove_scratch() -> None:
    while _SCRATCH:
        shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)


atexit.register(_remove_scratch)  # once: this module is imported only to replay a bundle


def verify_manifest(top: Path) -> None:
    """Refuse, with ValueError naming the member, an unpacked bundle that is not the one
    written: a file the manifest lists that is missing or differs in size or sha256, a
    link with another target, a folder that is not one, or a file, folder or link at any
    level that the manifest does not list. The documents at the top (``manifest.json``,
    ``report.md``, ``check.json``) are not listed, must be regular files, and no replay
    reads them."""
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
    except RecursionError:  # the JSON decoder recurses once per level: "[[[[..."
        raise ValueError(f"{TOP}/manifest.json is nested too deeply to be a manifest") from None
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
    elif kind != "dir" or found.is_symlink() or not found.is_dir():
        raise ValueError(f"member {member!r} is not the {kind!r} manifest.json lists")


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
    """Refuse a member the manifest does not list, at every level and of every kind (a
    file, a folder, a link). Only the documents at the top are not listed, as files."""
    # Deepest first, so the member named is the one added, not a folder made to hold it; a
    # link to a folder is in dirs, never followed.
    for folder, dirs, files in os.walk(top, topdown=False):
        below = Path(folder).relative_to(top).as_posix()
        prefix = "" if below == "." else f"/{below}"
        for name in sorted(files + dirs):
            path = f"{prefix}/{name}"
            if path in listed or (not prefix and name in DOCUMENTS and _is_plain_file(top / name)):
                continue
            raise ValueError(f"member '{TOP}{path}' is not listed in manifest.json")


def _is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


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
            _create(dest, member.name, source.read() if source is not None else b"")
    for member in links:
        dest = target / member.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        _check_inside(base, dest.parent)
        if os.path.lexists(dest):
            raise ValueError(f"member {member.name!r} appears twice")
        os.symlink(member.linkname, dest)


def _create(dest: Path, name: str, data: bytes) -> None:
    """Write a member's file, created new (``O_EXCL``, no link followed): a name listed twice
    is refused, never written over."""
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    except FileExistsError:
        raise ValueError(f"member {name!r} appears twice") from None
    os.fchmod(fd, 0o644)  # the umask must not narrow it: the replay only reads it
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _check_inside(base: str, folder: Path) -> None:
    real = os.path.realpath(folder)
    if real != base and not real.startswith(base + os.sep):
        raise ValueError(f"{folder} resolves outside the bundle")
