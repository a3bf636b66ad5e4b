"""oomd/trap-chain says how its first link breaks as the hugepages fix will act: where the
pool's other users may need it and the config does not say ``release_pool: true``, the fix
of hugepages/trap leaves the pool alone, so ``vm.nr_hugepages = 0`` is no fix that ends the
chain (docs/checks/oomd.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from strata_doctor.rules.oomd import ChainBreak
from strata_doctor.rules.pool_users import PoolUsers
from tests.conftest import HOSTS, check_json, copy_host, findings_of

MIB2 = 2 * 1024**2
SHM_WORDS = "vm.hugetlb_shm_group = 1001 (group 1001 may make SHM_HUGETLB segments)"
PLAIN = "Break the first link: vm.nr_hugepages = 0 (the fix of hugepages/trap) ends the chain;"


def _users(shm_group: int) -> PoolUsers:
    return PoolUsers((), (), (), (), shm_group, MIB2)


def test_the_words_follow_the_decision() -> None:
    assert ChainBreak(_users(0), False, "/etc/strata-doctor.yaml").text + ";" == PLAIN
    assert ChainBreak(_users(1001), True, "/etc/strata-doctor.yaml").text + ";" == PLAIN
    by_hand = ChainBreak(_users(1001), False, "/etc/engine.yaml")
    assert by_hand.by_hand
    assert by_hand.text == (
        "Break the first link by hand: the fix of hugepages/trap leaves the pool alone, as other "
        f"programs may need it: {SHM_WORDS}. Move them off the pool or shrink it to what they "
        "need, or, once sure none needs it, add `release_pool: true` to /etc/engine.yaml and run "
        "`strata-doctor fix` again, which then sets vm.nr_hugepages = 0 and ends the chain")


def _shared_seed(tmp_path: Path) -> Path:
    """The seed box, its trap and chain as they were, with a group allowed SHM_HUGETLB
    segments and a second hugetlbfs mount of the pool's size: users the engine is not."""
    tree = copy_host("seed-box", tmp_path / "tree")
    (tree / "proc/sys/vm/hugetlb_shm_group").write_text("1001\n")
    with open(tree / "proc/mounts", "a") as mounts:
        mounts.write("hugetlbfs /mnt/huge hugetlbfs rw,relatime,pagesize=2M 0 0\n")
    (tree / "mnt/huge").mkdir(parents=True)
    return tree


def _findings(root: Path, *args: str) -> Dict[str, Dict[str, Dict[str, Any]]]:
    data = check_json(root, "oomd", "hugepages", *args)
    return {"oomd": findings_of(data, "oomd"), "hugepages": findings_of(data, "hugepages")}


def test_the_seed_box_keeps_its_words() -> None:
    found = _findings(HOSTS / "seed-box")
    assert PLAIN in found["oomd"]["trap-chain"]["detail"]


def test_a_pool_left_alone_is_broken_by_hand(tmp_path: Path) -> None:
    found = _findings(_shared_seed(tmp_path))
    detail = found["oomd"]["trap-chain"]["detail"]
    users = f"hugetlbfs mounted at /mnt/huge (no files now); {SHM_WORDS}"
    assert "vm.nr_hugepages = 0 (the fix of hugepages/trap) ends the chain" not in detail
    assert (f"Break the first link by hand: the fix of hugepages/trap leaves the pool alone, as "
            f"other programs may need it: {users}. Move them off the pool or shrink it") in detail
    assert "add `release_pool: true` to /etc/strata-doctor.yaml" in detail
    # the same decision as the hugepages fix: it writes nothing for the pool
    trap = found["hugepages"]["trap"]
    assert trap["summary"].endswith("so the fix leaves it alone: " + users)
    assert not trap["fix"]["actions"] and "None" not in detail


def test_release_pool_brings_the_plain_words_back(tmp_path: Path) -> None:
    tree = _shared_seed(tmp_path)
    config = tree / "etc/strata-doctor.yaml"
    config.write_text(config.read_text() + "release_pool: true\n")
    found = _findings(tree)
    assert PLAIN in found["oomd"]["trap-chain"]["detail"]
    assert [a["target"] for a in found["hugepages"]["trap"]["fix"]["actions"]] == ["vm.nr_hugepages"]
