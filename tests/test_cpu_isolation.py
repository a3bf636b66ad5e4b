"""cpu-isolation: the parsers on strings, the plan's CPUs with isolated ones, and the
findings on small trees."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from strata_doctor.config import EngineConfig
from strata_doctor.facts.isolation import (
    parse_cpu_set,
    parse_isolation_cmdline,
    parse_isolcpus,
    parse_sysfs_cpus,
    parse_system_conf_affinity,
    read_isolation,
)
from strata_doctor.facts.numa import read_numa
from strata_doctor.root import Root
from strata_doctor.rules.binding import plan_for
from tests.conftest import UNBOUND_UNIT, check_json, findings_of, two_node_files, write_tree

RT_LINE = ("BOOT_IMAGE=/boot/vmlinuz-6.1.0-27-rt-amd64 ro isolcpus=managed_irq,0-4,11-79 "
           "nohz_full=0-4,11-79 rcu_nocbs=0-4,11-79 systemd.cpu_affinity=5,6,7,8,9,10 idle=poll\n")
ISOLATED = "/sys/devices/system/cpu/isolated"


def test_isolcpus_without_the_domain_flag_isolates_nothing_from_the_scheduler() -> None:
    irq = parse_isolcpus("isolcpus=managed_irq,0-4,11-79")
    assert irq.flags == ("managed_irq",) and not irq.domain
    assert irq.cpus == frozenset(range(5)) | frozenset(range(11, 80))
    assert parse_isolcpus("isolcpus=4-7,60-63").domain  # no flag at all implies domain
    assert parse_isolcpus("isolcpus=domain,managed_irq,1-3").domain
    assert not parse_isolcpus("isolcpus=nohz,2").domain


def test_the_command_line_words_the_last_of_each_winning() -> None:
    line = parse_isolation_cmdline(RT_LINE)
    assert line.isolcpus is not None and line.isolcpus.word == "isolcpus=managed_irq,0-4,11-79"
    assert line.nohz_full == ("nohz_full=0-4,11-79", frozenset(range(5)) | frozenset(range(11, 80)))
    assert line.cpu_affinity == ("systemd.cpu_affinity=5,6,7,8,9,10", frozenset(range(5, 11)))
    assert line.idle == "poll"
    assert parse_isolation_cmdline("isolcpus=1 isolcpus=2-3").isolcpus.cpus == {2, 3}  # type: ignore[union-attr]
    assert parse_isolation_cmdline("ro quiet") == parse_isolation_cmdline("")


def test_systemd_cpu_sets_and_the_sysfs_lists() -> None:
    assert parse_cpu_set("0 1 4-7") == {0, 1, 4, 5, 6, 7}
    assert parse_cpu_set("5,6 8") == {5, 6, 8}
    assert parse_sysfs_cpus(f"{'(null)':>20}\n") == frozenset()
    assert parse_sysfs_cpus("\n") == frozenset()
    assert parse_sysfs_cpus("4-7,60-63\n") == {4, 5, 6, 7, 60, 61, 62, 63}


def test_system_conf_takes_the_managers_last_assignment() -> None:
    assert parse_system_conf_affinity("[Manager]\n#CPUAffinity=1 2\n") is None
    assert parse_system_conf_affinity("[Manager]\nCPUAffinity=0 1\nCPUAffinity=2-3\n") == "2-3"
    assert parse_system_conf_affinity("[Manager]\nCPUAffinity=0 1\nCPUAffinity=\n") == ""
    assert parse_system_conf_affinity("[Service]\nCPUAffinity=0\n") is None


def test_drop_ins_then_the_command_line_set_systemds_affinity(tmp_path: Path) -> None:
    files = {"/etc/systemd/system.conf": "[Manager]\nCPUAffinity=0-3\n",
             "/etc/systemd/system.conf.d/50-cpus.conf": "[Manager]\nCPUAffinity=2 3\n",
             "/proc/cmdline": "ro quiet\n"}
    facts = read_isolation(Root(str(write_tree(tmp_path / "a", files))))
    assert facts.affinity is not None and facts.affinity.cpus == {2, 3}
    assert facts.affinity.source == "/etc/systemd/system.conf.d/50-cpus.conf"
    files["/proc/cmdline"] = "ro systemd.cpu_affinity=1\n"
    facts = read_isolation(Root(str(write_tree(tmp_path / "b", files))))
    assert facts.affinity is not None and facts.affinity.setting == "systemd.cpu_affinity=1"
    assert facts.isolated is None and facts.domain_isolated == frozenset()


def _plan_cpus(tmp_path: Path, isolated: frozenset) -> tuple:  # type: ignore[type-arg]
    numa = read_numa(Root(str(write_tree(tmp_path / "plan", two_node_files()))))
    plan = plan_for(numa, 1, EngineConfig(), lambda: None, isolated)
    assert plan is not None
    return plan.cpus, plan.reasons


def test_the_plan_leaves_a_nodes_isolated_cpus_out_or_keeps_them_all_pinned(tmp_path: Path) -> None:
    cpus, reasons = _plan_cpus(tmp_path / "some", frozenset({6, 7}))
    assert cpus == {4, 5}
    assert reasons == ("CPUs 6-7 of node 1 are isolated (no load balancing); the plan leaves "
                       "them out and keeps 2 of 4 CPUs",)
    cpus, reasons = _plan_cpus(tmp_path / "all", frozenset(range(4, 8)))
    assert cpus == {4, 5, 6, 7}
    assert "only with each thread pinned to its own CPU" in reasons[0]
    assert _plan_cpus(tmp_path / "none", frozenset({0, 1}))[1] == ()


def _host(tmp_path: Path, extra: Dict[str, str], unit: str = UNBOUND_UNIT) -> Path:
    files = two_node_files(unit_show=unit)
    files["/etc/strata-doctor.yaml"] = "workers: 3\n"
    files.update(extra)
    return write_tree(tmp_path / "host", files)


def test_a_plan_wholly_isolated_warns_and_expert_workers_says_pinned(tmp_path: Path) -> None:
    data = check_json(_host(tmp_path, {"/proc/cmdline": "ro isolcpus=4-7\n", ISOLATED: "4-7\n"}))
    found = findings_of(data, "cpu-isolation")
    assert found["isolated"]["severity"] == "warning"
    assert found["isolated"]["summary"] == (
        "isolcpus=4-7 keeps 4 of node 1's 4 CPUs (4-7) out of the scheduler's balancing: the "
        "pool runs there only with each thread pinned to its own CPU")
    workers = findings_of(data, "expert-workers")["fits"]
    assert "only with each worker pinned to its own CPU" in workers["detail"]


def test_systemds_affinity_confines_the_engine_unless_its_unit_sets_its_own(tmp_path: Path) -> None:
    line = {"/proc/cmdline": "ro systemd.cpu_affinity=0,1\n"}
    found = findings_of(check_json(_host(tmp_path / "a", line)), "cpu-isolation")
    assert found["confined"]["summary"] == (
        "systemd.cpu_affinity=0,1 confines every service, strata.service included, to 2 of 8 "
        "CPUs (0-1)")
    own = UNBOUND_UNIT.replace("CPUAffinity=\n", "CPUAffinity=4-7\n")
    found = findings_of(check_json(_host(tmp_path / "b", line, own)), "cpu-isolation")
    assert found["unit-overrides"]["summary"].endswith("strata.service sets its own CPUAffinity=4-7")


def test_without_a_plan_the_pool_is_what_every_service_gets(tmp_path: Path) -> None:
    extra = {"/proc/cmdline": "ro systemd.cpu_affinity=0-3\n", ISOLATED: "\n",
             "/etc/strata-doctor.yaml": "workers: 3\nnuma: \"off\"\n"}
    data = check_json(_host(tmp_path, extra))
    assert findings_of(data, "cpu-isolation")["confined"]["severity"] == "warning"
    assert "every service's" in findings_of(data, "expert-workers")["fits"]["summary"]


def test_nothing_to_read_is_unknown_and_nothing_isolated_is_ok(tmp_path: Path) -> None:
    found = findings_of(check_json(_host(tmp_path / "a", {})), "cpu-isolation")
    assert found["unknown"]["summary"] == (
        "whether any CPU is isolated from the scheduler is unknown: /proc/cmdline is missing, "
        "/sys/devices/system/cpu/isolated is missing")
    found = findings_of(check_json(_host(tmp_path / "b", {"/proc/cmdline": "ro\n"})), "cpu-isolation")
    assert found["none"]["severity"] == "ok"


def test_the_wrapper_binds_the_plans_cpus_when_it_leaves_isolated_ones_out() -> None:
    from strata_doctor.fix.binding import binding_fix
    from strata_doctor.fix.plan_files import render_template

    def wrapper(pin: bool) -> str:
        fix = binding_fix("strata.service", frozenset({1}), frozenset({1}), frozenset({4, 5}),
                          "preferred", pin_cpus=pin)
        change = next(f for f in fix.files if f.path == "/usr/local/bin/strata-numa")
        return render_template(change.template, dict(change.context, finding="x"))

    assert "exec numactl --preferred=1 --physcpubind=4-5 -- " in wrapper(True)
    assert "exec numactl --preferred=1 --cpunodebind=1 -- " in wrapper(False)


def test_without_the_command_line_systemds_affinity_is_not_claimed(tmp_path: Path) -> None:
    found = findings_of(check_json(_host(tmp_path, {ISOLATED: "\n"})), "cpu-isolation")
    assert found["not-isolated"]["summary"] == (
        "none of node 1's 4 CPUs is isolated from the scheduler (/sys/devices/system/cpu/isolated); "
        "/proc/cmdline is missing, so systemd.cpu_affinity= is unknown")
