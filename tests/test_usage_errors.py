"""Every wrong name is a usage error: one line on stderr, exit 2, naming what is known."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from tests.conftest import copy_host, run_cli, usage_error, write_tree


@pytest.mark.parametrize("args", [
    ["check", "--ignore", "bogus"],
    ["check", "--ignore", "bogus/finding"],
    ["fix", "--only", "bogus"],
    ["fix", "--skip", "bogus"],
    ["report", "--ignore", "bogus"],
])
def test_unknown_ids_are_refused_with_the_known_ones(two_node_host: Path, args: List[str]) -> None:
    line = usage_error([*args, "--root", str(two_node_host)])
    assert "unknown check 'bogus'" in line
    assert "numa-binding" in line and "gpu-placement" in line


def test_positional_ids_list_the_known_ones(two_node_host: Path) -> None:
    line = usage_error(["check", "bogus", "--root", str(two_node_host)])
    assert "unknown check 'bogus' (known: " in line and "numa-binding" in line


def test_known_ids_still_pass(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--ignore", "numa-binding/unbound"])
    assert result.exit_code in (0, 1), result.stderr
    assert run_cli(["fix", "--root", str(two_node_host), "--only", "numa-binding"]).exit_code == 0


def test_fix_numa_node_that_does_not_exist(two_node_host: Path) -> None:
    line = usage_error(["fix", "--root", str(two_node_host), "--numa", "7"])
    assert line.endswith("--numa 7: no such NUMA node on this host (nodes: 0,1)")


def test_config_numa_node_that_does_not_exist(two_node_host: Path) -> None:
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "numa: 7\n"})
    for command in ("check", "fix", "report"):
        line = usage_error([command, "--root", str(two_node_host)])
        assert line.endswith("numa: 7: no such NUMA node on this host (nodes: 0,1)"), line


def test_numa_plan_says_it_the_same_way(two_node_host: Path) -> None:
    line = usage_error(["numa-plan", "--root", str(two_node_host), "--numa", "7"])
    assert "no such NUMA node on this host (nodes: 0,1)" in line


@pytest.mark.parametrize("command", ["check", "fix", "report", "map"])
def test_a_folder_that_is_not_a_host(tmp_path: Path, command: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    line = usage_error([command, "--root", str(empty)])
    assert f"does not look like a host: {empty} has none of sys/devices/system/node, " \
        "sys/devices/system/cpu, proc/meminfo" in line


def test_proc_meminfo_alone_is_a_host(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "t", {"/proc/meminfo": "MemTotal: 1024 kB\n"})
    assert run_cli(["check", "--root", str(tree)]).exit_code in (0, 1)


def test_bundle_and_root_exclude_each_other(two_node_host: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.gz"
    made = run_cli(["report", "--root", str(two_node_host), "--bundle", str(bundle), "--output", "-"])
    assert made.exit_code in (0, 1), made.stderr
    line = usage_error(["check", "--bundle", str(bundle), "--root", str(two_node_host)])
    assert "--bundle and --root exclude each other" in line


@pytest.mark.parametrize("command", ["check", "fix", "map"])
def test_a_bundle_that_does_not_exist(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "missing.tar.gz"
    line = usage_error([command, "--bundle", str(missing)])
    assert line == f"strata-doctor: error: --bundle {missing}: no such file"


@pytest.mark.parametrize("command", [["check"], ["fix"], ["fix", "--revert"], ["report"], ["map"]])
def test_a_root_that_is_missing_or_a_file_is_one_line(tmp_path: Path, command: List[str]) -> None:
    missing = tmp_path / "missing"
    assert usage_error([*command, "--root", str(missing)]) == \
        f"strata-doctor: error: --root {missing}: no such folder"
    bundle = tmp_path / "host.tar.gz"
    bundle.write_bytes(b"")
    assert usage_error([*command, "--root", str(bundle)]).endswith(
        f"--root {bundle}: not a folder; a report bundle is replayed with --bundle")


def test_a_bundle_that_is_a_folder(tmp_path: Path) -> None:
    line = usage_error(["check", "--bundle", str(tmp_path)])
    assert line.endswith(f"--bundle {tmp_path}: a folder, not a bundle file; replay an unpacked "
                         f"bundle with --root {tmp_path}/strata-doctor-bundle")


@pytest.mark.parametrize("value", ["nonsense", "0000:84:00", "84:00.9", "zz:00.0"])
def test_gpu_that_is_not_a_pci_address(two_node_host: Path, value: str) -> None:
    line = usage_error(["check", "--root", str(two_node_host), "--gpu", value])
    assert line.endswith(f"--gpu {value}: not a PCI address (expected e.g. 0000:84:00.0 or 84:00.0)")


def test_gpu_address_not_on_the_host_still_lists_the_found_ones(two_node_host: Path) -> None:
    line = usage_error(["check", "--root", str(two_node_host), "--gpu", "0000:99:00.0"])
    assert "0000:81:00.0" in line


@pytest.mark.parametrize("value, says", [
    ("1024", "has no unit"),
    ("0GiB", "is zero"),
    ("0", "'0' is zero"),
    ("0.0", "'0.0' is zero"),
    ("99999999999999999999999TiB", "more than 1 PiB"),
    ("2PiB", "'2PiB' is more than 1 PiB"),
    ("1.001PiB", "is more than 1 PiB"),
    ("1125899906842625B", "is more than 1 PiB"),  # 1 PiB and one byte
])
def test_sizes_need_a_unit_and_a_sane_value(two_node_host: Path, value: str, says: str) -> None:
    line = usage_error(["check", "--root", str(two_node_host), "--arena", value])
    assert says in line and "arena" in line


@pytest.mark.parametrize("value", ["1PiB", "1pib", "1P", "1024TiB", "1PB", "1125899906842624B"])
def test_one_pib_is_the_largest_size_taken(two_node_host: Path, value: str) -> None:
    """The limit says "more than 1 PiB": 1 PiB itself (in any unit the parser knows) is taken."""
    result = run_cli(["check", "--root", str(two_node_host), "--kv", value, "--arena", "1GiB"])
    assert result.exit_code in (0, 1), result.stderr
    assert "not a size" not in result.stderr


@pytest.mark.parametrize("value", ["0", "0GiB"])
def test_a_zero_kv_needs_no_unit(two_node_host: Path, value: str) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--arena", "10GiB", "--kv", value])
    assert result.exit_code in (0, 1), result.stderr


def test_zero_is_said_before_the_unit() -> None:
    from strata_doctor.facts.parse import parse_setting_size

    with pytest.raises(ValueError, match="is zero") as refused:
        parse_setting_size("0")
    assert "0GiB" not in str(refused.value)
    assert parse_setting_size("0", zero_ok=True) == 0


def test_config_size_without_unit(two_node_host: Path) -> None:
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "kv: '1024'\n"})
    line = usage_error(["check", "--root", str(two_node_host)])
    assert "kv: '1024' has no unit" in line


def test_config_plain_integer_is_bytes_as_bundles_write_it(two_node_host: Path) -> None:
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "arena: 1073741824\nkv: 0\n"})
    assert run_cli(["check", "--root", str(two_node_host)]).exit_code in (0, 1)
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "arena: 0\n"})
    assert "arena: '0' is zero" in usage_error(["check", "--root", str(two_node_host)])


@pytest.mark.parametrize("value, expected", [("1G", 2**30), ("1GiB", 2**30), ("1GB", 10**9),
                                             ("1.5T", 1.5 * 2**40), ("512MiB", 512 * 2**20)])
def test_size_units_are_as_documented(value: str, expected: float) -> None:
    from strata_doctor.facts.parse import parse_setting_size

    assert parse_setting_size(value) == expected


def test_fixture_copy_still_runs(tmp_path: Path) -> None:
    tree = copy_host("seed-box", tmp_path / "seed")
    assert run_cli(["check", "--root", str(tree)]).exit_code in (0, 1)
