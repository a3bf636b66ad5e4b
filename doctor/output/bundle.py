"""Report bundles: a replayable, redacted archive of exactly what the checks read.

``strata-doctor report --bundle FILE.tar.gz`` writes one; ``strata-doctor check --bundle
FILE`` (or ``--root`` on the unpacked folder) replays it. The archive holds a single folder,
:data:`TOP`, laid out as a captured root (docs/capture-layout.md)::

    strata-doctor-bundle/manifest.json      every entry: size, sha256; what was unreadable, absent
    strata-doctor-bundle/report.md          the Markdown report
    strata-doctor-bundle/check.json         the check JSON
    strata-doctor-bundle/sys/..., proc/...  the files the checks read, as read
    strata-doctor-bundle/etc/strata-doctor.yaml       the engine settings in effect
    strata-doctor-bundle/.strata-doctor/commands/...  command captures

The entries come from the Root's records (``reads``, ``commands``), never from a list
kept here, so a new check is bundled without more work. Archives are deterministic:
sorted entries, mtime 0, uid/gid 0, no names, a gzip header without time or file name.
"""

from __future__ import annotations

import atexit
import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from strata_doctor.config import CONFIG_SOURCE, DEFAULT_CONFIG, EngineConfig
from strata_doctor.facts.processes import engine_cmdline
from strata_doctor.output.redact import Redactor
from strata_doctor.root import CAPTURE_DIR, COMMANDS_DIR, STAT_FILE, CommandResult, FileStat, Root

TOP = "strata-doctor-bundle"
SCHEMA = "strata-doctor/bundle/v1"
KEEP_ENVIRON = (b"container",)  # systemd's container marker, read to detect containers
PROCESS_CMDLINE = re.compile(r"/proc/\d+/cmdline")
IDENTITY_PASSWD = "/etc/passwd"
MAX_LINK_HOPS = 40  # as the kernel's own limit on nested symlinks
MAX_UNPACKED = 256 * 2**20  # a bundle is well under 1 MiB; refuse archive bombs


@dataclass(frozen=True)
class Entry:
    """One archive member, before redaction."""

    path: str
    """Host path (``/sys/...``), or a path under the capture folder."""
    kind: str
    """``file``, ``dir`` or ``link``."""
    data: bytes = b""
    """Contents of a file."""
    target: str = ""
    """Target of a link, relative to the link's folder."""


@dataclass(frozen=True)
class Capture:
    """What a run read, ready to archive: entries plus what could not be read."""

    entries: Tuple[Entry, ...]
    """Files, folders and links, sorted by path."""
    unreadable: Tuple[Tuple[str, str], ...]
    """(host path or ``$ command``, reason) for what exists and could not be read: the
    report's own list (``report.unreadable_items``), so both say the same count."""
    listings: Tuple[Tuple[str, int, int], ...]
    """(folder, entries on the host, entries nothing was read below): every name is kept,
    the ones nothing was read below as empty stand-ins, so a replay lists the same names."""
    absent: Tuple[Tuple[str, str], ...] = ()
    """(host path or ``$ command``, reason) for paths looked for and not on the host, and
    programs not found: answers about the host, not read failures."""
    not_read: Tuple[Tuple[str, str], ...] = ()
    """(host path, note) for files only stat'ed or walked: bundled empty, never read."""


@dataclass(frozen=True)
class BundleInfo:
    """What was written."""

    path: str
    """The archive's path."""
    size: int
    """Its size in bytes."""
    entries: int
    """Members in the archive."""
    unreadable: int
    """Paths and commands that could not be read, as the manifest lists them."""


# -- collecting -----------------------------------------------------------------
def capture(root: Root, unreadable: Sequence[Tuple[str, str]],
            absent: Sequence[Tuple[str, str]]) -> Capture:
    """Turn the root's records (reads, listings, commands, probes, stats) into entries.

    ``unreadable`` and ``absent`` are the report's lists of the same records
    (``report.unreadable_items``, ``report.absent_items``): counted once, said alike.
    """
    reads = dict(root.reads)
    commands = dict(root.commands)
    builder = _Builder(root)
    gone: List[Tuple[str, str]] = list(absent)
    for path, reason in sorted(reads.items()):
        if reason is None and not path.endswith("/"):
            builder.add_read(path)
    listings = [builder.add_listing(path[:-1] or "/") for path, reason in sorted(reads.items())
                if reason is None and path.endswith("/")]
    for path, found in sorted(root.probes.items()):
        if found and path not in reads:
            builder.add_probe(path)
    builder.add_stats({p: st for p, st in root.stats.items() if st is not None and p not in reads})
    for key, result in sorted(commands.items()):
        note = builder.add_command(key, result)
        if note and result.missing:  # a failed command is in ``unreadable`` already
            gone.append((result.display, note))
    not_read = tuple((path, f"looked at, not read: bundled empty ({size} bytes on the host)")
                     for path, size in sorted(builder.stand_ins.values()))
    return Capture(builder.sorted_entries(), tuple(sorted(unreadable)), tuple(listings),
                   tuple(sorted(gone)), not_read)


class _Builder:
    """Resolves recorded host paths inside the root, keeping symlinks as symlinks."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.entries: Dict[str, Entry] = {}
        self.stand_ins: Dict[str, Tuple[str, int]] = {}
        """Bundle path -> (host path, size) of files only stat'ed, walked or reached by a
        link that was only read with readlink: bundled empty."""

    def sorted_entries(self) -> Tuple[Entry, ...]:
        return tuple(self.entries[p] for p in sorted(self.entries))

    def add_read(self, host_path: str) -> None:
        real = self.resolve(host_path, follow_last=False)
        if real is None:
            return
        full = self.root.path(real)
        if full.is_symlink():
            # A link read with readlink (a PCI driver link, Debian's 99-sysctl.conf) is a
            # fact itself; one read through holds what its target holds.
            self._add_link(real)
            target = self.resolve(real, follow_last=True)
            if target is None or not self.root.path(target).is_file():
                return
            real = target
        data = _content(self.root, host_path)
        if data is None:
            if not self.root.path(real).is_file():
                return
            existing = self.entries.get(real)
            if existing is not None and existing.kind == "file" and real not in self.stand_ins:
                return  # read under another name (the link's target itself): keep what was read
            # Recorded by a stat, a walk or a readlink, never read: its contents are not the
            # checks'.
            self.stand_ins[real] = (host_path, self.root.path(real).stat().st_size)
            data = b""
        else:
            self.stand_ins.pop(real, None)
        self._add_dirs(posixpath.dirname(real))
        self.entries[real] = Entry(real, "file", data)

    def add_stats(self, stats: Mapping[str, FileStat]) -> None:
        """Files only stat'ed (hugetlbfs files of many GiB): empty stand-ins, with their real
        size, owner and mode in the capture's stat.json, which Root.stat replays."""
        if not stats:
            return
        rows = {}
        for host_path, found in sorted(stats.items()):
            real = self.resolve(host_path, follow_last=False)
            if real is None:
                continue
            self._add_dirs(posixpath.dirname(real))
            self.entries.setdefault(real, Entry(real, "file", b""))
            rows[host_path] = {"size": found.size, "uid": found.uid, "mode": found.mode}
            self.stand_ins[real] = (host_path, found.size)
        self._add_dirs(f"/{CAPTURE_DIR}")
        data = (json.dumps(rows, indent=1, sort_keys=True) + "\n").encode()
        self.entries[f"/{STAT_FILE}"] = Entry(f"/{STAT_FILE}", "file", data)

    def add_probe(self, host_path: str) -> None:
        real = self.resolve(host_path, follow_last=False)
        if real is None or real in self.entries:
            return
        full = self.root.path(real)
        if full.is_symlink():
            self._add_link(real)
        elif full.is_dir():
            self._add_dirs(real)
        else:
            self._add_dirs(posixpath.dirname(real))
            self.entries[real] = Entry(real, "file", b"")  # existence was asked, not content

    def add_listing(self, host_path: str) -> Tuple[str, int, int]:
        """Keep every name the checks saw in a folder: a replay must list the same names
        (the cpuN folders are the CPUs of a sysfs without ``cpu/online``). Entries nothing
        was read below become empty stand-ins of their type: a folder, a file, or the link."""
        real = self.resolve(host_path, follow_last=True)
        if real is None:
            return host_path, 0, 0
        self._add_dirs(real)
        names = self.root.listdir(real)
        prefix = real.rstrip("/") + "/"
        empty = 0
        for name in names:
            child = prefix + name
            if child in self.entries:
                continue
            empty += 1
            full = self.root.path(child)
            if full.is_symlink():
                self._add_link(child)
            elif full.is_dir():
                self._add_dirs(child)
            else:
                self.entries[child] = Entry(child, "file", b"")
        return host_path, len(names), empty

    def add_command(self, key: str, result: CommandResult) -> Optional[str]:
        base = f"/{COMMANDS_DIR}/{key}"
        if result.missing:
            return "not found" + (f" ({result.stderr.strip()})" if result.stderr.strip() else "")
        self._add_dirs(f"/{COMMANDS_DIR}")
        self.entries[base + ".txt"] = Entry(base + ".txt", "file", result.stdout.encode("utf-8"))
        if result.timed_out:
            # The layout has no timeout marker: a status no program returns tells the story.
            self.entries[base + ".rc"] = Entry(base + ".rc", "file", b"124\n")
            return "timed out"
        if result.status:
            self.entries[base + ".rc"] = Entry(base + ".rc", "file", f"{result.status}\n".encode())
        if result.stderr:
            self.entries[base + ".err"] = Entry(base + ".err", "file", result.stderr.encode("utf-8"))
        return None

    def resolve(self, host_path: str, follow_last: bool) -> Optional[str]:
        """The path with every symlinked folder replaced by its target, links recorded."""
        parts = [p for p in host_path.split("/") if p]
        done = ""
        hops = 0
        while parts:
            name = parts.pop(0)
            if name == "..":
                done = posixpath.dirname(done) if done else ""
                continue
            if name == ".":
                continue
            candidate = f"{done}/{name}"
            if (parts or follow_last) and self.root.path(candidate).is_symlink():
                hops += 1
                if hops > MAX_LINK_HOPS:
                    return None
                target = self._add_link(candidate)
                parts = [p for p in target.split("/") if p] + parts
                done = ""  # the target is absolute: start again from the root
                continue
            done = candidate
        return done or "/"

    def _add_link(self, link: str) -> str:
        """Record a link with a target made relative and kept inside the root; returns the
        target as an absolute host path."""
        raw = os.readlink(self.root.path(link))
        folder = posixpath.dirname(link)
        absolute = posixpath.normpath(posixpath.join(folder, raw)) if not raw.startswith("/") else \
            posixpath.normpath(raw)
        absolute = "/" + absolute.lstrip("/")  # '..' above / stays at /, as the kernel does
        relative = posixpath.relpath(absolute, folder)
        self._add_dirs(folder)
        self.entries[link] = Entry(link, "link", target=relative)
        return absolute

    def _add_dirs(self, host_path: str) -> None:
        path = host_path
        while path not in ("", "/"):
            existing = self.entries.get(path)
            if existing is not None and existing.kind != "dir":
                return
            self.entries.setdefault(path, Entry(path, "dir"))
            path = posixpath.dirname(path)


def _content(root: Root, host_path: str) -> Optional[bytes]:
    """What the checks read at ``host_path``; None when they only looked at it, so a file
    that was only stat'ed (a hugetlbfs file of many GiB) is never read here."""
    return root.content(host_path)


# -- writing --------------------------------------------------------------------
def settings_yaml(config: EngineConfig) -> bytes:
    """The engine settings in effect, as the default config file of the replayed host.

    Written into every bundle so a replay sees the arena and unit the reporter gave with
    ``--arena`` or ``--config`` (sizes in bytes: exact, and accepted by the parser).
    """
    lines = ["# Engine settings in effect when this bundle was written (strata-doctor report)."]
    values: List[Tuple[str, Any]] = [
        ("arena", config.arena_bytes), ("kv", config.kv_bytes), ("headroom", config.headroom_bytes),
        ("unit", config.unit), ("workers", config.workers), ("hugepages", config.hugepages),
        ("gpu", config.gpu), ("numa", config.numa),
    ]
    for key, value in values:
        if value is not None:
            lines.append(f"{key}: {json.dumps(value) if isinstance(value, str) else value}")
    if config.lock:  # only when set: bundles of engines that do not lock stay as they were
        lines.append("lock: true")
    return ("\n".join(lines) + "\n").encode("utf-8")


def redact_capture(captured: Capture, redactor: Redactor, config: EngineConfig) -> List[Entry]:
    """The archive's host entries, redacted, with the engine settings in effect added.

    Process environments keep their variable names, command lines are kept only where
    they name the engine (or strata-doctor) and lose the values of secret-looking options,
    ``/etc/passwd`` loses its GECOS field: all of it whether or not the redactor is
    enabled. Every user name is learned from every entry before any is replaced, so a name
    that first shows up in a home path is replaced in the files read before it as well.
    """
    stem = config.unit.rsplit(".", 1)[0]
    entries: Dict[str, Entry] = {}
    for entry in captured.entries:
        scrubbed = _scrub(entry, redactor, stem)
        if scrubbed is not None:
            entries[entry.path] = scrubbed
    entries[DEFAULT_CONFIG] = Entry(DEFAULT_CONFIG, "file", settings_yaml(config))
    entries[CONFIG_SOURCE] = Entry(CONFIG_SOURCE, "file", f"{config.source or ''}\n".encode())
    entries.setdefault("/etc", Entry("/etc", "dir"))
    entries.setdefault(f"/{CAPTURE_DIR}", Entry(f"/{CAPTURE_DIR}", "dir"))
    for entry in entries.values():
        redactor.learn(entry.path)
        redactor.learn(entry.data.decode("utf-8", "surrogateescape"))
    return [
        Entry(redactor.text(e.path), e.kind, redactor.data(e.data), redactor.text(e.target))
        for e in (entries[p] for p in sorted(entries))
    ]


def _scrub(entry: Entry, redactor: Redactor, stem: str) -> Optional[Entry]:
    """What of a host file may leave the host at all; None to leave it out."""
    if entry.kind != "file":
        return entry
    if entry.path.endswith("/environ"):
        return _scrub_environ(entry)
    if PROCESS_CMDLINE.fullmatch(entry.path):
        # Read as Root.read gives it to find_engine_pid: NUL bytes dropped.
        text = entry.data.replace(b"\0", b"").decode("utf-8", "replace")
        if engine_cmdline(text, stem) is None:
            return None  # says nothing about the engine: not the checks' business
        return Entry(entry.path, entry.kind, redactor.command_line(entry.data), entry.target)
    if entry.path == IDENTITY_PASSWD:
        return Entry(entry.path, entry.kind, _drop_gecos(entry.data), entry.target)
    return entry


def _drop_gecos(data: bytes) -> bytes:
    """``/etc/passwd`` without its fifth field (full names, rooms, phone numbers): the
    checks read user names and ids only."""
    lines = []
    for line in data.split(b"\n"):
        fields = line.split(b":")
        if len(fields) >= 5:
            fields[4] = b""
        lines.append(b":".join(fields))
    return b"\n".join(lines)


def _scrub_environ(entry: Entry) -> Entry:
    """A process environment keeps its variable names and only ``container=``'s value:
    the checks need no more, and environments carry credentials no pattern knows."""
    kept = []
    for item in entry.data.split(b"\0"):
        name, sep, _ = item.partition(b"=")
        kept.append(item if name in KEEP_ENVIRON or not sep else name + b"=")
    return Entry(entry.path, entry.kind, b"\0".join(kept), entry.target)


def write_bundle(path: str, captured: Capture, members: List[Entry], redactor: Redactor,
                 documents: Mapping[str, bytes]) -> BundleInfo:
    """Write the archive: the members, the documents and a manifest, deterministically.

    ``members`` come from :func:`redact_capture`; ``documents`` (``report.md``,
    ``check.json``) are already redacted by the same redactor, so placeholders agree.
    """
    manifest = manifest_data(captured, members, redactor)
    payload = dict(documents)
    manifest_text = json.dumps(redactor.value(manifest), indent=2, sort_keys=True) + "\n"
    payload["manifest.json"] = manifest_text.encode("utf-8")
    everything = list(members) + [Entry("/" + name, "file", payload[name]) for name in sorted(payload)]
    everything.sort(key=lambda e: e.path)
    size = _write_archive(path, everything)
    return BundleInfo(path, size, len(everything) + 1, len(captured.unreadable))


def manifest_data(captured: Capture, members: List[Entry], redactor: Redactor) -> Dict[str, Any]:
    """The manifest: each member's size and sha256, and each thing not read, with why."""
    from strata_doctor import __version__

    rows: List[Dict[str, Any]] = []
    for entry in members:
        row: Dict[str, Any] = {"path": entry.path, "kind": entry.kind}
        if entry.kind == "file":
            row.update(size=len(entry.data), sha256=hashlib.sha256(entry.data).hexdigest())
        elif entry.kind == "link":
            row["target"] = entry.target
        rows.append(row)
    return {
        "schema": SCHEMA,
        "strata_doctor": __version__,
        "redacted": redactor.enabled,
        "redactions": redactor.counts(),
        "entries": rows,
        "unreadable": [{"what": what, "reason": why} for what, why in captured.unreadable],
        "absent": [{"what": what, "reason": why} for what, why in captured.absent],
        "not_read": [{"what": what, "reason": why} for what, why in captured.not_read],
        "listings": [{"path": p, "host_entries": n, "empty_stand_ins": k} for p, n, k in captured.listings],
        "notes": [
            f"{DEFAULT_CONFIG} holds the engine settings in effect when the bundle was written;"
            f" {CONFIG_SOURCE} says where they came from on the host (empty: the command line).",
            "Listed folders keep every name; entries nothing was read below are empty stand-ins.",
            "Process environments (/proc/PID/environ) keep variable names, not values.",
            "Command lines (/proc/PID/cmdline) are kept only where they name the engine or"
            " strata-doctor, with secret-looking values masked; /etc/passwd has no GECOS field.",
        ],
    }


def _write_archive(path: str, members: List[Entry]) -> int:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(TOP, tarfile.DIRTYPE, 0o755))
        for entry in members:
            name = TOP + entry.path
            if entry.kind == "dir":
                tar.addfile(_info(name, tarfile.DIRTYPE, 0o755))
            elif entry.kind == "link":
                info = _info(name, tarfile.SYMTYPE, 0o777)
                info.linkname = entry.target
                tar.addfile(info)
            else:
                info = _info(name, tarfile.REGTYPE, 0o644)
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(buffer.getvalue())
    from strata_doctor.output.files import write_bytes  # '-' and what may be replaced: docs/report.md

    return write_bytes(path, raw.getvalue())


def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# -- reading --------------------------------------------------------------------
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
    try:
        rows = json.loads((top / "manifest.json").read_bytes())["entries"]
        listed = {row["path"]: row for row in rows}
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, not UTF-8, no entries
        raise ValueError(f"{TOP}/manifest.json lists no entries ({type(exc).__name__})") from None
    base = os.path.realpath(top)
    for path, row in listed.items():
        parts = str(path).split("/")
        if not isinstance(path, str) or parts[0] or ".." in parts or not isinstance(row, dict):
            raise ValueError(f"{TOP}/manifest.json names {path!r}, which is no path in the bundle")
        member, found = TOP + path, top / path.lstrip("/")
        real = os.path.realpath(found)
        if real != base and not real.startswith(base + os.sep):
            raise ValueError(f"member {member!r} resolves outside the bundle")
        kind = row.get("kind")
        if kind == "link" and (not found.is_symlink() or os.readlink(found) != row.get("target")):
            raise ValueError(f"member {member!r} is not the link manifest.json lists "
                             f"(to {row.get('target')!r}): changed after the bundle was written")
        if kind != "file":
            continue
        if found.is_symlink() or not found.is_file():
            raise ValueError(f"member {member!r} is listed in manifest.json but missing")
        data = found.read_bytes()
        if len(data) != row.get("size") or hashlib.sha256(data).hexdigest() != row.get("sha256"):
            raise ValueError(f"member {member!r} does not match its size and sha256 in manifest.json: "
                             "changed after the bundle was written")
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
        total += member.size
        if total > MAX_UNPACKED:
            raise ValueError(f"unpacks to more than {MAX_UNPACKED // 2**20} MiB")


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
