"""The only way to read a host: files under one root, commands through one runner.

``Root("/")`` reads the live host; ``Root("tests/fixtures/hosts/seed-box")`` replays a
captured one. Every read is recorded, so ``report --bundle`` captures exactly what the
checks looked at, and a new check is captured without more work. The records and the
capture layout they replay from (docs/capture-layout.md) are :mod:`strata_doctor.capture`'s;
the names it defines are importable from here, as plug-in checks and launchers import them.

Under a captured root every path is resolved inside the root (docs/fix.md#safety): an
absolute link target is taken relative to the root and ``..`` never climbs above it, so
a capture's ``sys -> /sys`` reads the capture, never this machine's ``/sys``. Every open,
listing, ``readlink`` and ``stat`` resolves its whole path so in the one call that opens it
(:mod:`strata_doctor.inroot`: ``openat2`` from the root's descriptor, one system call, or
the ``openat`` walk), so a folder swapped for a link between two reads is never followed
out. Every read is bounded (:func:`~strata_doctor.fileread.read_bound`).
"""

import errno
import os
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

from strata_doctor.capture import (
    CAPTURE_DIR,
    COMMANDS_DIR,
    DEFAULT_TIMEOUT,
    STAT_FILE,
    XCOMP_COMMAND,
    Command,
    CommandResult,
    FileStat,
    Records,
    captured_stats,
    captured_status,
    command_capture,
    command_key,
)
from strata_doctor.fileread import DIR_READ, NONBLOCK, OPEN_FLAGS, files_below, read_all, read_bound, regular

if TYPE_CHECKING:
    from strata_doctor.inroot import InRoot

__all__ = ["CAPTURE_DIR", "COMMANDS_DIR", "DEFAULT_TIMEOUT", "STAT_FILE", "XCOMP_COMMAND", "Command",
           "CommandResult", "FileStat", "Records", "Root", "command_key"]


class Root(Records):
    """A host's file system root plus its command runner; what it reads and runs is kept
    in its :class:`~strata_doctor.capture.Records`.

    Paths are host paths (``/sys/devices/...``); the root is prepended by joining parts,
    never with ``os.path.join(root, "/abs")``, which would discard the root.
    """

    def __init__(self, path: "str | os.PathLike[str]" = "/") -> None:
        self.base = Path(path)
        self.live = self.base.resolve() == Path("/")
        # Reads join strings, not Paths: the process scan opens thousands of files.
        self._prefix = str(self.base).rstrip("/") + "/"
        super().__init__()
        self._lock = threading.Lock()
        self._stat_capture: Optional[Dict[str, FileStat]] = None
        self._resolver: Optional[InRoot] = None

    # -- files ---------------------------------------------------------------
    def path(self, host_path: str) -> Path:
        """The real path of a host path under this root, its folders resolved inside the
        root; the last component is left as it is (it may be a link: see :meth:`resolved`).

        A name to show or to hand on, never to read through: the tree may change between
        this answer and an open by that name, so every read here goes by descriptor."""
        rel = host_path.lstrip("/")
        if self.live or not rel:
            return self.base / rel if rel else self.base
        return self._strict_path(host_path, False)

    def resolved(self, host_path: str) -> Path:
        """Like :meth:`path`, with a link in the last component followed inside the root."""
        found = self.path(host_path)
        if self.live or not os.path.islink(found):
            return found
        return self._strict_path(host_path, True)

    def _strict_path(self, host_path: str, follow_last: bool) -> Path:
        try:
            rel = self._in_root().resolve(host_path, follow_last).lstrip("/")
        except OSError:  # a loop, or a file where a folder should be: nothing to find there
            return self.base / CAPTURE_DIR / "unresolvable" / host_path.lstrip("/")
        return self.base / rel if rel else self.base

    def _in_root(self) -> "InRoot":
        if self._resolver is None:
            from strata_doctor.inroot import InRoot

            self._resolver = InRoot(self.base)
        return self._resolver

    def _open(self, host_path: str, flags: int = OPEN_FLAGS) -> int:
        """A descriptor of a host file. Under a captured root the whole path is resolved
        inside the root by the call that opens it (openat2 ``RESOLVE_IN_ROOT`` from the
        root's descriptor, or the openat walk), and only a regular file is read."""
        if self.live:
            rel = host_path.lstrip("/")
            return os.open(self._prefix + rel if rel else str(self.base), flags)
        return regular(self._in_root().open(host_path, flags | NONBLOCK))

    def _read_capture(self, host_path: str) -> Optional[str]:
        """A capture's own file (stat.json, a command's output) with universal newlines, not
        recorded; None when it is missing, unreadable or over the bound."""
        try:
            data = read_all(self._open(host_path))
        except OSError:
            return None
        return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")

    def read_bytes(self, host_path: str) -> Optional[bytes]:
        """Read a whole file in one call; None when it is missing, unreadable or larger
        than its bound (:func:`~strata_doctor.fileread.read_bound`), the reason recorded."""
        if host_path in self._cache:
            return self._cache[host_path]
        data: Optional[bytes]
        try:
            data = read_all(self._open(host_path), read_bound(host_path))
            reason = None
        except OSError as exc:
            data, reason = None, _reason(exc)
        self._cache[host_path] = data
        self.reads[host_path] = reason
        return data

    def read_head(self, host_path: str, size: int) -> Optional[bytes]:
        """The first ``size`` bytes of a regular file (fewer when shorter; a model's header), by
        descriptor; None when missing or unreadable, the reason recorded. A bundle keeps the
        longest prefix read and the file's stat (under a captured root, ``stat.json``'s)."""
        from strata_doctor.fileread import read_prefix  # loaded already: fileread is Root's

        try:
            data, st = read_prefix(self._open(host_path), size)
        except OSError as exc:
            self.reads.setdefault(host_path, _reason(exc))
            return None
        found = self._captured_stats().get(host_path) if not self.live else None
        self.keep_head(host_path, data, found or FileStat(st.st_size, st.st_uid, st.st_mode))
        self.reads.setdefault(host_path, None)
        return data

    def read(self, host_path: str) -> Optional[str]:
        """Read a text file; None when missing or unreadable. NUL bytes are dropped."""
        data = self.read_bytes(host_path)
        if data is None:
            return None
        return data.replace(b"\0", b"").decode("utf-8", "replace")

    def read_value(self, host_path: str) -> Optional[str]:
        """Read a one-value attribute, stripped; None when missing or empty."""
        text = self.read(host_path)
        if text is None:
            return None
        text = text.strip()
        return text or None

    def look(self, host_path: str, follow_last: bool = False) -> Optional[os.stat_result]:
        """``lstat`` of a host path (``stat`` with ``follow_last``), by descriptor under a
        captured root; None when there is nothing to see. Not recorded: the bundle asks
        what it packs with it."""
        try:
            return self._look(host_path, follow_last)
        except OSError:
            return None

    def _look(self, host_path: str, follow_last: bool) -> os.stat_result:
        if self.live:
            return os.stat(self.path(host_path), follow_symlinks=follow_last)
        return self._in_root().lstat(host_path, follow_last)

    def _probe(self, host_path: str, follow_last: bool) -> Optional[os.stat_result]:
        """:meth:`look`, with a folder that may not be searched recorded as unreadable."""
        try:
            return self._look(host_path, follow_last)
        except PermissionError as exc:
            self.reads.setdefault(host_path, _reason(exc))
        except OSError:
            pass
        return None

    def exists(self, host_path: str) -> bool:
        """Whether a host path exists (a dangling link counts as existing)."""
        found = self._probe(host_path, False) is not None
        self.probes.setdefault(host_path, found)
        return found

    def is_dir(self, host_path: str) -> bool:
        """Whether a host path is a directory."""
        info = self._probe(host_path, True)
        found = info is not None and stat.S_ISDIR(info.st_mode)
        self.probes.setdefault(host_path, found)
        return found

    def listdir(self, host_path: str) -> List[str]:
        """Sorted entries of a host directory; empty when missing or unreadable."""
        try:
            if self.live:
                names = sorted(os.listdir(self.path(host_path)))
            else:
                names = sorted(self._in_root().listdir(host_path))
        except OSError as exc:
            self.reads.setdefault(host_path + "/", _reason(exc, None))
            return []
        self.reads.setdefault(host_path + "/", None)
        return names

    def files_below(self, host_path: str, limit: int) -> Tuple[List[str], Optional[str]]:
        """The files of a folder's tree (:func:`~strata_doctor.fileread.files_below`), walked
        from its descriptor; a missing folder has none, and why a listing stops is recorded."""
        try:
            fd = os.open(self.path(host_path), DIR_READ) if self.live else self._in_root().open_dir(host_path)
        except OSError as exc:
            return [], None if isinstance(exc, FileNotFoundError) else _reason(exc)
        found, why = files_below(fd, host_path, limit)
        self.reads.setdefault(host_path.rstrip("/") + "/", why)
        return found, why

    def readlink(self, host_path: str, record: bool = True) -> Optional[str]:
        """The target of a symlink as written (never resolved against the live host), read
        from its folder's descriptor; ``record=False`` for the bundle's own looks."""
        try:
            target = os.readlink(self.path(host_path)) if self.live else self._in_root().readlink(host_path)
        except OSError as exc:
            if record:
                why = "not a link" if exc.errno == errno.EINVAL else _reason(exc, None)
                self.reads.setdefault(host_path, why)
            return None
        if record:
            self.reads.setdefault(host_path, None)
        return target

    def link_name(self, host_path: str) -> Optional[str]:
        """The last component of a symlink's target, e.g. a driver's name."""
        target = self.readlink(host_path)
        return target.rstrip("/").rsplit("/", 1)[-1] if target else None

    def file_size(self, host_path: str) -> Optional[int]:
        """Size of a regular file in bytes, without reading it; None when missing."""
        found = self.stat(host_path)
        return found.size if found else None

    def stat(self, host_path: str) -> Optional[FileStat]:
        """Size, owner and mode of a file without reading it (``lstat`` from its folder's
        descriptor); None when missing.

        A capture cannot hold a 16 GiB hugetlbfs file, so under a captured root the sizes
        recorded in ``.strata-doctor/stat.json`` win over the stand-in file's own.
        """
        if host_path in self.stats:
            return self.stats[host_path]
        found = self._captured_stats().get(host_path) if not self.live else None
        if found is None:
            st = self._probe(host_path, False)
            found = FileStat(st.st_size, st.st_uid, st.st_mode) if st is not None else None
        self.stats[host_path] = found
        return found

    def _captured_stats(self) -> Dict[str, FileStat]:
        if self._stat_capture is None:
            self._stat_capture = dict(captured_stats(self._read_capture(f"/{STAT_FILE}")))
        return self._stat_capture

    # -- commands ------------------------------------------------------------
    def run(self, command: Command) -> CommandResult:
        """Run one command (live) or replay its capture; results are cached by key."""
        return self._once(command, self._execute)

    def _once(self, command: Command, live: Callable[[Command], CommandResult]) -> CommandResult:
        """The kept result of ``command``, else ``live``'s (on a live host) or the capture's,
        kept from now on."""
        with self._lock:
            cached = self._commands.get(command.key)
        if cached is not None:
            return cached
        result = live(command) if self.live else self._replay(command)
        with self._lock:
            self._commands[command.key] = result
        return result

    def run_all(self, commands: Iterable[Command]) -> None:
        """Run several commands concurrently so slow ones overlap."""
        # One per key: two checks often declare the same command.
        todo = list({c.key: c for c in commands if c.key not in self._commands}.values())
        if len(todo) <= 1 or not self.live:
            for command in todo:
                self.run(command)
            return
        # Plain threads: concurrent.futures costs more to import than these commands take.
        errors: List[BaseException] = []

        def run_one(command: Command) -> None:
            try:
                self.run(command)
            except BaseException as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run_one, args=(c,), daemon=True) for c in todo]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def xcomp_permission(self) -> CommandResult:
        """Ask the kernel for AMX, as an engine must before its first tile instruction:
        ``arch_prctl(ARCH_GET_XCOMP_SUPP)`` and ``arch_prctl(ARCH_REQ_XCOMP_PERM,
        XFEATURE_XTILEDATA)`` (Linux 5.16+, x86-64), in this process, through ctypes.

        The answer is kept like a command's output (key ``arch_prctl-xcomp``), so a bundle
        records it and a captured root replays it; nothing runs under a captured root.
        """
        return self._once(XCOMP_COMMAND, _xcomp_live)

    def _replay(self, command: Command) -> CommandResult:
        base = command_capture(command.key)
        out = self._read_capture(base + ".txt")
        if out is None:
            return CommandResult(command.key, command.argv, None, "", missing=True)
        status = captured_status(self._read_capture(base + ".rc"))
        err = self._read_capture(base + ".err") or ""
        return CommandResult(command.key, command.argv, status, out, err)

    def _execute(self, command: Command) -> CommandResult:
        import shutil  # imported here: a replayed host never runs a command
        import subprocess

        if shutil.which(command.argv[0]) is None:
            return CommandResult(command.key, command.argv, None, "", missing=True)
        env = dict(os.environ, LC_ALL="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")
        try:
            proc = subprocess.run(
                list(command.argv),
                capture_output=True,
                timeout=command.timeout,
                env=env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return CommandResult(command.key, command.argv, None, "", timed_out=True)
        except OSError as exc:
            return CommandResult(command.key, command.argv, None, "", stderr=str(exc), missing=True)
        return CommandResult(command.key, command.argv, proc.returncode,
                             proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_GET_XCOMP_SUPP = 0x1021
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _xcomp_live(command: Command) -> CommandResult:
    """Both arch_prctl calls on this machine; their answers as lines of text (errno names
    for refusals), or ``missing`` off x86-64, where the call does not exist."""
    import ctypes  # here: a replayed host never asks its own kernel
    import platform

    if platform.machine() not in ("x86_64", "AMD64") or not hasattr(ctypes, "CDLL"):
        return CommandResult(command.key, command.argv, None, "", stderr="not x86-64", missing=True)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError) as exc:
        return CommandResult(command.key, command.argv, None, "", stderr=str(exc), missing=True)
    syscall.restype = ctypes.c_long
    supported = ctypes.c_ulong(0)
    lines = []
    rc = syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_GET_XCOMP_SUPP), ctypes.byref(supported))
    answer = f"{supported.value:#x}" if rc == 0 else _errno_name(ctypes.get_errno())
    lines.append(f"ARCH_GET_XCOMP_SUPP: {answer}")
    rc = syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                 ctypes.c_ulong(_XFEATURE_XTILEDATA))
    lines.append("ARCH_REQ_XCOMP_PERM XTILEDATA: " + ("ok" if rc == 0 else _errno_name(ctypes.get_errno())))
    return CommandResult(command.key, command.argv, 0, "\n".join(lines) + "\n")


def _reason(exc: OSError, missing: Optional[str] = "missing") -> str:
    """Why a host path could not be read, as :attr:`Records.reads` keeps it (``missing``
    None: the system's own words for it, as listings and links have always said)."""
    if isinstance(exc, FileNotFoundError) and missing:
        return missing
    if isinstance(exc, PermissionError):
        return "permission denied (needs root)"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return exc.strerror or type(exc).__name__


def _errno_name(number: int) -> str:
    return errno.errorcode.get(number, str(number))
