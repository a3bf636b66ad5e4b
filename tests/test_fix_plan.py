"""Building the plan: merging fixes that share a file, conflicts, selection, actions."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from strata_doctor.fix.plan import PlanOptions, build_plan
from strata_doctor.fix.plan_text import plan_text
from strata_doctor.model import CheckResult, FileChange, Finding, Fix, RuntimeAction, Severity, context_pairs
from tests.test_fix_hosts import context_for, make_host

SYSCTL = "/etc/sysctl.d/60-strata-doctor.conf"


def _sysctl_fix(key: str, value: str, reason: str, finding: str) -> Fix:
    change = FileChange(SYSCTL, "sysctl.conf.j2",
                        context_pairs(settings=((key, value, reason),), finding=finding))
    return Fix(summary=f"set {key} = {value}", files=(change,),
               actions=(RuntimeAction("sysctl", key, value),), takes_effect="now")


def _results(*findings: Finding) -> Sequence[CheckResult]:
    return [CheckResult(f.check, f.check, findings=(f,)) for f in findings]


def test_sysctl_settings_from_two_findings_share_one_file(tmp_path: Path) -> None:
    ctx = context_for(make_host(tmp_path, "two-node-252"), numa="off")
    reason = "the pool the engine cannot use"
    trap = Finding("hugepages", "trap", Severity.ERROR, "pool",
                   fix=_sysctl_fix("vm.nr_hugepages", "0", reason, "hugepages/trap"))
    surplus_fix = _sysctl_fix("vm.nr_overcommit_hugepages", "0", "surplus pages", "hugepages2/surplus")
    surplus = Finding("hugepages2", "surplus", Severity.WARNING, "surplus", fix=surplus_fix)
    plan = build_plan(ctx, _results(trap, surplus), PlanOptions())
    assert not plan.problems
    (planned,) = plan.files
    assert "for hugepages/trap, hugepages2/surplus." in planned.content
    assert "# the pool the engine cannot use\nvm.nr_hugepages = 0\n" in planned.content
    assert "vm.nr_overcommit_hugepages = 0\n" in planned.content
    assert [a.described for a in plan.actions] == ["sysctl -w vm.nr_hugepages=0",
                                                   "sysctl -w vm.nr_overcommit_hugepages=0"]
    assert plan.takes_effect == "now"


def test_conflicting_values_are_a_problem(tmp_path: Path) -> None:
    ctx = context_for(make_host(tmp_path, "two-node-252"), numa="off")
    one = Finding("a", "x", Severity.ERROR, "", fix=_sysctl_fix("vm.nr_hugepages", "0", "r", "a/x"))
    two = Finding("b", "y", Severity.ERROR, "", fix=_sysctl_fix("vm.nr_hugepages", "512", "r", "b/y"))
    plan = build_plan(ctx, _results(one, two), PlanOptions())
    assert plan.problems and "vm.nr_hugepages" in plan.problems[0]
    assert "cannot apply" in plan_text(plan)


def test_actions_of_a_configured_fix_are_not_repeated(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    ctx = context_for(tree, numa="off")
    fix = _sysctl_fix("vm.nr_hugepages", "0", "r", "hugepages/trap")
    finding = Finding("hugepages", "trap", Severity.ERROR, "", fix=fix)
    first = build_plan(ctx, _results(finding), PlanOptions())
    target = tree / SYSCTL.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text(first.files[0].content)
    target.chmod(0o644)
    again = build_plan(context_for(tree, numa="off"), _results(finding), PlanOptions())
    assert again.empty and not again.actions


def test_restart_only_when_asked(tmp_path: Path) -> None:
    ctx = context_for(make_host(tmp_path, "two-node-252"), numa="off")
    fix = Fix(summary="restart", actions=(RuntimeAction("restart-unit", "strata.service"),))
    finding = Finding("x", "y", Severity.ERROR, "", fix=fix)
    quiet = build_plan(ctx, _results(finding), PlanOptions())
    assert not quiet.actions and quiet.manual[0][1].startswith("Restart strata.service")
    asked = build_plan(ctx, _results(finding), PlanOptions(restart=True))
    assert [a.described for a in asked.actions] == ["systemctl restart strata.service"]


def test_oomd_dropin_renders_beside_the_binding(tmp_path: Path) -> None:
    ctx = context_for(make_host(tmp_path, "two-node-252"))
    change = FileChange("/etc/systemd/system/strata.service.d/60-strata-doctor-oomd.conf",
                        "oomd-dropin.conf.j2", context_pairs(unit="strata.service", finding="oomd/exposed"))
    oomd = Finding("oomd", "exposed", Severity.ERROR, "", fix=Fix("avoid", files=(change,)))
    from strata_doctor.cli.options import run_selected

    plan = build_plan(ctx, [*run_selected(ctx, (), ()), *_results(oomd)], PlanOptions())
    names = sorted(f.path.rsplit("/", 1)[-1] for f in plan.files)
    assert names == ["60-strata-doctor-numa.conf", "60-strata-doctor-oomd.conf", "strata-numa"]
    oomd_file = next(f for f in plan.files if f.path.endswith("oomd.conf"))
    assert "ManagedOOMPreference=avoid" in oomd_file.content and "oomd/exposed" in oomd_file.content


def test_reserve_node_refused_on_cgroup_v1(tmp_path: Path) -> None:
    ctx = context_for(make_host(tmp_path, "two-node-243-v1"))
    from strata_doctor.cli.options import run_selected

    plan = build_plan(ctx, run_selected(ctx, (), ()), PlanOptions(reserve_node=True))
    assert any("AllowedCPUs=" in p and "cgroup v1" in p for p in plan.problems)
