"""``/proc/PID/numa_maps``: its one reader, :func:`read_numa_maps`, and its parsers.

A large engine's numa_maps has a million lines (80 MB), which is why the parser takes the
file's bytes and has a fast path for the kernel's own layout (docs/performance.md); any
other text takes the general path, which reads it the way the fast one reads plain text.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from operator import mul
from typing import DefaultDict, Dict, List, NamedTuple, Optional, Tuple
from weakref import WeakKeyDictionary

from strata_doctor.facts.parse import is_plain, is_uint
from strata_doctor.root import Root


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
    counts_by, per_policy, other = _file_lines(data)
    totals = NumaMapsTotals({}, {}, {})
    for (policy, size, huge), found in counts_by.items():
        if not _add_counts(b" N".join(found).split(b" N"), size, totals, per_policy, policy, huge):
            return _numa_maps_totals_by_line(data.decode("ascii"))  # a malformed count
    totals.per_policy.update((policy.decode("ascii"), size) for policy, size in per_policy.items())
    for line in other:
        _add_any_line(line.decode("ascii"), totals)
    return totals


_CountsKey = Tuple[bytes, bytes, bool]
"""(policy, page size in kB, whether a flag says ``huge``), as the line's bytes say them."""


def _file_lines(data: bytes) -> Tuple[Dict[_CountsKey, List[bytes]], Dict[bytes, int], List[bytes]]:
    """One pass over plain numa_maps bytes: the text of each kernel-layout line's counts
    filed under its :data:`_CountsKey`, the policies of the lines without pages (at 0), and
    the other lines, for the general path.

    The kernel's own layout is ``ADDR POLICY FLAGS... N0=3 N1=5 kernelpagesize_kB=4``: each
    line only files the text of its counts (``0=3 N1=5``), and the counts are checked and
    summed once per distinct ``N`` word afterwards (:func:`_add_counts`), which is what
    makes a million lines cheap. No flag word starts with ``N`` (the kernel escapes spaces
    in file names), so the first `` N`` starts the counts. ASCII only, so isdigit means 0-9.
    """
    per_policy: Dict[bytes, int] = {}
    counts_by: DefaultDict[_CountsKey, List[bytes]] = defaultdict(list)
    other: List[bytes] = []
    for line in data.split(b"\n"):
        head, sep, tail = line.partition(b" N")
        if sep:
            counts, sep, size = tail.rpartition(_PAGE_SIZE_BYTES)
            words = head.split(None, 2)
            if sep and len(words) > 1 and not words[0].startswith(b"N"):  # a count, not an address
                # hugetlb pages: few lines, so the words are split only when the text is there
                counts_by[(words[1], size, b"huge" in head and b"huge" in head.split())].append(counts)
                continue
        elif not line.startswith(b"N"):  # no pages on any node
            words = line.split(None, 2)
            if len(words) > 1:
                per_policy[words[1]] = per_policy.get(words[1], 0)
            continue
        other.append(line)
    return counts_by, per_policy, other


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
            if is_uint(node_text) and is_uint(pages_text):
                counts.append((int(node_text), int(pages_text)))
        elif word.startswith("kernelpagesize_kB="):
            size = word[18:]
            if is_uint(size):
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


# Root keeps each file's bytes; this keeps each numa_maps' one parse, so that the engine's
# totals (engine.read_process) and its hugetlb pages as a holder (hugepages.read_hugepages)
# come from the same pass over a file of up to a million lines.
_NUMA_MAPS: WeakKeyDictionary[Root, Dict[int, NumaMapsTotals]] = WeakKeyDictionary()


def read_numa_maps(root: Root, pid: int) -> NumaMapsTotals:
    """``/proc/PID/numa_maps`` summed per node, per policy and, for hugetlb pages, per node;
    parsed once per root and process. Empty sums when the file cannot be read (the reason
    is in ``root.reads``)."""
    parsed = _NUMA_MAPS.setdefault(root, {})
    totals = parsed.get(pid)
    if totals is None:
        totals = parsed[pid] = numa_maps_totals(root.read_bytes(f"/proc/{pid}/numa_maps") or b"")
    return totals
