"""Before a fix gives a hugepage pool away, the hugepages check looks for its other users,
names them with their numbers, and leaves the pool alone unless the config opts in
(``release_pool: true``). ve-cards-pool: 8 NEC SX-Aurora vector engines and their veos."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict

import pytest

from strata_doctor.config import ConfigError, parse_config
from strata_doctor.facts.pool_users import device_kind
from strata_doctor.rules.pool_users import is_engines
from tests.conftest import HOSTS, check_json, copy_host, findings_of, run_cli

VE = HOSTS / "ve-cards-pool"
VE_WORDS = ("8 NEC SX-Aurora vector engines (1bcf:001c, driver ve_drv, at 0000:03:00.0, "
            "0000:04:00.0, 0000:05:00.0, 0000:06:00.0, 0000:83:00.0, 0000:84:00.0, 0000:85:00.0, "
            "0000:86:00.0); veos (8 processes, pids 1400, 1401, 1402, 1403, ...): 2,048 2 MiB pages "
            "(4.00 GiB)")


def hugepages(root: Path, *args: str) -> Dict[str, Dict[str, Any]]:
    return findings_of(check_json(root, "hugepages", *args), "hugepages")


@pytest.mark.parametrize(("vendor", "driver", "cls", "kind"), [
    (0x1BCF, "ve_drv", 0x0B4000, "ve"),
    (0x1BCF, None, 0x0B4000, "ve"),  # a card whose driver is not loaded yet
    (0x8086, "vfio-pci", 0x020000, "dpdk"),
    (0x8086, "igb_uio", 0x020000, "dpdk"),
    (0x8086, "uio_pci_generic", 0x020000, "dpdk"),
    (0x10DE, "vfio-pci", 0x030200, None),  # a GPU passed to a VM is no DPDK NIC
    (0x8086, "i40e", 0x020000, None),
])
def test_device_kinds(vendor: int, driver: str, cls: int, kind: str) -> None:
    assert device_kind(vendor, driver, cls) == kind


def test_the_engines_own_tools_are_not_other_users() -> None:
    assert is_engines("strata", "strata.service") and is_engines("strata-bench", "strata.service")
    assert not is_engines("stratus", "strata.service") and not is_engines("veos", "strata.service")


def test_release_pool_is_a_yes_or_no_setting() -> None:
    assert parse_config({"release_pool": True}, "f").release_pool
    assert not parse_config({"release_pool": "off"}, "f").release_pool
    assert not parse_config({}, "f").release_pool
    with pytest.raises(ConfigError, match="release_pool: expected true or false"):
        parse_config({"release_pool": "maybe"}, "f")


def test_vector_engines_are_named_and_the_pool_left_alone() -> None:
    unusable = hugepages(VE)["unusable-pool"]
    assert unusable["summary"].endswith("; other users may need it, so the fix leaves it alone: " + VE_WORDS)
    assert "add `release_pool: true` to /etc/strata-doctor.yaml" in unusable["detail"]
    fix = unusable["fix"]
    assert not fix["files"] and not fix["actions"]
    (step,) = fix["manual"]
    assert "vm.nr_hugepages = 0" in step and "release_pool: true" in step


def test_the_plan_writes_nothing_for_the_pool() -> None:
    result = run_cli(["fix", "--root", str(VE)])
    assert result.exit_code == 0, result.stderr
    assert "CREATE" not in result.stdout and "$ sysctl" not in result.stdout
    assert "Nothing to change: the fix for hugepages/unusable-pool is a step left to you" in result.stdout


def test_the_config_opts_in(tmp_path: Path) -> None:
    config = tmp_path / "strata-doctor.yaml"
    config.write_text((VE / "etc/strata-doctor.yaml").read_text() + "release_pool: true\n")
    unusable = hugepages(VE, "--config", str(config))["unusable-pool"]
    assert unusable["summary"].endswith(", but release_pool: true lets the fix release it: " + VE_WORDS)
    assert [(a["kind"], a["target"], a["value"]) for a in unusable["fix"]["actions"]] == [
        ("sysctl", "vm.nr_hugepages", "0")]
    # sorts after the host's own 70-ve-hugepages.conf
    assert unusable["fix"]["files"][0]["path"] == "/etc/sysctl.d/71-strata-doctor.conf"


def test_the_seed_box_still_gets_its_fix() -> None:
    """strata-bench, the seed box's taker, runs the engine's own code: no other user."""
    trap = hugepages(HOSTS / "seed-box")["trap"]
    assert "other users" not in trap["summary"]
    assert [a["target"] for a in trap["fix"]["actions"]] == ["vm.nr_hugepages"]


def _other_size_pool(tmp_path: Path) -> Path:
    return copy_host(HOSTS / "two-page-sizes", tmp_path / "tree")


def test_a_mount_of_that_size_and_the_shm_group_are_named(tmp_path: Path) -> None:
    tree = _other_size_pool(tmp_path)
    with open(tree / "proc/mounts", "a") as mounts:
        mounts.write("nodev /mnt/huge2m hugetlbfs rw,relatime,pagesize=2M 0 0\n"
                     "nodev /mnt/huge1g hugetlbfs rw,relatime,pagesize=1G 0 0\n")
    (tree / "mnt/huge2m").mkdir(parents=True)
    (tree / "mnt/huge1g").mkdir(parents=True)
    (tree / "proc/sys/vm/hugetlb_shm_group").write_text("1001\n")
    unused = hugepages(tree)["unused-pool"]
    assert unused["summary"].endswith(
        "so the fix leaves it alone: hugetlbfs mounted at /mnt/huge2m (no files now); "
        "vm.hugetlb_shm_group = 1001 (group 1001 may make SHM_HUGETLB segments)")
    assert not unused["fix"]["actions"]


def test_a_nic_bound_for_dpdk_is_named(tmp_path: Path) -> None:
    tree = _other_size_pool(tmp_path)
    link = tree / "sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0/driver"
    os.unlink(link)
    os.symlink("../../../../bus/pci/drivers/vfio-pci", link)
    unused = hugepages(tree)["unused-pool"]
    assert unused["summary"].endswith(
        "so the fix leaves it alone: 1 NIC bound for DPDK (8086:1572, driver vfio-pci, at 0000:02:00.0)")


def test_nothing_else_leaves_the_fix_as_it_was() -> None:
    unused = hugepages(HOSTS / "two-page-sizes")["unused-pool"]
    assert "other users" not in unused["summary"] and unused["fix"]["actions"]
