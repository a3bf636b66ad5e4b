"""numa-plan and the plan_binding API: the prefix a launcher puts before the engine."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from strata_doctor.api import NumaPlan, PlanError, plan_binding
from tests.conftest import HOSTS, UNBOUND_UNIT, run_cli, two_node_files, write_tree

SEED_PREFIX = "numactl --preferred=1 --cpunodebind=1"


def test_api_plans_the_gpu_node(two_node_host: Path) -> None:
    plan = plan_binding(two_node_host, arena_bytes="8GiB", kv_bytes=2**30)
    assert isinstance(plan, NumaPlan)
    assert plan.node == 1 and plan.nodes == (1,) and plan.cpu_nodes == (1,)
    assert plan.cpus == (4, 5, 6, 7) and plan.cpulist == "4-7"
    assert plan.policy == "preferred"
    assert plan.numactl == ("numactl", "--preferred=1", "--cpunodebind=1")
    assert plan.gpu == "0000:81:00.0" and plan.gpu_node == 1
    assert any("node 1" in r for r in plan.reasons)
    assert any("never membind" in r for r in plan.reasons)


def test_api_mirror_host_and_explicit_node(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "h", two_node_files(gpu_node=0, unit_show=UNBOUND_UNIT))
    assert plan_binding(root).numactl == ("numactl", "--preferred=0", "--cpunodebind=0")
    assert plan_binding(root, numa=1).numactl == ("numactl", "--preferred=1", "--cpunodebind=1")
    assert plan_binding(root, numa="1").node == 1


def test_api_off_binds_nothing(two_node_host: Path) -> None:
    plan = plan_binding(two_node_host, numa="off")
    assert not plan.binds and plan.numactl == () and plan.policy == "none" and plan.node is None
    assert any("numa=off" in r for r in plan.reasons)


def test_api_single_node_host_binds_nothing(tmp_path: Path) -> None:
    files = {
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
        "/sys/devices/system/node/node0/distance": "10\n",
        "/sys/devices/system/cpu/online": "0-3\n",
    }
    plan = plan_binding(write_tree(tmp_path / "one", files))
    assert plan.numactl == () and any("one NUMA node" in r for r in plan.reasons)


def test_api_rejects_bad_arguments(two_node_host: Path) -> None:
    with pytest.raises(PlanError, match="no such NUMA node"):
        plan_binding(two_node_host, numa=7)
    with pytest.raises(PlanError, match="numa"):
        plan_binding(two_node_host, numa="sometimes")
    with pytest.raises(PlanError, match=r"0000:99:00\.0"):
        plan_binding(two_node_host, gpu="99:00.0")
    with pytest.raises(PlanError, match="arena"):
        plan_binding(two_node_host, arena_bytes="lots")


def test_api_spans_the_socket_when_the_arena_does_not_fit_one_sub_node(tmp_path: Path) -> None:
    files = two_node_files()
    node = "/sys/devices/system/node"
    # Make the two nodes sub-nodes of one socket (SNC2): distance 11.
    files[f"{node}/node0/distance"] = "10 11\n"
    files[f"{node}/node1/distance"] = "11 10\n"
    files["/proc/sys/kernel/osrelease"] = "6.8.0\n"
    plan = plan_binding(write_tree(tmp_path / "snc", files), arena_bytes="20GiB")
    assert plan.nodes == (0, 1) and plan.node is None and plan.policy == "preferred-many"
    assert plan.numactl == ("numactl", "--preferred-many=0,1", "--cpunodebind=0,1")


def test_cli_shell_prints_the_prefix(two_node_host: Path) -> None:
    result = run_cli(["numa-plan", "--root", str(two_node_host), "--format", "shell"])
    assert result.exit_code == 0
    assert result.stdout == SEED_PREFIX + "\n"
    assert shlex.split(result.stdout) == SEED_PREFIX.split()


def test_cli_shell_prints_nothing_for_off(two_node_host: Path) -> None:
    result = run_cli(["numa-plan", "--root", str(two_node_host), "--format", "shell", "--numa", "off"])
    assert result.exit_code == 0 and result.stdout == ""


def test_cli_json_and_text(two_node_host: Path) -> None:
    result = run_cli(["numa-plan", "--root", str(two_node_host), "--format", "json"])
    data = json.loads(result.stdout)
    assert data["schema"] == "strata-doctor/numa-plan/v1"
    assert data["node"] == 1 and data["cpulist"] == "4-7" and data["policy"] == "preferred"
    assert data["numactl"] == SEED_PREFIX.split()
    text = run_cli(["numa-plan", "--root", str(two_node_host)]).stdout
    assert "bind to node 1" in text and SEED_PREFIX in text


def test_cli_usage_errors_exit_2(two_node_host: Path) -> None:
    result = run_cli(["numa-plan", "--root", str(two_node_host), "--numa", "9"])
    assert result.exit_code == 2 and "no such NUMA node" in result.stderr
    result = run_cli(["numa-plan", "--root", str(two_node_host), "--numa", "maybe"])
    assert result.exit_code == 2


def test_cli_is_listed() -> None:
    assert "numa-plan" in run_cli(["--help"]).stdout


@pytest.mark.skipif(not (HOSTS / "seed-box").is_dir(), reason="seed-box fixture not present")
def test_seed_box_prefix() -> None:
    result = run_cli(["numa-plan", "--root", str(HOSTS / "seed-box"), "--format", "shell"])
    assert result.stdout == SEED_PREFIX + "\n"
