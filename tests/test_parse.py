"""The kernel-text parsers, on real strings and on generated ones.

Every parser takes what real kernels write (NUL padding, trailing newlines, empty files)
and raises nothing on garbage; parse_size alone raises, with the text in the message.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata_doctor.facts.meminfo import parse_meminfo
from strata_doctor.facts.numa_maps import (
    _numa_maps_totals_of_text,
    numa_maps_sums,
    numa_maps_totals,
    parse_numa_maps,
)
from strata_doctor.facts.parse import (
    MAX_CPU,
    format_bytes,
    format_cpulist,
    is_plain,
    parse_bracketed_choice,
    parse_cpuinfo,
    parse_cpulist,
    parse_cpumap,
    parse_distance,
    parse_int,
    parse_key_values,
    parse_mounts,
    parse_size,
    parse_status,
)

GiB = 1024**3
# No example database (tests write only to tmp dirs) and no deadline (CI machines are slow).
generated = settings(database=None, deadline=None)
SEED_NODE0 = frozenset(range(0, 22)) | frozenset(range(44, 66))


# -- cpulist ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-21,44-65\n", SEED_NODE0),
        ("22-43,66-87", frozenset(range(22, 44)) | frozenset(range(66, 88))),
        ("0", frozenset({0})),
        ("0-3,8,10-11\n", frozenset({0, 1, 2, 3, 8, 10, 11})),
        ("0-7:2", frozenset({0, 2, 4, 6})),
        ("0-15,88-103\x00\x00\x00", frozenset(range(16)) | frozenset(range(88, 104))),
        ("", frozenset()),
        ("\n", frozenset()),
        ("\x00" * 16, frozenset()),
        ("garbage", frozenset()),
        ("3-1", frozenset()),  # a reversed range is dropped, not inverted
        ("0-4294967295", frozenset()),  # far beyond any host: dropped, not allocated
        ("0-3,x,8", frozenset({0, 1, 2, 3, 8})),  # garbage parts are skipped
        ("0-7:0", frozenset()),  # a zero stride never loops
        ("²,1", frozenset({1})),  # '²'.isdigit() is True but int() rejects it
    ],
)
def test_parse_cpulist_examples(text: str, expected: frozenset) -> None:
    assert parse_cpulist(text) == expected


def test_format_cpulist_like_the_kernel() -> None:
    assert format_cpulist(SEED_NODE0) == "0-21,44-65"
    assert format_cpulist([5, 3, 4, 0]) == "0,3-5"
    assert format_cpulist((7,)) == "7"
    assert format_cpulist(frozenset()) == ""


cpu_sets = st.frozensets(st.integers(min_value=0, max_value=4095), max_size=300)


@generated
@given(cpu_sets)
def test_cpulist_round_trip(cpus: frozenset) -> None:
    text = format_cpulist(cpus)
    assert parse_cpulist(text) == cpus
    assert parse_cpulist(text + "\n\x00") == cpus  # sysfs newline and NUL padding


@generated
@given(cpu_sets)
def test_format_cpulist_is_canonical(cpus: frozenset) -> None:
    """Ranges are maximal and ascending: no two parts touch, as the kernel prints them."""
    text = format_cpulist(cpus)
    bounds = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        bounds.append((int(lo), int(hi or lo)))
    for (_, hi), (lo, _) in zip(bounds, bounds[1:]):
        assert lo > hi + 1


# -- cpumap -------------------------------------------------------------------
def kernel_cpumap(value: int, words: int) -> str:
    """Format a mask as the kernel does: 32-bit hex words, most significant first."""
    return ",".join(f"{(value >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))


def bits(value: int) -> frozenset:
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000,003fffff,f00000ff\n", frozenset(range(8)) | frozenset(range(28, 54))),
        ("0000ffff", frozenset(range(16))),
        ("000000ff,ff000000,00000000,0000ffff", frozenset(range(16)) | frozenset(range(88, 104))),
        ("00000000,00000000\n\x00", frozenset()),
        ("0000,000000ff,ffffffff", frozenset(range(40))),  # short leading word (pci local_cpus)
        ("", frozenset()),
        ("\x00\x00", frozenset()),
        ("zz,ff", frozenset()),
        ("0x0f", frozenset()),  # not the kernel's form
    ],
)
def test_parse_cpumap_examples(text: str, expected: frozenset) -> None:
    assert parse_cpumap(text) == expected


@generated
@given(st.integers(min_value=0, max_value=2**320 - 1), st.integers(min_value=0, max_value=3))
def test_parse_cpumap_is_the_set_bits(value: int, extra_words: int) -> None:
    words = max(1, (value.bit_length() + 31) // 32) + extra_words
    text = kernel_cpumap(value, words)
    assert parse_cpumap(text) == bits(value)
    assert parse_cpumap(text + "\n") == bits(value)
    assert parse_cpumap(text.upper()) == bits(value)


@generated
@given(cpu_sets)
def test_cpumap_and_cpulist_agree(cpus: frozenset) -> None:
    value = sum(1 << cpu for cpu in cpus)
    words = max(1, (value.bit_length() + 31) // 32)
    assert parse_cpumap(kernel_cpumap(value, words)) == parse_cpulist(format_cpulist(cpus))


def test_parse_cpumap_bounds_a_huge_mask() -> None:
    assert len(parse_cpumap("f" * 20000)) == MAX_CPU


# -- distance -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10 21\n", (10, 21)),
        ("10 11 12 12 32 32 32 32\n", (10, 11, 12, 12, 32, 32, 32, 32)),
        ("0\n", (0,)),  # firmware without a SLIT
        ("10 40 80\x00\x00", (10, 40, 80)),
        ("", ()),
        ("\x00", ()),
        ("10 x 21", (10,)),  # a non-number ends the row
        ("-1 10", ()),
    ],
)
def test_parse_distance_examples(text: str, expected: Tuple[int, ...]) -> None:
    assert parse_distance(text) == expected


@generated
@given(st.lists(st.integers(min_value=0, max_value=255), max_size=300))
def test_parse_distance_round_trip(row: List[int]) -> None:
    assert parse_distance(" ".join(map(str, row)) + "\n") == tuple(row)


# -- meminfo ------------------------------------------------------------------
NODE1_MEMINFO = """\
Node 1 MemTotal:       65929216 kB
Node 1 MemFree:        63021140 kB
Node 1 MemUsed:         2908076 kB
Node 1 FilePages:        880132 kB
Node 1 HugePages_Total:     0
Node 1 HugePages_Free:      0
"""

PROC_MEMINFO = """\
MemTotal:       131858432 kB
MemFree:        121466792 kB
MemAvailable:   124930000 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
DirectMap1G:    127926272 kB
"""


def test_parse_node_meminfo() -> None:
    info = parse_meminfo(NODE1_MEMINFO)
    assert info["MemTotal"] == 65929216 * 1024
    assert info["MemFree"] == 63021140 * 1024
    assert info["HugePages_Total"] == 0  # a count, not bytes
    assert "Node 1 MemTotal" not in info


def test_parse_proc_meminfo() -> None:
    info = parse_meminfo(PROC_MEMINFO)
    assert info["MemTotal"] == 131858432 * 1024
    assert info["Hugepagesize"] == 2 * 1024**2
    assert info["HugePages_Total"] == 0


@pytest.mark.parametrize(
    "text", ["", "\x00" * 8, "garbage", "MemTotal:", "MemTotal: lots kB", "Node 0 MemTotal: -5 kB"]
)
def test_parse_meminfo_garbage_is_empty(text: str) -> None:
    assert parse_meminfo(text) == {}


def test_parse_meminfo_ignores_nul_padding() -> None:
    assert parse_meminfo("Node 0 MemTotal: 1024 kB\n\x00\x00")["MemTotal"] == 1024 * 1024


meminfo_keys = st.from_regex(r"[A-Z][A-Za-z_()]{0,20}", fullmatch=True).filter(
    lambda k: not k.startswith("Node ")
)


@generated
@given(
    st.dictionaries(meminfo_keys, st.tuples(st.integers(0, 2**50), st.booleans()), max_size=20),
    st.one_of(st.none(), st.integers(0, 1023)),
)
def test_parse_meminfo_agrees_with_generated_lines(
    entries: Dict[str, Tuple[int, bool]], node: object
) -> None:
    prefix = f"Node {node} " if node is not None else ""
    lines = [
        f"{prefix}{key}:{' ' * 7}{value}{' kB' if in_kb else ''}"
        for key, (value, in_kb) in entries.items()
    ]
    expected = {key: value * 1024 if in_kb else value for key, (value, in_kb) in entries.items()}
    assert parse_meminfo("\n".join(lines) + "\n") == expected


# -- key=value, status, cpuinfo ---------------------------------------------------
def test_parse_key_values_systemctl_show() -> None:
    text = (
        "Id=strata.service\nNUMAPolicy=preferred\nNUMAMask=1\nCPUAffinity=\n"
        "ExecStart={ path=/a ; argv[]=/a -x }\n"
    )
    values = parse_key_values(text)
    assert values["NUMAPolicy"] == "preferred"
    assert values["CPUAffinity"] == ""
    assert values["ExecStart"] == "{ path=/a ; argv[]=/a -x }"  # only the first '=' splits
    assert parse_key_values("a=1\na=2\n") == {"a": "2"}
    assert parse_key_values("no separator\n=novalue\n") == {}


def test_parse_status() -> None:
    text = (
        "Name:\tstrata\nPid:\t4242\nCpus_allowed:\tffff,ffffffff\n"
        "Cpus_allowed_list:\t22-43,66-87\nMems_allowed_list:\t1\n"
    )
    status = parse_status(text)
    assert parse_cpulist(status["Cpus_allowed_list"]) == frozenset(range(22, 44)) | frozenset(range(66, 88))
    assert status["Mems_allowed_list"] == "1"
    assert status["Name"] == "strata"


def test_parse_cpuinfo_blocks() -> None:
    text = (
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz\n"
        "physical id\t: 0\ncore id\t\t: 0\nflags\t\t: fpu avx avx2\n\n"
        "processor\t: 1\nphysical id\t: 1\ncore id\t\t: 0\n\n\n"
    )
    blocks = parse_cpuinfo(text)
    assert len(blocks) == 2
    assert blocks[0]["model name"].startswith("Intel(R) Xeon(R) CPU E5-2696 v4")
    assert "avx2" in blocks[0]["flags"].split()
    assert blocks[1]["physical id"] == "1"
    assert parse_cpuinfo("") == []
    assert parse_cpuinfo("\x00\n\n") == []


# -- sizes ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("46.84GiB", round(46.84 * GiB)),
        ("3.09 GiB", round(3.09 * GiB)),
        ("512MiB", 512 * 1024**2),
        ("64GB", 64 * 1000**3),
        ("64G", 64 * GiB),
        ("1024", 1024),
        ("  2 tib ", 2 * 1024**4),
        ("4k", 4096),
        ("4kB", 4000),
        ("1PiB", 1024**5),
        ("2p", 2 * 1024**5),
        ("1PB", 1000**5),
    ],
)
def test_parse_size_examples(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "12 parsecs", "1e9", "-4GiB", "1.2.3G", "4 Gi B", "9" * 400])
def test_parse_size_garbage_names_the_text(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_size(text)
    assert repr(text) in str(info.value)


UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4, "PiB": 1024**5,
         "kB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4}  # PB: amount x 10^15 is past a float's 2^53


@generated
@given(st.integers(0, 10**6), st.sampled_from(sorted(UNITS)), st.sampled_from(["", " "]))
def test_parse_size_round_trips_integers(amount: int, unit: str, space: str) -> None:
    assert parse_size(f"{amount}{space}{unit}") == amount * UNITS[unit]
    assert parse_size(f"{amount}{unit.lower()}") == amount * UNITS[unit]


@generated
@given(st.integers(0, 2**50))
def test_format_bytes_round_trips_within_rounding(value: int) -> None:
    text = format_bytes(value)
    assert abs(parse_size(text.replace(" ", "")) - value) <= max(1, value * 0.0051)


@generated
@given(st.text(max_size=40))
def test_parse_size_raises_only_value_error(text: str) -> None:
    try:
        parse_size(text)
    except ValueError as exc:
        assert repr(text) in str(exc)


def test_format_bytes() -> None:
    assert format_bytes(round(46.84 * GiB)) == "46.84 GiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(-3 * GiB) == "-3.00 GiB"
    assert format_bytes(5 * 1024**5) == "5120.00 TiB"


# -- ints, numa_maps, mounts, bracketed choice ---------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1\n", 1),
        ("-1\n", -1),  # numa_node without firmware affinity
        ("0x030200\n", 0x030200),
        ("0x10de", 0x10DE),
        ("42\x00", 42),
        ("", None),
        (None, None),
        ("\x00", None),
        ("n/a", None),
        ("²", None),
    ],
)
def test_parse_int(text: object, expected: object) -> None:
    assert parse_int(text) == expected  # type: ignore[arg-type]


NUMA_MAPS = """\
55d0c6c00000 default file=/usr/bin/strata mapped=12 N0=12 kernelpagesize_kB=4
7f1200000000 prefer:1 anon=11990 dirty=11990 N1=11990 kernelpagesize_kB=2048
7f5400000000 default anon=300 dirty=300 N0=100 N1=200 kernelpagesize_kB=4
7f5500000000 bind:1 huge anon=2 N1=2 kernelpagesize_kB=1048576
7ffd3a1e4000 default stack anon=9 dirty=9 N0=9 kernelpagesize_kB=4
"""


def test_parse_numa_maps_sums_per_node_by_page_size() -> None:
    per_node = parse_numa_maps(NUMA_MAPS)
    assert per_node[0] == (12 + 100 + 9) * 4096
    assert per_node[1] == 11990 * 2 * 1024**2 + 200 * 4096 + 2 * GiB


def test_parse_numa_maps_without_page_size_assumes_4k() -> None:
    assert parse_numa_maps("7f00 default anon=3 N2=3\n") == {2: 3 * 4096}
    assert parse_numa_maps("") == {}
    assert parse_numa_maps("garbage N=1 Nx=2 N3=y kernelpagesize_kB=z\n") == {}


numa_lines = st.lists(
    st.tuples(
        st.dictionaries(st.integers(0, 300), st.integers(0, 10**7), max_size=4),
        st.sampled_from([4, 64, 2048, 1048576]),
    ),
    max_size=30,
)


@generated
@given(numa_lines)
def test_parse_numa_maps_weighs_pages_by_kernelpagesize(lines: List[Tuple[Dict[int, int], int]]) -> None:
    text = "".join(
        f"7f{i:010x} default anon=1 "
        + " ".join(f"N{node}={pages}" for node, pages in counts.items())
        + f" kernelpagesize_kB={page_kb}\n"
        for i, (counts, page_kb) in enumerate(lines)
    )
    expected: Dict[int, int] = {}
    for counts, page_kb in lines:
        for node, pages in counts.items():
            expected[node] = expected.get(node, 0) + pages * page_kb * 1024
    assert parse_numa_maps(text) == expected


# Pieces of numa_maps lines, real and odd, so that the fast path meets what only the
# general path can read: spaces doubled, words without a policy, counts out of place,
# malformed or non-ASCII digits, page sizes that are not numbers, NULs and other breaks.
NUMA_MAPS_WORDS = ["7f00", "55d1c0", "default", "prefer:1", "bind:0-1", "interleave:0-3",
                   "anon=5", "dirty=3", "huge", "file=/usr/lib/libc.so.6", "N0=12", "N1=40",
                   "N17=3", "N0=x", "N=4", "N1=²", "Nope", "kernelpagesize_kB=4",
                   "kernelpagesize_kB=2048", "kernelpagesize_kB=", "kernelpagesize_kB=4k",
                   "", "N0=" + "9" * 70]
_any_words = st.lists(st.sampled_from(NUMA_MAPS_WORDS), max_size=3)
# Mostly the kernel's order (address, policy, flags, counts, page size), each part possibly
# replaced by any words, so that a line is almost right more often than by chance.
_numa_maps_line = st.tuples(
    st.sampled_from(["7f00", "55d1c0", "", "N3=1"]),
    st.sampled_from(["default", "prefer:1", "bind:0-1", "", "N0=1"]),
    _any_words,
    st.lists(st.sampled_from(["N0=12", "N1=40", "N17=3", "N0=x", "N1=²", "N1=" + "9" * 70,
                              "N" + "9" * 70 + "=1"]), max_size=3),
    _any_words,
    st.sampled_from(["kernelpagesize_kB=4", "kernelpagesize_kB=2048", "",
                     "kernelpagesize_kB=" + "9" * 70]),
).map(lambda parts: " ".join([parts[0], parts[1], *parts[2], *parts[3], *parts[4], parts[5]]))
numa_maps_text = st.lists(
    st.one_of(_numa_maps_line, st.lists(st.sampled_from(NUMA_MAPS_WORDS), max_size=8).map(" ".join)),
    max_size=12,
).flatmap(lambda lines: st.sampled_from(["\n", "\n\n", "  \n", "\t\n", "\r\n"]).map(
    lambda end: end.join(lines)))


@settings(generated, max_examples=500)
@given(text=numa_maps_text)
def test_numa_maps_totals_agree_with_the_general_path(text: str) -> None:
    # all three sums, the hugetlb pages per node too
    assert numa_maps_sums(text.encode()) == _numa_maps_totals_of_text(text)  # the per-line path


@settings(generated, max_examples=300)
@given(text=numa_maps_text)
def test_hugetlb_sums_are_the_huge_lines_share_of_the_node_sums(text: str) -> None:
    """The hugetlb bytes per node are exactly the node sums of the lines with a ``huge``
    word, read alone; and part of the node sums of the whole file."""
    totals = numa_maps_totals(text.encode())
    huge_lines = "\n".join(line for line in text.splitlines() if "huge" in line.split())
    assert totals.huge_per_node == numa_maps_totals(huge_lines.encode()).per_node
    assert all(size <= totals.per_node[node] for node, size in totals.huge_per_node.items())


def test_hugetlb_pages_per_node_of_kernel_lines() -> None:
    totals = numa_maps_totals(
        b"7f00 default anon=5 dirty=5 N0=2 N1=3 kernelpagesize_kB=4\n"
        b"7f40 prefer:1 file=/dev/hugepages/experts huge dirty=24 N1=20 N0=4 kernelpagesize_kB=2048\n"
        b"7f80 default huge anon=1 N0=1 kernelpagesize_kB=1048576\n"
        b"7fc0 default file=/usr/lib/hugepage_helper.so N0=1 kernelpagesize_kB=4\n"  # not the word
    )
    assert totals.huge_per_node == {0: 4 * 2 * 1024**2 + GiB, 1: 20 * 2 * 1024**2}
    assert totals.per_node == {0: 3 * 4096 + 4 * 2 * 1024**2 + GiB, 1: 3 * 4096 + 20 * 2 * 1024**2}


ODD_TEXTS = ["a\rb", "a\x0bb", "a\x0cb", "a\x1cb", "a\x1db", "a\x1eb", "a\x1fb"]


@pytest.mark.parametrize(("data", "also", "plain"), [
    (b"7f00 default N0=1 kernelpagesize_kB=4\n", "", True),
    ("model name\t: AMD EPYC\n", "", True),
    ("model name\t: AMD EPYC\n", "\t", False),  # numa_maps' fast path splits on spaces
    (b"Name:\tstrata\0", "\0", False),
    ("Name:\tstrata\n", "\0", True),
    ("\u00e9", "", False),  # beyond ASCII: \x85, \u2028 and \u2029 end lines too
    *((odd, "", False) for odd in ODD_TEXTS),
    *((odd.encode(), "", False) for odd in ODD_TEXTS),
])
def test_is_plain(data: str | bytes, also: str, plain: bool) -> None:
    assert is_plain(data, also) is plain


@settings(generated, max_examples=300)
@given(text=st.text(alphabet=st.characters(max_codepoint=0x7f)))
def test_plain_text_splits_as_the_fast_paths_split_it(text: str) -> None:
    """What :func:`is_plain` lets through (tabs refused), ``split("\\n")`` and ``split(" ")``
    cut where ``splitlines()`` and ``split()`` do."""
    if is_plain(text, also="\t"):
        lines = text.split("\n")
        if not text or text.endswith("\n"):
            lines.pop()
        assert text.splitlines() == lines
        assert text.split() == [word for line in lines for word in line.split(" ") if word]


@pytest.mark.parametrize("odd", ["", "\t"])  # the fast path, and the general one
def test_numa_maps_policies_whose_names_hold_a_space(odd: str) -> None:
    per_node, per_policy, _ = numa_maps_totals(
        b"7f00 prefer (many):0-1 anon=6 dirty=6 N0=2 N1=4 kernelpagesize_kB=4\n"
        b"7f20 weighted interleave:0-3 anon=4 N2=4 kernelpagesize_kB=4\n"
        b"7f40 prefer (many)=static:0-1 file=/usr/lib/libc.so.6\n" + odd.encode()
    )
    assert per_node == {0: 2 * 4096, 1: 4 * 4096, 2: 4 * 4096}
    assert per_policy == {"prefer (many):0-1": 6 * 4096, "weighted interleave:0-3": 4 * 4096,
                          "prefer (many)=static:0-1": 0}


def test_numa_maps_totals_of_kernel_lines() -> None:
    per_node, per_policy, huge_per_node = numa_maps_totals(
        b"7f00 prefer:1 anon=5 dirty=5 N0=2 N1=3 kernelpagesize_kB=4\n"
        b"7f20 prefer:1 file=/usr/lib/libc.so.6 mapped=3 mapmax=80 N1=3 kernelpagesize_kB=4\n"
        b"7f40 prefer:1 huge anon=24 dirty=24 N1=24 kernelpagesize_kB=2048\n"
        b"7f60 default file=/usr/lib/libstrata_experts.so\n"
        b"7f80 default anon=1 N0=1 kernelpagesize_kB=4\n"
    )
    assert per_node == {0: 3 * 4096, 1: 6 * 4096 + 24 * 2048 * 1024}
    assert per_policy == {"prefer:1": 8 * 4096 + 24 * 2048 * 1024, "default": 4096}
    assert huge_per_node == {1: 24 * 2048 * 1024}


def test_parse_mounts_decodes_octal_escapes() -> None:
    text = (
        "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
        "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"
        "/dev/sdb1 /mnt/model\\040store ext4 rw 0 0\n"
        "short line\n"
    )
    mounts = parse_mounts(text)
    assert mounts[1] == ("hugetlbfs", "/dev/hugepages", "hugetlbfs", "rw,relatime,pagesize=2M")
    assert mounts[2][1] == "/mnt/model store"
    assert len(mounts) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never", "always"),
        ("always madvise never", None),
        ("", None),
        ("\x00", None),
    ],
)
def test_parse_bracketed_choice(text: str, expected: object) -> None:
    assert parse_bracketed_choice(text) == expected


# -- nothing raises on garbage ------------------------------------------------------
TOLERANT = [
    parse_cpulist,
    parse_cpumap,
    parse_distance,
    parse_meminfo,
    parse_key_values,
    parse_status,
    parse_cpuinfo,
    parse_int,
    parse_numa_maps,
    parse_mounts,
    parse_bracketed_choice,
]

kernelish = st.text(
    alphabet=st.sampled_from(list("0123456789abcdefABCDEF,-:=[] \t\n\x00xNkBode²١")), max_size=200
)
# Pieces of real kernel lines glued in random order, so that odd digits ('²', '١') and
# huge numbers land exactly where a parser converts a word to int.
TOKENS = ["Node 0", "1", "MemTotal:", "kB", "N", "N1=", "kernelpagesize_kB=", "anon", "0-3",
          "ffffffff", "²", "١", "-1", "9" * 5000, "\x00", "[madvise]"]
SEPARATORS = ["", " ", "\t", ":", "=", ",", "-", "\n"]
kernel_lines = st.lists(
    st.tuples(st.sampled_from(TOKENS), st.sampled_from(SEPARATORS)), max_size=40
).map(lambda parts: "".join(token + sep for token, sep in parts))


@pytest.mark.parametrize("parser", TOLERANT, ids=lambda f: f.__name__)
@settings(generated, max_examples=200)
@given(text=st.one_of(st.text(max_size=200), kernelish, kernel_lines))
def test_parsers_never_raise(parser: object, text: str) -> None:
    parser(text)  # type: ignore[operator]


@pytest.mark.parametrize("parser", TOLERANT, ids=lambda f: f.__name__)
def test_parsers_survive_huge_numbers(parser: object) -> None:
    """int() refuses more than 4300 digits; a parser must skip such words, not raise."""
    long = "7" * 5000
    for text in (long, f"0-{long}", f"MemTotal: {long} kB", f"N0={long}", f"N{long}=1"):
        parser(text)  # type: ignore[operator]


numberish = st.one_of(
    st.integers(-5, 2**70).map(str),
    st.sampled_from(["²", "١٢", "9" * 5000, "", "0x1f", "1e3", "\x00", "+1", "1_0"]),
)
FIELD_TEMPLATES = {
    parse_cpulist: "{0}-{1}:{2},{3}",
    parse_distance: "{0} {1} {2} {3}",
    parse_meminfo: "Node {0} MemTotal: {1} kB\nMemFree: {2}\nHugePages_Total: {3}",
    parse_numa_maps: "7f00 default N{0}={1} N{2}=1 kernelpagesize_kB={3}",
    parse_int: "{0}",
}


@pytest.mark.parametrize(
    ("parser", "template"), list(FIELD_TEMPLATES.items()), ids=[f.__name__ for f in FIELD_TEMPLATES]
)
@generated
@given(fields=st.lists(numberish, min_size=4, max_size=4))
def test_odd_numbers_in_number_fields_never_raise(parser: object, template: str, fields: List[str]) -> None:
    """Odd digits ('²', '١'), signs and 5000-digit numbers right where a parser calls int()."""
    parser(template.format(*fields))  # type: ignore[operator]


def test_an_engine_under_preferred_many_follows_a_two_node_plan() -> None:
    """Linux 5.15+ writes the policy as ``prefer (many):0-1``; that is the plan's own, even
    where full nodes made most pages spill elsewhere."""
    from strata_doctor.facts.engine import EngineProcess
    from strata_doctor.rules.binding import BindingPlan, _policy_nodes, _process_follows

    assert _policy_nodes("bind=static:0-1") == _policy_nodes("weighted interleave:0-1") == frozenset({0, 1})
    line = b"7f00 prefer (many):0-1 anon=8 N0=1 N2=7 kernelpagesize_kB=4\n"
    per_node, per_policy, _ = numa_maps_totals(line * 3)
    process = EngineProcess(4242, frozenset(range(8)), frozenset({0, 1}),
                            tuple(sorted(per_node.items())), tuple(sorted(per_policy.items())))
    plan = BindingPlan(frozenset({0, 1}), frozenset({0, 1}), frozenset(range(8)), "preferred-many", ())
    assert _process_follows(process, plan, []) == (True, None)
    elsewhere = plan._replace(mem_nodes=frozenset({2, 3}))  # 7 of 8 pages: not 90% local
    assert _process_follows(process, elsewhere, [])[0] is False
