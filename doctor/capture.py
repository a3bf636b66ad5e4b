"""What a host read and ran, as the records a bundle writes and a captured root replays.

Capture layout for what is not a file (documented in docs/capture-layout.md)::

    DIR/.strata-doctor/commands/<key>.txt   stdout of the command
    DIR/.strata-doctor/commands/<key>.rc    exit status (absent means 0)
    DIR/.strata-doctor/commands/<key>.err   stderr, when there was any
    DIR/.strata-doctor/stat.json            size, owner and mode of files only stat'ed

A command whose ``.txt`` is absent under a captured root was not found on that host.
:class:`~strata_doctor.root.Root` reads and runs; this module holds what it keeps of that
and how a captured record reads back, so the bundle and the replay agree on one layout.
"""

from typing import Dict, Iterator, NamedTuple, Optional, Sequence, Tuple

CAPTURE_DIR = ".strata-doctor"
COMMANDS_DIR = f"{CAPTURE_DIR}/commands"
STAT_FILE = f"{CAPTURE_DIR}/stat.json"
DEFAULT_TIMEOUT = 5.0


class FileStat(NamedTuple):
    """What ``stat`` says of a file that is not read (hugetlbfs files can be many GiB)."""

    size: int
    """Size in bytes."""
    uid: int
    """Owner's user id."""
    mode: int
    """``st_mode``, type bits included."""


class CommandResult(NamedTuple):
    """What one external command produced."""

    key: str
    """Stable name of the command, used as its capture file name."""
    argv: Tuple[str, ...]
    """The command line as run on a live host."""
    status: Optional[int]
    """Exit status; None when the command was not found or timed out."""
    stdout: str
    """Standard output, decoded as UTF-8 with replacement."""
    stderr: str = ""
    """Standard error, decoded likewise."""
    missing: bool = False
    """True when the program does not exist on the host."""
    timed_out: bool = False
    """True when the command ran past its timeout."""

    @property
    def ok(self) -> bool:
        """True when the command ran and exited 0."""
        return self.status == 0

    @property
    def display(self) -> str:
        """The command line for evidence lines."""
        return "$ " + " ".join(self.argv)


class Command(NamedTuple):
    """An external command the checks may need, with its capture key."""

    key: str
    """Stable name of the command: its capture files are ``<key>.txt``, ``.rc`` and ``.err``."""
    argv: Tuple[str, ...]
    """The command line run on a live host."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds it may run on a live host before it counts as timed out."""


XCOMP_COMMAND = Command(
    "arch_prctl-xcomp", ("arch_prctl", "ARCH_GET_XCOMP_SUPP", "ARCH_REQ_XCOMP_PERM", "XFEATURE_XTILEDATA")
)
"""The AMX permission request of :meth:`~strata_doctor.root.Root.xcomp_permission`, kept
and replayed as a command's output under this key; no program of that name runs."""


class Records:
    """What one host's reads, stats, probes and commands gave, kept as they happen: the
    bundle writes exactly these, and a captured root answers them back."""

    def __init__(self) -> None:
        self._cache: Dict[str, Optional[bytes]] = {}
        self._commands: Dict[str, CommandResult] = {}
        self.reads: Dict[str, Optional[str]] = {}
        """Host path -> None when read, or the reason it could not be read."""
        self.stats: Dict[str, Optional[FileStat]] = {}
        """Host path -> its size, owner and mode, for files only stat'ed, never read."""
        self.probes: Dict[str, bool] = {}
        """Host path -> whether it existed, for paths only tested, never read."""
        self.heads: Dict[str, FileStat] = {}
        """Host path -> its size, owner and mode, for files read only as a prefix (a model
        file's header, ``Root.read_head``): a bundle keeps the longest prefix read."""
        self._head_data: Dict[str, bytes] = {}

    def content(self, host_path: str) -> Optional[bytes]:
        """What an earlier read of ``host_path`` returned (None if never read or unreadable):
        the whole file, else the longest prefix read of it."""
        data = self._cache.get(host_path)
        return data if data is not None else self._head_data.get(host_path)

    def head_of(self, host_path: str) -> Optional[FileStat]:
        """The stat of a file read only as a prefix, never whole (a bundle keeps that
        prefix and this stat); None for any other path."""
        return self.heads.get(host_path) if self._cache.get(host_path) is None else None

    def keep_head(self, host_path: str, data: bytes, found: FileStat) -> None:
        """Record a prefix read of ``host_path`` (the longest is kept) and the file's stat."""
        if len(data) >= len(self._head_data.get(host_path, b"")):
            self._head_data[host_path] = data
        self.heads[host_path] = found

    @property
    def commands(self) -> Dict[str, CommandResult]:
        """Every command result so far, by key."""
        return dict(self._commands)


def command_key(words: Sequence[str]) -> str:
    """A file-name-safe key for a command, e.g. ``systemctl-show-strata.service``."""
    safe = "-".join(words)
    return "".join(ch if ch.isalnum() or ch in "._@-" else "_" for ch in safe)


def command_capture(key: str) -> str:
    """The host path of a command's capture files without their suffix; keys contain dots
    (strata.service), so the suffixes are appended, never put in place of one."""
    return f"/{COMMANDS_DIR}/{key}"


def captured_status(text: Optional[str]) -> int:
    """The exit status a ``<key>.rc`` file holds: a small number; absent, garbage (or 5,000
    digits, which int() refuses) reads as 0."""
    rc = (text or "").strip()
    digits = rc[1:] if rc.startswith("-") else rc
    return int(rc) if digits.isdigit() and digits.isascii() and len(digits) <= 20 else 0


def captured_stats(text: Optional[str]) -> Iterator[Tuple[str, FileStat]]:
    """(host path, its size, owner and mode) of each row of ``stat.json``, in the file's
    order; a row that is not three JSON integers (``1e400``, ``1.5``, ``"12"``, ``true``)
    is left out, as not recorded, and a file that is not a JSON object gives none."""
    import json  # here: only a captured root that stats a file reads stat.json

    try:
        rows = json.loads(text) if text else {}
    except (ValueError, RecursionError):  # RecursionError: brackets nested too deeply to parse
        rows = {}
    for path, row in (rows.items() if isinstance(rows, dict) else ()):
        fields = row if isinstance(row, dict) else {}
        values = [value for value in (fields.get(key) for key in ("size", "uid", "mode"))
                  if type(value) is int]  # not a bool, a float (1e400) or a string
        if len(values) == 3:
            yield path, FileStat(values[0], values[1], values[2])


__all__ = [
    "CAPTURE_DIR",
    "COMMANDS_DIR",
    "DEFAULT_TIMEOUT",
    "STAT_FILE",
    "XCOMP_COMMAND",
    "Command",
    "CommandResult",
    "FileStat",
    "Records",
    "captured_stats",
    "captured_status",
    "command_capture",
    "command_key",
]
