"""transparent-hugepages names the pools of other page sizes the hugepages check counts:
"there is no hugepage pool" beside 128 free 2 MiB pages and a 1 GiB default
(two-page-sizes) was false (docs/checks/transparent-hugepages.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List, Tuple

from tests.conftest import HOSTS, check_json, copy_host, findings_of

HOST = HOSTS / "two-page-sizes"
MIB2_DIR = "hugepages/hugepages-2048kB"


def _thp(root: Path) -> Tuple[str, List[str]]:
    """The enabled finding's summary and its evidence sources."""
    (found,) = [f for f in findings_of(check_json(root, "transparent-hugepages"),
                                       "transparent-hugepages").values() if f["id"] == "madvise"]
    return found["summary"], [e["source"] for e in found["evidence"]]


def test_the_reason_names_the_other_size_and_its_node() -> None:
    summary, sources = _thp(HOST)
    assert summary.endswith(
        "(there is no pool of the default hugepage size, 1 GiB, so the engine (hugepages: auto) "
        "uses THP; MAP_HUGETLB without a size flag never draws on pools of other sizes "
        "(128 2 MiB pages on node 0))")
    assert "there is no hugepage pool" not in summary and "None" not in summary
    assert sources[-2:] == [f"/sys/kernel/mm/{MIB2_DIR}", f"/sys/devices/system/node/node0/{MIB2_DIR}"]


def test_the_same_count_as_the_hugepages_check() -> None:
    # One fact, one count: the clause THP quotes is the one hugepages/no-pool gives (told in
    # the unused pool's detail, as the one row of hugepages).
    data = check_json(HOST, "hugepages", "transparent-hugepages")
    no_pool = findings_of(data, "hugepages")["unused-pool"]["detail"]
    summary = findings_of(data, "transparent-hugepages")["madvise"]["summary"]
    assert "(128 2 MiB pages on node 0)" in no_pool and "(128 2 MiB pages on node 0)" in summary


def test_a_size_only_the_nodes_show_is_named(tmp_path: Path) -> None:
    tree = copy_host(HOST, tmp_path / "tree")
    shutil.rmtree(tree / "sys/kernel/mm" / MIB2_DIR)
    summary, sources = _thp(tree)
    assert "(128 2 MiB pages on node 0))" in summary
    assert f"/sys/devices/system/node/node*/{MIB2_DIR}" in sources


def test_no_pool_of_any_size_keeps_the_plain_words(tmp_path: Path) -> None:
    tree = copy_host(HOST, tmp_path / "tree")
    for folder in (tree / "sys/kernel/mm" / MIB2_DIR, tree / "sys/devices/system/node/node0" / MIB2_DIR):
        for name in ("nr_hugepages", "free_hugepages"):
            (folder / name).write_text("0\n")
    summary, sources = _thp(tree)
    assert summary.endswith("(there is no hugepage pool, so the engine (hugepages: auto) uses THP)")
    assert not [s for s in sources if "hugepages-" in s]
