"""The binding's words follow what the plan binds: one numactl line everywhere
(--physcpubind= where the plan leaves isolated CPUs out), the CPUs the engine really runs
on unbound, the managed-irq-only count, and how to choose a node where there is none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

from strata_doctor.api import plan_binding
from strata_doctor.config import EngineConfig
from strata_doctor.facts.numa import read_numa
from strata_doctor.root import Root
from strata_doctor.rules.binding import numactl_line, plan_for
from tests.conftest import HOSTS, UNBOUND_UNIT, check_json, findings_of, run_cli, two_node_files, write_tree

ISOLATED = "/sys/devices/system/cpu/isolated"
CPU_ISOLATED_LINE = "numactl --preferred=1 --physcpubind=16-31,48-59"


def test_the_line_binds_the_plans_cpus_only_where_it_leaves_isolated_ones_out(tmp_path: Path) -> None:
    numa = read_numa(Root(str(write_tree(tmp_path, two_node_files()))))
    some = plan_for(numa, 1, EngineConfig(), lambda: None, frozenset({6, 7}))
    every = plan_for(numa, 1, EngineConfig(), lambda: None, frozenset(range(4, 8)))
    none = plan_for(numa, 1, EngineConfig(), lambda: None, frozenset({0}))
    assert some is not None and every is not None and none is not None
    assert numactl_line(some) == "numactl --preferred=1 --physcpubind=4-5"
    # every CPU of the node isolated: the plan keeps them all, so the node is what it binds
    assert numactl_line(every) == "numactl --preferred=1 --cpunodebind=1"
    assert numactl_line(none) == "numactl --preferred=1 --cpunodebind=1"


def test_check_numa_plan_and_the_api_print_the_same_line_on_cpu_isolated() -> None:
    root = HOSTS / "cpu-isolated"
    found = findings_of(check_json(root), "numa-binding")["unbound"]
    assert found["summary"].endswith(f"; run it under `{CPU_ISOLATED_LINE}`")
    assert " ".join(plan_binding(root).numactl) == CPU_ISOLATED_LINE
    shell = run_cli(["numa-plan", "--root", str(root), "--format", "shell"])
    assert shell.stdout.strip() == CPU_ISOLATED_LINE
    data = json.loads(run_cli(["numa-plan", "--root", str(root), "--format", "json"]).stdout)
    assert " ".join(data["numactl"]) == CPU_ISOLATED_LINE and data["cpulist"] == "16-31,48-59"
    text = run_cli(["map", "--root", str(root)]).stdout
    assert f"plan    {CPU_ISOLATED_LINE}: CPUs 16-31,48-59" in text


def test_the_seed_box_line_still_binds_the_node() -> None:
    assert plan_binding(HOSTS / "seed-box").numactl == ("numactl", "--preferred=1", "--cpunodebind=1")


def test_unbound_the_pool_runs_where_systemd_starts_every_service() -> None:
    detail = findings_of(check_json(HOSTS / "cpu-isolated"), "numa-binding")["unbound"]["detail"]
    assert ("the pool's threads run on the 56 of 64 CPUs systemd starts every service on "
            "(0-3,8-59)") in detail
    assert "Binding keeps 16 of 32 cores (28 of 56 CPUs: 16-31,48-59)" in detail
    assert "all 64 CPUs" not in detail


def test_a_running_engine_confined_elsewhere_is_counted_where_it_runs() -> None:
    found = findings_of(check_json(HOSTS / "rt-isolcpus"), "numa-binding")["wrong-node"]
    detail = found["detail"]
    assert ("Without the plan's binding, first-touch puts the arena on node 0 and the pool's threads "
            "run on the 6 of 80 CPUs it may use (5-10)") in detail
    assert "Binding runs it on 20 cores (40 CPUs: 20-39,60-79)" in detail
    assert "all 80 CPUs" not in detail


def _host(tmp_path: Path, extra: Dict[str, str], unit: str = UNBOUND_UNIT) -> Path:
    files = two_node_files(unit_show=unit)
    files.update(extra)
    return write_tree(tmp_path, files)


def test_a_host_with_every_cpu_to_start_on_says_all(tmp_path: Path) -> None:
    detail = findings_of(check_json(_host(tmp_path, {"/proc/cmdline": "ro\n", ISOLATED: "\n"})),
                         "numa-binding")["unbound"]["detail"]
    assert "first-touch spreads the arena over every node and the pool's threads run on all 8 CPUs" in detail
    assert "Binding keeps 4 of 8 cores (4 of 8 CPUs: 4-7)" in detail


def test_a_units_own_affinity_is_where_it_starts(tmp_path: Path) -> None:
    own = UNBOUND_UNIT.replace("CPUAffinity=\n", "CPUAffinity=0 1\n")
    extra = {"/proc/cmdline": "ro systemd.cpu_affinity=0-5\n", ISOLATED: "\n"}
    found = findings_of(check_json(_host(tmp_path, extra, own)), "numa-binding")["wrong-node"]
    assert ("Without the plan's binding, first-touch puts the arena on node 0 and the pool's threads "
            "run on the 2 of 8 CPUs its unit's CPUAffinity=0 1 names (0-1)") in found["detail"]


def test_systemds_affinity_over_both_nodes_spreads_over_them(tmp_path: Path) -> None:
    extra = {"/proc/cmdline": "ro systemd.cpu_affinity=2-5\n", ISOLATED: "\n"}
    detail = findings_of(check_json(_host(tmp_path, extra)), "numa-binding")["unbound"]["detail"]
    assert ("first-touch spreads the arena over every node and the pool's threads run on the 4 of "
            "8 CPUs systemd starts every service on (2-5)") in detail
    assert "Binding runs it on 4 cores (4 CPUs: 4-7)" in detail


def test_managed_irq_only_says_all_or_some(tmp_path: Path) -> None:
    def summary(line: str, where: Path) -> str:
        data = check_json(_host(where, {"/proc/cmdline": line, ISOLATED: "\n"}))
        return str(findings_of(data, "cpu-isolation")["managed-irq-only"]["summary"])

    assert summary("ro isolcpus=managed_irq,4-7\n", tmp_path / "all") == (
        "isolcpus=managed_irq,4-7 has no domain flag: all 4 of node 1's CPUs, which it names, stay "
        "in the scheduler's balancing, and only managed interrupts move off them")
    assert summary("ro isolcpus=managed_irq,1-5\n", tmp_path / "some") == (
        "isolcpus=managed_irq,1-5 has no domain flag: the 2 of node 1's 4 CPUs it names stay in "
        "the scheduler's balancing, and only managed interrupts move off them")


def test_with_no_target_each_caller_is_told_its_own_way_to_choose() -> None:
    root = HOSTS / "no-gpu"
    config = "set `numa: <node>` in the config to choose one"
    assert plan_binding(root).reasons[-1].endswith("; pass numa=<node> to choose one")
    text = run_cli(["numa-plan", "--root", str(root)]).stdout
    assert "; pass --numa <node> or " + config in text
    data = json.loads(run_cli(["map", "--root", str(root), "--format", "json"]).stdout)
    assert data["plan"]["reasons"][-1].endswith("; " + config)
    assert data["fix"]["summary"].endswith("; " + config)
    assert "pass numa=" not in json.dumps(data)
