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
kept here, so a new check is bundled without more work. This module turns them into
entries; ``output/bundle_write.py`` archives them and ``output/bundle_replay.py`` unpacks
and verifies a bundle.
"""

from __future__ import annotations

import json
import posixpath
import stat
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from strata_doctor.root import CAPTURE_DIR, COMMANDS_DIR, STAT_FILE, CommandResult, FileStat, Root

TOP = "strata-doctor-bundle"
"""The one folder at the top of every bundle (written by ``output/bundle_write.py``,
unpacked by ``output/bundle_replay.py``)."""
MAX_LINK_HOPS = 40  # as the kernel's own limit on nested symlinks


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
    report's own list (``provenance.unreadable_items``), so both say the same count."""
    listings: Tuple[Tuple[str, int, int], ...]
    """(folder, entries on the host, entries nothing was read below): every name is kept,
    the ones nothing was read below as empty stand-ins, so a replay lists the same names."""
    absent: Tuple[Tuple[str, str], ...] = ()
    """(host path or ``$ command``, reason) for paths looked for and not on the host, and
    programs not found: answers about the host, not read failures."""
    not_read: Tuple[Tuple[str, str], ...] = ()
    """(host path, note) for files only stat'ed or walked: bundled empty, never read."""
    prefixes: Tuple[Tuple[str, int, int], ...] = ()
    """(bundle path, bytes kept, bytes on the host) of files read only as a prefix (a model
    file's header): the member holds that prefix, stat.json the host's size. Not redacted:
    a placeholder of another length inside a length-prefixed header would break its replay."""


# -- collecting -----------------------------------------------------------------
def capture(root: Root, unreadable: Sequence[Tuple[str, str]],
            absent: Sequence[Tuple[str, str]]) -> Capture:
    """Turn the root's records (reads, listings, commands, probes, stats) into entries.

    ``unreadable`` and ``absent`` are the report's lists of the same records
    (``provenance.unreadable_items``, ``provenance.absent_items``): counted once, said alike.
    """
    reads = dict(root.reads)  # as the checks left them: resolving a listed folder adds to them
    done = [path for path, reason in sorted(reads.items()) if reason is None]
    builder = _Builder(root)
    for path in done:
        if not path.endswith("/"):
            builder.add_read(path)
    listings = [builder.add_listing(path[:-1] or "/") for path in done if path.endswith("/")]
    _add_looked_at(builder, root, reads)
    gone = list(absent) + _add_commands(builder, root.commands)
    not_read = tuple((path, f"looked at, not read: bundled empty ({size} bytes on the host)")
                     for path, size in sorted(builder.stand_ins.values()))
    prefixes = tuple((path, kept, size) for path, (kept, size) in sorted(builder.prefixes.items()))
    return Capture(builder.sorted_entries(), tuple(sorted(unreadable)), tuple(listings),
                   tuple(sorted(gone)), not_read, prefixes)


def _add_looked_at(builder: _Builder, root: Root, reads: Mapping[str, Optional[str]]) -> None:
    """Paths only tested for or stat'ed, never read: bundled as what they are, empty."""
    for path, found in sorted(root.probes.items()):
        if found and path not in reads:
            builder.add_probe(path)
    builder.add_stats({p: st for p, st in root.stats.items() if st is not None and p not in reads},
                      builder.heads)


def _add_commands(builder: _Builder, commands: Mapping[str, CommandResult]) -> List[Tuple[str, str]]:
    """Add every command's capture; returns (command, why) for the programs not found (a
    command that failed is in the report's ``unreadable`` already)."""
    gone = []
    for key, result in sorted(commands.items()):
        note = builder.add_command(key, result)
        if note and result.missing:
            gone.append((result.display, note))
    return gone


class _Builder:
    """Resolves recorded host paths inside the root, keeping symlinks as symlinks."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.entries: Dict[str, Entry] = {}
        self.stand_ins: Dict[str, Tuple[str, int]] = {}
        """Bundle path -> (host path, size) of files only stat'ed, walked or reached by a
        link that was only read with readlink: bundled empty."""
        self.prefixes: Dict[str, Tuple[int, int]] = {}
        """Bundle path -> (bytes kept, bytes on the host) of files read only as a prefix."""
        self.heads: Dict[str, FileStat] = {}
        """Host path -> stat of the files read only as a prefix, for stat.json."""

    def sorted_entries(self) -> Tuple[Entry, ...]:
        return tuple(self.entries[p] for p in sorted(self.entries))

    def add_read(self, host_path: str) -> None:
        real = self.resolve(host_path, follow_last=False)
        if real is None:
            return
        if self._kind(real) == stat.S_IFLNK:
            # A link read with readlink (a PCI driver link, Debian's 99-sysctl.conf) is a
            # fact itself; one read through holds what its target holds.
            self._add_link(real)
            target = self.resolve(real, follow_last=True)
            if target is None or self._kind(target, True) != stat.S_IFREG:
                return
            real = target
        data = _content(self.root, host_path)
        if data is None:
            found = self.root.look(real, follow_last=True)
            if found is None or not stat.S_ISREG(found.st_mode):
                return
            existing = self.entries.get(real)
            if existing is not None and existing.kind == "file" and real not in self.stand_ins:
                return  # read under another name (the link's target itself): keep what was read
            # Recorded by a stat, a walk or a readlink, never read: its contents are not the
            # checks'.
            self.stand_ins[real] = (host_path, found.st_size)
            data = b""
        else:
            self.stand_ins.pop(real, None)
            self._note_prefix(host_path, real, data)
        self._add_dirs(posixpath.dirname(real))
        self.entries[real] = Entry(real, "file", data)

    def _note_prefix(self, host_path: str, real: str, data: bytes) -> None:
        """A file read only as a prefix keeps its host stat for stat.json, and is listed."""
        head = self.root.head_of(host_path)
        if head is not None:
            self.heads[host_path] = head
            self.prefixes[real] = (len(data), head.size)

    def add_stats(self, stats: Mapping[str, FileStat], heads: Mapping[str, FileStat]) -> None:
        """Files only stat'ed (hugetlbfs files of many GiB): empty stand-ins, with their real
        size, owner and mode in the capture's stat.json, which Root.stat replays; files read
        only as a prefix (``heads``: their members hold it) have their row there too."""
        if not stats and not heads:
            return
        rows = {p: {"size": st.size, "uid": st.uid, "mode": st.mode} for p, st in heads.items()}
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
        kind = self._kind(real)
        if kind == stat.S_IFLNK:
            self._add_link(real)
        elif kind == stat.S_IFDIR:
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
            kind = self._kind(child)
            if kind == stat.S_IFLNK:
                self._add_link(child)
            elif kind == stat.S_IFDIR:
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
        parts = _parts(host_path)
        done = ""
        hops = 0
        while parts:
            name = parts.pop(0)
            if name in (".", ".."):
                # '..' back to the root leaves "" (the root), not "/", so the next name is "/b"
                done = posixpath.dirname(done).rstrip("/") if name == ".." else done
                continue
            candidate = f"{done}/{name}"
            if not ((parts or follow_last) and self._kind(candidate) == stat.S_IFLNK):
                done = candidate
                continue
            hops += 1
            if hops > MAX_LINK_HOPS:
                return None
            parts = _parts(self._add_link(candidate)) + parts
            done = ""  # the target is absolute: start again from the root
        return done or "/"

    def _add_link(self, link: str) -> str:
        """Record a link with a target made relative and kept inside the root; returns the
        target as an absolute host path (the link's own, when it is no longer a link)."""
        raw = self.root.readlink(link, record=False)
        if raw is None:
            return link
        folder = posixpath.dirname(link)
        absolute = posixpath.normpath(posixpath.join(folder, raw)) if not raw.startswith("/") else \
            posixpath.normpath(raw)
        absolute = "/" + absolute.lstrip("/")  # '..' above / stays at /, as the kernel does
        relative = posixpath.relpath(absolute, folder)
        self._add_dirs(folder)
        self.entries[link] = Entry(link, "link", target=relative)
        return absolute

    def _kind(self, host_path: str, follow_last: bool = False) -> int:
        """The file type at a host path (``stat.S_IFLNK``...; 0 for nothing), looked at by
        descriptor inside the root, as every read of it was."""
        found = self.root.look(host_path, follow_last)
        return stat.S_IFMT(found.st_mode) if found is not None else 0

    def _add_dirs(self, host_path: str) -> None:
        path = host_path
        while path not in ("", "/"):
            existing = self.entries.get(path)
            if existing is not None and existing.kind != "dir":
                return
            self.entries.setdefault(path, Entry(path, "dir"))
            path = posixpath.dirname(path)


def _parts(path: str) -> List[str]:
    return [p for p in path.split("/") if p]


def _content(root: Root, host_path: str) -> Optional[bytes]:
    """What the checks read at ``host_path``; None when they only looked at it, so a file
    that was only stat'ed (a hugetlbfs file of many GiB) is never read here."""
    return root.content(host_path)
