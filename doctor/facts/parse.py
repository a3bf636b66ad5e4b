"""Pure parsers for kernel text formats; each takes a string and never reads a file.

They accept what real kernels write, including NUL padding, trailing newlines and empty
files, and raise nothing on garbage: unparseable input yields an empty or partial value.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from operator import mul
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple, Union

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
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
# The kernel's own limit: CONFIG_NR_CPUS is at most 8192 on every architecture (x86 with
# MAXSMP, powerpc). CPU ids at or above it are garbage, e.g. "0-4294967295" or a 1 MB cpumap.
MAX_CPU = 8192
_NOT_HEX = re.compile("[^0-9a-fA-F]")


def _clean(text: str) -> str:
    return text.replace("\0", "").strip()


def _is_uint(text: str) -> bool:
    """ASCII decimal digits only: ``str.isdigit`` also accepts ``²``, which ``int`` rejects,
    and ``int`` refuses more than 4300 digits; no kernel number is longer than 64."""
    return 0 < len(text) <= 64 and text.isascii() and text.isdigit()


@lru_cache(maxsize=1024)  # thousands of processes share a few Cpus_allowed_list values
def parse_cpulist(text: str) -> FrozenSet[int]:
    """Parse a cpulist such as ``0-21,44-65`` (also ``0-7:2`` strides); '' is empty."""
    cpus: set[int] = set()
    for part in _clean(text).split(","):
        part = part.strip()
        if not part:
            continue
        stride = 1
        if ":" in part:
            part, _, step = part.partition(":")
            if not _is_uint(step) or int(step) == 0:
                continue
            stride = int(step)
        lo_text, sep, hi_text = part.partition("-")
        if not _is_uint(lo_text) or (sep and not _is_uint(hi_text)):
            continue
        lo = int(lo_text)
        hi = int(hi_text) if sep else lo
        if hi < lo or hi >= MAX_CPU:
            continue
        cpus.update(range(lo, hi + 1, stride))
    return frozenset(cpus)


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
        if not _is_uint(word):
            break
        values.append(int(word))
    return tuple(values)


def parse_meminfo(text: str) -> Dict[str, int]:
    """Parse ``/proc/meminfo`` or a node's ``meminfo``; values with ``kB`` become bytes.

    Node files prefix each line with ``Node 0``; that prefix is dropped. Counts without a
    unit (HugePages_Total) stay counts.
    """
    result: Dict[str, int] = {}
    for line in text.replace("\0", "").splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key.startswith("Node "):
            key = key.split(None, 2)[-1] if len(key.split(None, 2)) == 3 else key
        words = rest.split()
        if not words or not _is_uint(words[0]):
            continue
        value = int(words[0])
        if len(words) > 1 and words[1].lower() == "kb":
            value *= 1024
        result[key] = value
    return result


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


MAX_SETTING_SIZE = 1024**5
"""1 PiB: no host has that much memory; a larger arena, K/V or headroom is a typo."""


def parse_setting_size(text: str, zero_ok: bool = False, unit_required: bool = True) -> int:
    """A size the operator writes (``arena:``, ``--kv``): :func:`parse_size` with a unit
    required (unless ``unit_required`` is false: a config file's plain YAML integer, which
    is bytes, as a bundle writes its settings), more than 0 (unless ``zero_ok``; zero is
    refused as zero, and allowed without a unit), and at most 1 PiB.

    Binary units are the single letters and the ``iB`` forms (``G`` = ``GiB`` = 2^30, as
    systemd and ``free -g`` count); ``KB``, ``MB``, ``GB``, ``TB`` are decimal (``GB`` = 10^9).
    """
    value = parse_size(text)
    if value == 0:  # said before the unit: "0GiB" is no better an arena than "0"
        if not zero_ok:
            raise ValueError(f"{text!r} is zero; give the size in use, e.g. 46.84GiB")
        return 0
    match = _SIZE_RE.match(str(text))
    if unit_required and match is not None and not match.group(2):
        raise ValueError(f"{text!r} has no unit (write e.g. {text}GiB or {text}MiB)")
    if value > MAX_SETTING_SIZE:
        raise ValueError(f"{text!r} is more than 1 PiB; no host has that much memory")
    return value


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


class NumaMapsTotals(NamedTuple):
    """The sums of one ``/proc/PID/numa_maps``, from one pass over it."""

    per_node: Dict[int, int]
    """Node -> bytes on it (``numastat -p``)."""
    per_policy: Dict[str, int]
    """Memory policy (``default``, ``prefer:1``, ``prefer (many):0-1``...) -> bytes under it."""
    huge_per_node: Dict[int, int]
    """Node -> bytes of hugetlb pages on it (the lines with a ``huge`` word); part of
    :attr:`per_node`."""


def parse_numa_maps(text: str) -> Dict[int, int]:
    """Sum pages per node over ``/proc/PID/numa_maps`` lines, weighted by page size.

    Returns node id -> bytes, as ``numastat -p`` does.
    """
    return numa_maps_totals(text.encode("utf-8", "surrogatepass")).per_node


_PAGE_SIZE_WORD = " kernelpagesize_kB="
_PAGE_SIZE_BYTES = _PAGE_SIZE_WORD.encode()


# Policy modes whose names hold a space (mpol_to_str: "prefer (many)" since Linux 5.15,
# "weighted interleave" since 6.9). Their space becomes a NUL, which no numa_maps holds
# once its NULs are dropped, so that such a line splits into words like any other; the
# names get their space back at the end.
_SPACED_MODES = ((b" prefer (many)", b" prefer\0(many)"), (b" weighted interleave", b" weighted\0interleave"))


def numa_maps_totals(data: bytes) -> NumaMapsTotals:
    """Bytes per node, bytes per memory policy and hugetlb bytes per node of a
    ``numa_maps`` as read, in one pass: a large engine has a million lines (80 MB), which is
    why this parser takes the file's bytes and decodes only what it keeps."""
    data = data.replace(b"\0", b"")
    for spaced, joined in _SPACED_MODES:
        data = data.replace(spaced, joined)
    per_node, per_policy, huge_per_node = numa_maps_sums(data)
    return NumaMapsTotals(per_node, {policy.replace("\0", " "): size for policy, size in per_policy.items()},
                          huge_per_node)


def numa_maps_sums(data: bytes) -> NumaMapsTotals:
    """:func:`numa_maps_totals` of NUL-free bytes, policy names as the lines' second words."""
    if not is_plain(data, also="\t"):
        return _numa_maps_totals_of_text(data.decode("utf-8", "replace"))
    # The kernel's own layout, ``ADDR POLICY FLAGS... N0=3 N1=5 kernelpagesize_kB=4``: each
    # line only files the text of its counts (``0=3 N1=5``) under its (policy, page size,
    # whether a flag says ``huge``), and the counts are checked and summed once per distinct
    # ``N`` word afterwards, which is what makes a million lines cheap. No flag word starts
    # with ``N`` (the kernel escapes spaces in file names), so the first `` N`` starts the
    # counts. ASCII only, so isdigit means 0-9. Lines without counts only name a policy; any
    # other line takes the general path.
    totals = NumaMapsTotals({}, {}, {})
    per_policy: Dict[bytes, int] = {}
    counts_by: Dict[Tuple[bytes, bytes, bool], List[bytes]] = {}
    other: List[bytes] = []
    for line in data.split(b"\n"):
        head, sep, tail = line.partition(b" N")
        if sep:
            counts, sep, size = tail.rpartition(_PAGE_SIZE_BYTES)
            words = head.split(None, 2)
            if sep and len(words) > 1 and not words[0].startswith(b"N"):  # a count, not an address
                # hugetlb pages: few lines, so the words are split only when the text is there
                key = (words[1], size, b"huge" in head and b"huge" in head.split())
                found = counts_by.get(key)
                if found is None:
                    counts_by[key] = [counts]
                else:
                    found.append(counts)
                continue
        elif not line.startswith(b"N"):  # no pages on any node
            words = line.split(None, 2)
            if len(words) > 1:
                per_policy[words[1]] = per_policy.get(words[1], 0)
            continue
        other.append(line)
    for (policy, size, huge), found in counts_by.items():
        if not _add_counts(b" N".join(found).split(b" N"), size, totals, per_policy, policy, huge):
            return _numa_maps_totals_by_line(data.decode("ascii"))  # a malformed count
    totals.per_policy.update((policy.decode("ascii"), size) for policy, size in per_policy.items())
    for line in other:
        _add_any_line(line.decode("ascii"), totals)
    return totals


# What the distinct count words of one (policy, page size), joined by spaces, must be;
# compiled on first use (re caches it), as only an engine's numa_maps needs it.
_COUNT_WORDS = rb"[0-9]{1,64}=[0-9]{1,64}(?: [0-9]{1,64}=[0-9]{1,64})*"


def _add_counts(words: List[bytes], size: bytes, totals: NumaMapsTotals,
                per_policy: Dict[bytes, int], policy: bytes, huge: bool) -> bool:
    """Add ``N<node>=<pages>`` words (``N`` already split off) of one policy and page size;
    False, adding nothing, when any of them or the size is not exactly that."""
    tally = Counter(words)
    joined = b" ".join(tally)
    if not (size.isdigit() and len(size) <= 64 and re.fullmatch(_COUNT_WORDS, joined)):
        return False
    # Checked as a whole, the distinct words are converted without a Python step each.
    numbers = list(map(int, joined.replace(b"=", b" ").split(b" ")))
    page = int(size) * 1024
    total = per_policy.get(policy, 0)
    per_node, huge_per_node = totals.per_node, totals.huge_per_node
    for node, value in zip(numbers[0::2], map(mul, numbers[1::2], tally.values())):
        per_node[node] = per_node.get(node, 0) + value * page
        if huge:
            huge_per_node[node] = huge_per_node.get(node, 0) + value * page
        total += value * page
    per_policy[policy] = total
    return True


def _numa_maps_totals_of_text(text: str) -> NumaMapsTotals:
    totals = NumaMapsTotals({}, {}, {})
    for line in text.splitlines():
        _add_any_line(line, totals)
    return totals


def _numa_maps_totals_by_line(text: str) -> NumaMapsTotals:
    """:func:`numa_maps_totals` for plain text, line by line: what it falls back to when a
    count is malformed, so that only that line takes the general path."""
    totals = NumaMapsTotals({}, {}, {})
    per_policy = totals.per_policy
    for line in text.split("\n"):
        head, sep, size = line.rpartition(_PAGE_SIZE_WORD)
        if not sep:
            if " N" not in line and not line.lstrip().startswith("N"):  # no pages on any node
                words = line.split(None, 2)
                if len(words) > 1:
                    per_policy[words[1]] = per_policy.get(words[1], 0)
                continue
        elif size.isdigit() and len(size) <= 64 and _add_line_counts(head, int(size) * 1024, totals):
            continue
        _add_any_line(line, totals)
    return totals


def _add_line_counts(head: str, page: int, totals: NumaMapsTotals) -> bool:
    """Add ``ADDR POLICY ... N0=3 N1=5`` (the line before its page size); False when the
    counts are not exactly space-separated ``N<node>=<pages>`` words."""
    parts = head.split(" N")
    words = parts[0].split(None, 2)
    if len(parts) < 2 or len(words) < 2 or words[0].startswith("N"):
        return False
    counts = []
    for part in parts[1:]:
        node_text, _, pages_text = part.partition("=")
        if not (node_text.isdigit() and pages_text.isdigit()
                and len(node_text) <= 64 and len(pages_text) <= 64):
            return False
        counts.append((int(node_text), int(pages_text) * page))
    _add_sums(totals, words[1], counts, "huge" in parts[0].split())
    return True


def _add_any_line(line: str, totals: NumaMapsTotals) -> None:
    words = line.split()
    page = 4096
    counts: List[Tuple[int, int]] = []
    for word in words:
        if word.startswith("N") and "=" in word:
            node_text, _, pages_text = word[1:].partition("=")
            if _is_uint(node_text) and _is_uint(pages_text):
                counts.append((int(node_text), int(pages_text)))
        elif word.startswith("kernelpagesize_kB="):
            size = word[18:]
            if _is_uint(size):
                page = int(size) * 1024
    policy = words[1] if len(words) >= 2 else None  # without one, the pages count per node only
    _add_sums(totals, policy, [(node, pages * page) for node, pages in counts], "huge" in words)


def _add_sums(totals: NumaMapsTotals, policy: Optional[str], counts: List[Tuple[int, int]],
              huge: bool) -> None:
    """Add one line's (node, bytes) to the totals, under ``policy`` (unless None)."""
    per_node, huge_per_node = totals.per_node, totals.huge_per_node
    for node, size in counts:
        per_node[node] = per_node.get(node, 0) + size
        if huge:
            huge_per_node[node] = huge_per_node.get(node, 0) + size
    if policy is not None:
        totals.per_policy[policy] = totals.per_policy.get(policy, 0) + sum(size for _, size in counts)


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
