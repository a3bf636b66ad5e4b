"""Writing a report bundle: the captured entries scrubbed and redacted, the engine settings
in effect, the documents and a manifest, archived deterministically (sorted entries,
mtime 0, uid/gid 0, no names, a gzip header without time or file name).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from strata_doctor.config import CONFIG_SOURCE, DEFAULT_CONFIG, EngineConfig
from strata_doctor.facts.environ import engine_variable
from strata_doctor.facts.processes import engine_cmdline
from strata_doctor.output.bundle import TOP, Capture, Entry
from strata_doctor.output.redact import Redactor
from strata_doctor.root import CAPTURE_DIR
from strata_doctor.sizes import SIZE_SOURCES

SCHEMA = "strata-doctor/bundle/v1"
PROCESS_CMDLINE = re.compile(r"/proc/\d+/cmdline")
IDENTITY_PASSWD = "/etc/passwd"


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


def settings_yaml(config: EngineConfig) -> bytes:
    """The engine settings in effect, as the default config file of the replayed host.

    Written into every bundle so a replay sees the arena and unit the reporter gave with
    ``--arena`` or ``--config`` (sizes in bytes: exact, and accepted by the parser), and
    the opt-ins ``lock:`` and ``release_pool:`` where they are set. Sizes the engine's
    model gave are left to the model, whose header the bundle holds, so the replay says
    where they came from; ``model:``, ``context:`` and ``cache_type:`` are kept as given.
    """
    lines = ["# Engine settings in effect when this bundle was written (strata-doctor report)."]
    values: List[Tuple[str, Any]] = [
        ("arena", _given(config, "arena", config.arena_bytes)), ("kv", _given(config, "kv", config.kv_bytes)),
        ("model", config.model), ("context", config.context), ("cache_type", config.cache_type),
        ("headroom", config.headroom_bytes),
        ("unit", config.unit), ("workers", config.workers), ("hugepages", config.hugepages),
        ("gpu", config.gpu), ("numa", config.numa),
    ]
    for key, value in values:
        if value is not None:
            lines.append(f"{key}: {json.dumps(value) if isinstance(value, str) else value}")
    if config.lock:  # only when set: bundles of engines that do not lock stay as they were
        lines.append("lock: true")
    if config.release_pool:  # the opt-in that lets fix give away a pool others may use
        lines.append("release_pool: true")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _given(config: EngineConfig, key: str, size: Optional[int]) -> Optional[int]:
    """A size the reporter gave (``--arena``, ``arena:``), None for one the model gave or none."""
    return size if config.sizes is None or config.named_by(key) is not None else None


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
    given = "".join(f"{key}\t{source}\n" for key, source in config.given)  # --arena or arena:
    entries[SIZE_SOURCES] = Entry(SIZE_SOURCES, "file", given.encode())
    entries.setdefault("/etc", Entry("/etc", "dir"))
    entries.setdefault(f"/{CAPTURE_DIR}", Entry(f"/{CAPTURE_DIR}", "dir"))
    heads = {path for path, _, _ in captured.prefixes}  # binary headers: Capture.prefixes
    for entry in entries.values():
        redactor.learn(entry.path)
        if entry.path not in heads:
            redactor.learn(entry.data.decode("utf-8", "surrogateescape"))
    return [
        Entry(redactor.text(e.path), e.kind, e.data if e.path in heads else redactor.data(e.data),
              redactor.text(e.target))
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
    """A process environment keeps its variable names, and the values of the variables the
    checks read alone (facts/environ.py: the GPU runtimes', OpenMP's, thread counts,
    ``container``): environments carry credentials no pattern knows."""
    kept = []
    for item in entry.data.split(b"\0"):
        name, sep, _ = item.partition(b"=")
        keep = not sep or engine_variable(name.decode("utf-8", "replace"))
        kept.append(item if keep else name + b"=")
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
        **_prefix_rows(captured, redactor),
        "notes": [
            f"{DEFAULT_CONFIG} holds the engine settings in effect when the bundle was written;"
            f" {CONFIG_SOURCE} says where they came from on the host (empty: the command line).",
            "Listed folders keep every name; entries nothing was read below are empty stand-ins.",
            "Process environments (/proc/PID/environ) keep variable names; values only of the"
            " GPU runtimes', OpenMP's and thread-count variables the checks read.",
            "Command lines (/proc/PID/cmdline) are kept only where they name the engine or"
            " strata-doctor, with secret-looking values masked; /etc/passwd has no GECOS field.",
        ],
    }


def _prefix_rows(captured: Capture, redactor: Redactor) -> Dict[str, Any]:
    """The manifest's ``prefixes`` (files read only as a prefix: a model's header), left
    out when there are none, so bundles without a model read are as they were."""
    if not captured.prefixes:
        return {}
    rows = [{"path": redactor.text(p), "kept": kept, "host_size": size}
            for p, kept, size in captured.prefixes]
    return {"prefixes": rows, "prefix_note": "Read only as a header: the member holds the bytes read,"
            " not redacted (a binary header's lengths must stay as they are); stat.json the size."}


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
