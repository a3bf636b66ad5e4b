"""The check command's contract: exit codes, JSON on stdout alone, colour, --ignore, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from strata_doctor import registry
from strata_doctor.model import Finding
from tests.conftest import UNBOUND_UNIT, run_cli, two_node_files, write_tree


def test_unbound_two_node_host_fails_with_binding_error(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host)])
    assert result.exit_code == 1
    assert "✗ numa-binding" in result.stdout
    assert "numactl --preferred=1 --cpunodebind=1" in result.stdout
    assert "21/10 = 2.1x" in result.stdout


def test_json_is_alone_on_stdout_and_parses(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--format", "json"])
    data = json.loads(result.stdout)
    assert data["schema"] == "strata-doctor/check/v1"
    assert data["exit_code"] == result.exit_code == 1
    nodes = {n["id"]: n for n in data["facts"]["numa"]["nodes"]}
    assert nodes[1]["cpus"] == [4, 5, 6, 7]
    assert nodes[1]["distances"] == {"0": 21, "1": 10}
    assert nodes[1]["memory_total_bytes"] == 16 * 1024**3
    gpu = data["facts"]["gpus"][0]
    assert (gpu["address"], gpu["numa_node"], gpu["compute"]) == ("0000:81:00.0", 1, True)
    binding = next(f for f in data["findings"] if f["check"] == "numa-binding")
    assert binding["severity"] == "error"
    assert binding["fix"]["files"][0]["path"].endswith("strata.service.d/60-strata-doctor-numa.conf")


def test_ignore_downgrades_but_still_shows(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--ignore", "numa-binding"])
    assert result.exit_code == 0
    assert "(ignored)" in result.stdout
    assert "not bound" in result.stdout


def test_fail_on_warning(tmp_path: Path) -> None:
    files = two_node_files()
    files["/.strata-doctor/commands/systemctl-show-strata.service.txt"] = (
        "LoadState=loaded\nMainPID=0\nNUMAPolicy=preferred\nNUMAMask=1\nCPUAffinity=4-7\n"
    )
    root = write_tree(tmp_path / "h", files)
    assert run_cli(["check", "--root", str(root)]).exit_code == 0
    # the GPU link is unknown and there is no warning source except... add one:
    (root / "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/current_link_width").write_text("8\n")
    (root / "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/max_link_width").write_text("16\n")
    assert run_cli(["check", "--root", str(root)]).exit_code == 0
    assert run_cli(["check", "--root", str(root), "--fail-on", "warning"]).exit_code == 1


def test_no_color_without_terminal_and_under_no_color(two_node_host: Path) -> None:
    plain = run_cli(["check", "--root", str(two_node_host)])
    assert "\x1b[" not in plain.stdout
    forced = run_cli(["check", "--root", str(two_node_host)], env={"NO_COLOR": "1"})
    assert "\x1b[" not in forced.stdout


def test_quiet_prints_one_line_per_error(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--quiet"])
    lines = result.stdout.splitlines()
    assert result.exit_code == 1
    assert len(lines) == 1
    assert lines[0].startswith("strata-doctor: error: numa-binding/unbound:")
    assert "strata-doctor fix --only numa-binding --apply" in lines[0]


def test_quiet_prints_nothing_when_ready(tmp_path: Path) -> None:
    files = two_node_files()
    files["/.strata-doctor/commands/systemctl-show-strata.service.txt"] = (
        "LoadState=loaded\nMainPID=0\nNUMAPolicy=preferred\nNUMAMask=1\nCPUAffinity=4-7\n"
    )
    result = run_cli(["check", "--root", str(write_tree(tmp_path / "h", files)), "-q"])
    assert (result.exit_code, result.stdout) == (0, "")


def test_bad_config_is_one_line_exit_2(two_node_host: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("arena: lots\n")
    result = run_cli(["check", "--root", str(two_node_host), "--config", str(config)])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert str(config) in result.stderr and "arena" in result.stderr and "lots" in result.stderr


def test_unknown_config_key_and_invalid_yaml(two_node_host: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("arenna: 4GiB\n")
    result = run_cli(["check", "--root", str(two_node_host), "--config", str(config)])
    assert result.exit_code == 2 and "'arenna'" in result.stderr
    config.write_text("arena: [\n")
    result = run_cli(["check", "--root", str(two_node_host), "--config", str(config)])
    assert result.exit_code == 2 and "not valid YAML" in result.stderr


def test_default_config_under_root_is_read(two_node_host: Path) -> None:
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "arena: 20GiB\nkv: 1GiB\n"})
    result = run_cli(["check", "arena-fit", "--root", str(two_node_host)])
    assert result.exit_code == 1
    assert "does not fit node 1" in result.stdout
    assert "(16.00 GiB): 9.00 GiB short" in result.stdout  # 20 + 1 + 4 headroom - 16


def test_arena_option_overrides_config(two_node_host: Path) -> None:
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "arena: 20GiB\n"})
    result = run_cli(["check", "arena-fit", "--root", str(two_node_host), "--arena", "8GiB"])
    assert result.exit_code == 0
    assert "fits node 1" in result.stdout


def test_unknown_check_and_bad_gpu_are_usage_errors(two_node_host: Path) -> None:
    assert run_cli(["check", "no-such-check", "--root", str(two_node_host)]).exit_code == 2
    result = run_cli(["check", "--root", str(two_node_host), "--gpu", "00:02.0"])
    assert result.exit_code == 2 and "0000:00:02.0" in result.stderr


def test_a_crashing_check_is_its_own_row(two_node_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(registry.Check):
        """Always raises."""

        id = "broken"
        title = "Broken"

        def run(self, ctx: object) -> Iterator[Finding]:  # type: ignore[override]
            raise RuntimeError("boom")

    original = registry.builtin_checks
    monkeypatch.setattr(registry, "builtin_checks", lambda: (*original(), Broken))
    result = run_cli(["check", "--root", str(two_node_host)])
    assert result.exit_code == 3
    assert "broken" in result.stdout and "crashed: RuntimeError: boom" in result.stdout
    assert "numa-binding" in result.stdout  # the others still ran


def test_mirror_case_binds_node_0(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "h", two_node_files(gpu_node=0, unit_show="LoadState=loaded\n"))
    result = run_cli(["check", "numa-binding", "--root", str(root)])
    assert "numactl --preferred=0 --cpunodebind=0" in result.stdout


def test_list_checks_names_every_builtin() -> None:
    result = run_cli(["list-checks"])
    for cls in registry.builtin_checks():
        assert cls.id in result.stdout


def test_live_host_runs_and_exits_0_or_1() -> None:
    # This machine's specifics are unknown to the suite; it must simply not crash.
    result = run_cli(["check", "--format", "json"])
    assert result.exit_code in (0, 1)
    assert json.loads(result.stdout)["schema"] == "strata-doctor/check/v1"


def test_memory_only_node_is_not_the_remote_cost(tmp_path: Path) -> None:
    # Unbound, first touch lands on CPU nodes only: the 28 to a CXL node is not the penalty.
    files = two_node_files(unit_show=UNBOUND_UNIT)
    node = "/sys/devices/system/node"
    files[f"{node}/node0/distance"] = "10 21 28\n"
    files[f"{node}/node1/distance"] = "21 10 28\n"
    files[f"{node}/node2/distance"] = "28 28 10\n"
    files[f"{node}/node2/meminfo"] = "Node 2 MemTotal:       8388608 kB\n"
    root = write_tree(tmp_path / "h", files)
    result = run_cli(["check", "numa-topology", "numa-binding", "--root", str(root)])
    assert "21/10 = 2.1x" in result.stdout and "28/10" not in result.stdout
    assert "distance 10/21" in result.stdout
    # The memory-only node is an info row: the ok layout row stays its own (one_row folds
    # an ok row only into a warning or an error).
    data = json.loads(run_cli(["check", "numa-topology", "--root", str(root), "--format", "json"]).stdout)
    assert [f["id"] for f in data["findings"]] == ["layout", "memory-only-node"]


def test_low_free_names_every_page_size_of_the_nodes_pool(tmp_path: Path) -> None:
    # Node 1 has 8 GiB free of 16 GiB; 4 x 1 GiB pages sit in its pool. 20 GiB needed.
    files = two_node_files(unit_show=UNBOUND_UNIT)
    pool = "/sys/devices/system/node/node1/hugepages/hugepages-1048576kB"
    files[f"{pool}/nr_hugepages"] = "4\n"
    files[f"{pool}/free_hugepages"] = "4\n"
    files["/etc/strata-doctor.yaml"] = "arena: 10GiB\nheadroom: 2GiB\n"
    root = write_tree(tmp_path / "h", files)
    data = json.loads(run_cli(["check", "arena-fit", "--root", str(root), "--format", "json"]).stdout)
    low = next(f for f in data["findings"] if f["id"] == "low-free")
    assert "4.00 GiB of the node's memory sits in the hugepage pool" in low["detail"]
