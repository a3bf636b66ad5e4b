"""Every page size's pool counts in what the hugepages check says is held back, global and
per node, whatever the default size is (two-page-sizes: a 1 GiB default with an empty
pool, and 128 free 2 MiB pages on node 0)."""

from __future__ import annotations

import shutil
from pathlib import Path

from strata_doctor.facts.hugepage_pools import NodePool, PagePool, nodes_pools
from strata_doctor.rules.pool import OtherSizes
from tests.conftest import HOSTS, check_json, copy_host, findings_of

MIB2 = 2 * 1024**2
HOST = HOSTS / "two-page-sizes"


def test_the_nodes_sum_to_a_pool_per_size() -> None:
    nodes = (NodePool(0, MIB2, 100, 90), NodePool(1, MIB2, 28, 28, 2), NodePool(0, 1024**3, 0, 0))
    (pool,) = nodes_pools(nodes)  # the empty 1 GiB size holds nothing back: no pool
    assert (pool.size, pool.total, pool.free, pool.surplus) == (MIB2, 128, 118, 2)
    assert pool.source == "/sys/devices/system/node/node*/hugepages/hugepages-2048kB"


def test_other_sizes_are_worded_with_their_nodes() -> None:
    pool = PagePool(MIB2, 128, 128)
    one = OtherSizes((pool,), (NodePool(0, MIB2, 128, 128),))
    two = OtherSizes((pool,), (NodePool(0, MIB2, 100, 100), NodePool(1, MIB2, 28, 28)))
    three = OtherSizes((pool,), (NodePool(0, MIB2, 100, 100), NodePool(1, MIB2, 20, 20),
                                 NodePool(2, MIB2, 8, 8)))
    assert one.text == "128 2 MiB pages on node 0"
    assert two.text == "128 2 MiB pages, 100 on node 0 and 28 on node 1"
    assert three.text == "128 2 MiB pages, 100 on node 0, 20 on node 1 and 8 on node 2"
    assert OtherSizes((pool,), ()).text == "128 2 MiB pages" and one.bytes == 128 * MIB2


def test_a_second_size_is_not_called_no_memory_held_back() -> None:
    found = findings_of(check_json(HOST, "hugepages"), "hugepages")
    assert list(found) == ["unused-pool"]  # no-pool, fine, is told in its detail
    unused = found["unused-pool"]
    assert unused["detail"].endswith(
        "The rest is fine: no hugepage pool of the default size (1 GiB): pools of other sizes hold "
        "back 256.00 MiB (128 2 MiB pages on node 0), and the arena uses THP (hugepages: auto).")
    assert unused["summary"].startswith("pool of 128 2 MiB pages (256.00 MiB) that nobody uses")
    assert [e["source"] for e in unused["evidence"]][:2] == [
        "/sys/kernel/mm/hugepages/hugepages-2048kB",
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB"]
    (action,) = unused["fix"]["actions"]
    assert action["target"] == "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
    assert action["value"] == "0"


def test_a_size_only_the_nodes_show_still_counts(tmp_path: Path) -> None:
    """A trimmed capture without the global folder: the nodes' folders tell the pool."""
    tree = copy_host(HOST, tmp_path / "tree")
    shutil.rmtree(tree / "sys/kernel/mm/hugepages/hugepages-2048kB")
    found = findings_of(check_json(tree, "hugepages"), "hugepages")
    assert "pools of other sizes hold back 256.00 MiB (128 2 MiB pages on node 0)" in \
        found["unused-pool"]["detail"]
    assert found["unused-pool"]["evidence"][0]["source"] == \
        "/sys/devices/system/node/node*/hugepages/hugepages-2048kB"


def test_no_pool_of_any_size_keeps_its_words() -> None:
    found = findings_of(check_json(HOSTS / "server-no-oomd", "hugepages"), "hugepages")
    assert found["no-pool"]["summary"].startswith("no hugepage pool: no memory is held back, ")
