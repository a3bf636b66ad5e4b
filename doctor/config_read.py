"""Reading the engine's config file: the one the user names, or /etc/strata-doctor.yaml under
the root, a small regular UTF-8 file, refused in one line naming it otherwise. The settings
in it are :mod:`strata_doctor.config`'s."""

import os
import stat
from typing import Optional, Tuple

from strata_doctor.fileread import NONBLOCK, OPEN_FLAGS
from strata_doctor.root import Root

DEFAULT_CONFIG = "/etc/strata-doctor.yaml"


NOCTTY = getattr(os, "O_NOCTTY", 0)
"""--config /dev/tty is refused after the open: the open must not make it our terminal."""


MAX_CONFIG_BYTES = 64 << 10
"""A config is a few lines: a larger file is refused before YAML reads it (docs/config.md).
PyYAML's pure-Python parser takes about a second for 64 KiB of short list items, and half
a minute for 1 MiB."""


class ConfigError(Exception):
    """A bad configuration value; the message names the file and key."""


def read_named(path: str) -> str:
    """The config file the user named (a real path, not under the root): a regular file of at
    most MAX_CONFIG_BYTES, opened without blocking (a FIFO would wait for a writer)."""
    if path == "-":
        raise ConfigError("--config -: standard input is not read; name a file (./- for a file named -)")
    try:
        fd = os.open(path, OPEN_FLAGS | NONBLOCK | NOCTTY)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        found = os.fstat(fd)
        _small_regular((found.st_mode, found.st_size), path)
        data = _read_bounded(fd)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:  # it grew since the fstat, or reports no size
        raise ConfigError(_too_large(path))
    return _decoded(data, path)


def read_default(root: Root) -> Optional[Tuple[str, str]]:
    """(where it is shown, text) of /etc/strata-doctor.yaml under the root; None when there is
    none. Its kind and size are asked before Root reads it (on the live host Root's open
    would wait on a FIFO); under a captured root Root itself refuses what is not a file."""
    source = str(root.base).rstrip("/") + DEFAULT_CONFIG if not root.live else DEFAULT_CONFIG
    status = _default_status(root)
    if status is not None and not stat.S_ISLNK(status[0]):  # a link is followed by the read
        _small_regular(status, source)
    data = root.read_bytes(DEFAULT_CONFIG)
    if data is None:
        why = root.reads.get(DEFAULT_CONFIG)
        if why == "missing":
            return None
        raise ConfigError(f"{source}: cannot read: {why}")
    if len(data) > MAX_CONFIG_BYTES:  # it grew since the stat
        raise ConfigError(_too_large(source))
    return source, _decoded(data, source)


def _default_status(root: Root) -> Optional[Tuple[int, int]]:
    """(mode, size) of the default config, its link followed on the live host only; None when
    it cannot be seen (the read then says why)."""
    if root.live:
        try:
            found = os.stat(DEFAULT_CONFIG)
        except OSError:
            return None
        return found.st_mode, found.st_size
    seen = root.stat(DEFAULT_CONFIG)
    return (seen.mode, seen.size) if seen is not None else None


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _small_regular(status: Tuple[int, int], source: str) -> None:
    """Refuse, naming the file, what is not a regular file (mode, size) of at most
    MAX_CONFIG_BYTES."""
    mode, size = status
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise ConfigError(f"{source}: not a regular file ({kind})")
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(_too_large(source))


def _too_large(source: str) -> str:
    return f"{source}: larger than {MAX_CONFIG_BYTES >> 10} KiB, too large for a config"


def _read_bounded(fd: int) -> bytes:
    """At most MAX_CONFIG_BYTES + 1 bytes: one more than allowed tells a file that grew."""
    chunks = []
    left = MAX_CONFIG_BYTES + 1
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _decoded(data: bytes, source: str) -> str:
    """The file as UTF-8, strictly: a replaced byte would change a value unseen."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text (at offset {exc.start})") from None
