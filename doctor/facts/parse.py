"""Pure parsers of the small kernel text formats several facts share: integers, sizes,
cpulists and cpumasks, ``key=value`` and ``Key: value`` lines, mounts. Each takes a
string and never reads a file; a format only one fact reads has its parser beside that
fact's reader (``facts/meminfo.py``, ``facts/numa_maps.py``, ``facts/sysctl.py``...).

They accept what real kernels write, including NUL padding, trailing newlines and empty
files, and raise nothing on garbage: unparseable input yields an empty or partial value.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple, Union

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
    "p": 1024**5,
    "pb": 1000**5,
    "pib": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
# The kernel's own limit: CONFIG_NR_CPUS is at most 8192 on every architecture (x86 with
# MAXSMP, powerpc). CPU ids at or above it are garbage, e.g. "0-4294967295" or a 1 MB cpumap.
MAX_CPU = 8192
_NOT_HEX = re.compile("[^0-9a-fA-F]")


def _clean(text: str) -> str:
    return text.replace("\0", "").strip()


def is_uint(text: str) -> bool:
    """Whether ``text`` is an unsigned decimal number, in ASCII digits only: ``str.isdigit``
    also accepts ``²``, which ``int`` rejects, and ``int`` refuses more than 4300 digits;
    no kernel number is longer than 64."""
    return 0 < len(text) <= 64 and text.isascii() and text.isdigit()


@lru_cache(maxsize=1024)  # thousands of processes share a few Cpus_allowed_list values
def parse_cpulist(text: str) -> FrozenSet[int]:
    """Parse a cpulist such as ``0-21,44-65`` (also ``0-7:2`` strides); '' is empty."""
    cpus: set[int] = set()
    for part in _clean(text).split(","):
        cpus.update(_cpulist_range(part.strip()))
    return frozenset(cpus)


def _cpulist_range(part: str) -> range:
    """The CPUs of one part of a cpulist (``3``, ``0-21``, ``0-7:2``); empty when the part
    is garbage."""
    part, colon, step = part.partition(":")
    stride = (int(step) if is_uint(step) else 0) if colon else 1
    bounds = _cpu_bounds(part)
    if bounds is None or not stride:
        return range(0)
    return range(bounds[0], bounds[1] + 1, stride)


def _cpu_bounds(part: str) -> Optional[Tuple[int, int]]:
    """(first, last) CPU of ``3`` or ``0-21``; None when it is garbage, backwards, or names
    a CPU at or above :data:`MAX_CPU`."""
    lo_text, sep, hi_text = part.partition("-")
    if not is_uint(lo_text) or (sep and not is_uint(hi_text)):
        return None
    lo = int(lo_text)
    hi = int(hi_text) if sep else lo
    return (lo, hi) if lo <= hi < MAX_CPU else None


def parse_cpumap(text: str) -> FrozenSet[int]:
    """Parse a hex cpumask such as ``00000000,0000ffff`` (rightmost word is CPUs 0-31).

    Linear in the text's length; bits at or above :data:`MAX_CPU` are ignored (see
    :func:`cpumap_beyond_limit`)."""
    digits = _cpumap_digits(text)
    if not digits:
        return frozenset()
    value = int(digits[-(MAX_CPU // 4):], 16)
    if not value:
        return frozenset()
    return frozenset(i for i, bit in enumerate(reversed(bin(value)[2:])) if bit == "1")


def cpumap_beyond_limit(text: str) -> bool:
    """The cpumask sets a CPU id at or above :data:`MAX_CPU`, which :func:`parse_cpumap` ignores."""
    digits = _cpumap_digits(text)
    return bool(digits[:-(MAX_CPU // 4)].strip("0"))


def _cpumap_digits(text: str) -> str:
    """The hex digits of a cpumask without the commas; '' when it holds anything else."""
    digits = _clean(text).replace(",", "")
    return "" if _NOT_HEX.search(digits) else digits


def format_cpulist(cpus: FrozenSet[int] | List[int] | Tuple[int, ...]) -> str:
    """Format CPU ids as the kernel does: ``0-21,44-65``."""
    ordered = sorted(set(cpus))
    ranges: List[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)


def parse_distance(text: str) -> Tuple[int, ...]:
    """Parse a node's ``distance`` row (``10 21``); non-numbers end the row."""
    values: List[int] = []
    for word in _clean(text).split():
        if not is_uint(word):
            break
        values.append(int(word))
    return tuple(values)


def parse_key_values(text: str, sep: str = "=") -> Dict[str, str]:
    """Parse ``Key=Value`` lines (``systemctl show``, os-release); later keys win."""
    result: Dict[str, str] = {}
    for line in text.replace("\0", "").splitlines():
        key, found, value = line.partition(sep)
        if found:
            key = key.strip()
            if key:
                result[key] = value.strip()
    return result


def parse_status(text: str) -> Dict[str, str]:
    """Parse ``/proc/PID/status`` into raw string values (``Key:\\tvalue``)."""
    return parse_key_values(text, ":")


def parse_cpuinfo(text: str) -> List[Dict[str, str]]:
    """Parse ``/proc/cpuinfo`` into one dict per processor block."""
    blocks: List[Dict[str, str]] = []
    current: Dict[str, str] = {}
    for line in text.replace("\0", "").splitlines():
        # A line with a colon is never blank: test it first, it is most lines.
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
        elif current and not line.strip():
            blocks.append(current)
            current = {}
    if current:
        blocks.append(current)
    return blocks


def parse_size(text: str) -> int:
    """Parse a size like ``46.84GiB``, ``512 MiB``, ``64GB`` or ``1024`` into bytes.

    Raises ValueError naming the text when it is not a size.
    """
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 46.84GiB, 512MiB, 64GB)")
    try:
        return round(float(match.group(1)) * _SIZE_UNITS[unit])
    except OverflowError:  # hundreds of digits overflow the float to infinity
        raise ValueError(f"not a size: {text!r} (too large)") from None



_KERNEL_UNITS = {"k": "KiB", "m": "MiB", "g": "GiB"}


def parse_kernel_size(text: str) -> Optional[int]:
    """A size as the kernel's memparse reads it on its command line and in mount options
    (``2M``, ``1G``, ``64K``: binary units); None when it is not a size."""
    text = text.strip()
    if text and text[-1].lower() in _KERNEL_UNITS:
        text = text[:-1] + _KERNEL_UNITS[text[-1].lower()]
    try:
        return parse_size(text)
    except ValueError:
        return None

MAX_SETTING_SIZE = 1024**5
"""1 PiB: no host has that much memory; a larger arena, K/V or headroom is a typo."""


def parse_setting_size(text: str, zero_ok: bool = False, unit_required: bool = True) -> int:
    """A size the operator writes (``arena:``, ``--kv``): :func:`parse_size` with a unit
    required (unless ``unit_required`` is false: a config file's plain YAML integer, which
    is bytes, as a bundle writes its settings), more than 0 (unless ``zero_ok``; zero is
    refused as zero, and allowed without a unit), and at most 1 PiB.

    Binary units are the single letters and the ``iB`` forms (``G`` = ``GiB`` = 2^30, as
    systemd and ``free -g`` count); ``KB`` ... ``PB`` are decimal (``GB`` = 10^9).
    """
    value = parse_size(text)
    if value == 0:  # said before the unit: "0GiB" is no better an arena than "0"
        if not zero_ok:
            raise ValueError(f"{text!r} is zero; give the size in use, e.g. 46.84GiB")
        return 0
    match = _SIZE_RE.match(str(text))
    if unit_required and match is not None and not match.group(2):
        raise ValueError(f"{text!r} has no unit (write e.g. {text}GiB or {text}MiB)")
    if value > MAX_SETTING_SIZE:  # 1PiB itself is taken: "more than" says so
        raise ValueError(f"{text!r} is more than 1 PiB; no host has that much memory")
    return value


def format_nodes(nodes: Union[str, Iterable[int]]) -> str:
    """NUMA nodes in words: ``node 1``, ``nodes 0,1`` (``nodes 0-3`` for a range), from ids or
    from the comma list numactl and systemd write; never ``node(s)``."""
    if isinstance(nodes, str):
        parts = [p.strip() for p in nodes.split(",") if p.strip()]
    else:
        parts = [str(n) for n in sorted(nodes)]
    plural = len(parts) != 1 or "-" in parts[0]
    return ("nodes " if plural else "node ") + ",".join(parts)


def format_count(value: int) -> str:
    """A count (of pages, of processes) with thousands separators: ``23,983``."""
    return f"{value:,}"


def format_bytes(value: int) -> str:
    """Format bytes with a binary unit and two decimals: ``46.84 GiB``."""
    sign = "-" if value < 0 else ""
    amount = float(abs(value))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{sign}{amount:.0f} {unit}" if unit == "B" else f"{sign}{amount:.2f} {unit}"
        amount /= 1024
    return f"{value} B"  # pragma: no cover - loop always returns


def parse_int(text: Optional[str]) -> Optional[int]:
    """Parse a decimal (or ``0x`` hex) integer attribute; None when absent or garbage."""
    if text is None:
        return None
    if len(text) < 20 and text.isdigit() and text.isascii():  # most values: plain digits, < 2**64
        return int(text)
    text = _clean(text)
    try:
        value = int(text, 0) if text.lower().startswith(("0x", "-0x")) else int(text)
    except ValueError:
        return None
    # The kernel's numbers are at most 64 bits: 400 digits are garbage (and overflow a float).
    return value if -(1 << 64) < value < (1 << 64) else None


# The ASCII characters other than "\n" and " " at which ``str.splitlines()`` or ``str.split()``
# break a text: \r \v \f and \x1c-\x1e end a line, \x1f separates words. Beyond ASCII,
# \x85, \u2028 and \u2029 end lines too, which is why plain text is ASCII.
_ODD_CHARACTERS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")
_ODD_BYTES = tuple(character.encode() for character in _ODD_CHARACTERS)


def is_plain(data: Union[str, bytes], also: str = "") -> bool:
    """True when ``data`` is ASCII holding none of the characters at which
    ``str.splitlines()`` or ``str.split()`` break it where ``split("\\n")`` and ``split(" ")``
    do not (``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1f``), nor any character of ``also``
    (a tab for numa_maps, whose fast path splits on spaces; a NUL for status files).

    The kernel writes plain text; the fast parsers of large or many files (numa_maps,
    cpuinfo, the process scan) take only plain text and leave the rest to the general
    parser, which reads any text the way the fast one reads plain text."""
    if not data.isascii():
        return False
    if isinstance(data, bytes):
        return not any(odd in data for odd in _ODD_BYTES) and not any(odd.encode() in data for odd in also)
    return not any(odd in data for odd in _ODD_CHARACTERS) and not any(odd in data for odd in also)


def parse_mounts(text: str) -> List[Tuple[str, str, str, str]]:
    """Parse ``/proc/mounts`` into (device, mount point, fs type, options) with octal escapes
    such as ``\\040`` decoded."""
    mounts: List[Tuple[str, str, str, str]] = []
    for line in text.replace("\0", "").splitlines():
        words = line.split()
        if len(words) < 4:
            continue
        mounts.append((unescape_octal(words[0]), unescape_octal(words[1]), words[2], words[3]))
    return mounts


def unescape_octal(text: str) -> str:
    """Decode the kernel's octal escapes (``\\040`` is a space) in /proc/mounts and maps."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_bracketed_choice(text: str) -> Optional[str]:
    """The selected word of ``always [madvise] never``; None when none is marked."""
    match = re.search(r"\[([^\]]+)\]", text.replace("\0", ""))
    return match.group(1) if match else None
