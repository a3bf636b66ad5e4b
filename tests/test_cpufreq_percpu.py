"""cpu-frequency on kernels and captures that keep cpufreq in each CPU's folder, and on
policies whose scaling_governor is empty: read like cpupower reads them, and never worded
with Python's None."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

from strata_doctor.config import load_config
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import read_cpu_frequency
from strata_doctor.model import Finding, Severity
from strata_doctor.registry import builtin_checks, run_checks
from strata_doctor.root import Root
from tests.conftest import HOSTS, run_cli, two_node_files, write_tree

CPU = "/sys/devices/system/cpu"


def percpu(cpu: int, governor: str, driver: str = "acpi-cpufreq", affected: str = "") -> Dict[str, str]:
    """One ``cpuN/cpufreq`` folder as a 3.10 kernel writes it."""
    base = f"{CPU}/cpu{cpu}/cpufreq"
    return {f"{base}/affected_cpus": f"{affected or cpu}\n", f"{base}/scaling_driver": f"{driver}\n",
            f"{base}/scaling_governor": f"{governor}\n" if governor else "",
            f"{base}/scaling_cur_freq": "1200000\n", f"{base}/cpuinfo_min_freq": "1200000\n",
            f"{base}/cpuinfo_max_freq": "2101000\n"}


def policy(cpu: int, governor: str, driver: str = "acpi-cpufreq") -> Dict[str, str]:
    """One ``cpufreq/policyN`` folder, with the link from ``cpuN/cpufreq``."""
    base = f"{CPU}/cpufreq/policy{cpu}"
    return {f"{base}/affected_cpus": f"{cpu}\n", f"{base}/scaling_driver": f"{driver}\n",
            f"{base}/scaling_governor": f"{governor}\n" if governor else "",
            f"{CPU}/cpu{cpu}/cpufreq": f"->../cpufreq/policy{cpu}"}


def cpu_frequency(root: Path) -> List[Finding]:
    r = Root(str(root))
    ctx = HostContext(r, load_config(r, None))
    (result,) = run_checks(ctx, [c for c in builtin_checks() if c.id == "cpu-frequency"])
    assert result.crash is None, result.crash
    return list(result.findings)


def texts(findings: List[Finding]) -> str:
    return "\n".join(f"{f.summary}\n{f.detail}\n" + "\n".join(f"{e.source}: {e.value}" for e in f.evidence)
                     for f in findings)


# -- the fact ----------------------------------------------------------------------------------
def test_per_cpu_folders_are_read_when_there_is_no_policy_folder(tmp_path: Path) -> None:
    files: Dict[str, str] = {}
    for cpu in range(4):
        files.update(percpu(cpu, "powersave"))
    freq = read_cpu_frequency(Root(str(write_tree(tmp_path, files))), range(4))
    assert [sorted(p.cpus) for p in freq.policies] == [[0], [1], [2], [3]]
    assert [p.path for p in freq.policies] == [f"{CPU}/cpu{n}/cpufreq" for n in range(4)]
    assert all(p.pinned_low and p.driver == "acpi-cpufreq" for p in freq.policies)
    assert freq.known
    assert freq.policies[0].min_khz == 1200000 and freq.policies[0].max_khz == 2101000


def test_a_shared_per_cpu_policy_is_read_once(tmp_path: Path) -> None:
    # An old kernel's shared policy: cpu1/cpufreq links to cpu0's folder, affected_cpus 0 1.
    files = percpu(0, "ondemand", affected="0 1")
    files[f"{CPU}/cpu1/cpufreq"] = "->../cpu0/cpufreq"
    root = Root(str(write_tree(tmp_path, files)))
    (only,) = read_cpu_frequency(root, [0, 1]).policies
    assert sorted(only.cpus) == [0, 1] and only.governor == "ondemand"
    assert not any(path.startswith(f"{CPU}/cpu1/") for path in root.reads)


def test_policy_folders_come_first_and_per_cpu_folders_fill_the_rest(tmp_path: Path) -> None:
    files = {**policy(0, "performance"), **percpu(1, "powersave")}
    freq = read_cpu_frequency(Root(str(write_tree(tmp_path, files))), [0, 1])
    assert [(p.path, p.governor) for p in freq.policies] == [
        (f"{CPU}/cpufreq/policy0", "performance"), (f"{CPU}/cpu1/cpufreq", "powersave")]


def test_no_cpufreq_anywhere_is_no_policy(tmp_path: Path) -> None:
    files = {f"{CPU}/cpu0/topology/core_id": "0\n", f"{CPU}/cpu1/topology/core_id": "1\n"}
    freq = read_cpu_frequency(Root(str(write_tree(tmp_path, files))), [0, 1])
    assert freq.policies == () and not freq.known


def test_an_empty_governor_is_none_in_the_fact(tmp_path: Path) -> None:
    freq = read_cpu_frequency(Root(str(write_tree(tmp_path, policy(0, "", "intel_pstate")))), [0])
    assert freq.policies[0].governor is None and not freq.policies[0].pinned_low


# -- the check -----------------------------------------------------------------------------------
def test_powersave_in_per_cpu_folders_warns(tmp_path: Path) -> None:
    files = two_node_files()
    for cpu in range(8):
        files.update(percpu(cpu, "powersave"))
    (finding,) = cpu_frequency(write_tree(tmp_path, files))
    assert (finding.id, finding.severity) == ("powersave", Severity.WARNING)
    assert finding.summary == ("the powersave governor of acpi-cpufreq holds all of node 1's 4 CPUs "
                               "(4-7) at 1.20 GHz, their lowest clock (range 1.20-2.10 GHz)")
    assert finding.evidence[0].source == f"{CPU}/cpu4/cpufreq/scaling_governor"


def test_every_governor_empty_is_unknown_not_fine(tmp_path: Path) -> None:
    files = two_node_files()
    for cpu in range(8):
        files.update(policy(cpu, "", "intel_pstate"))
    (finding,) = cpu_frequency(write_tree(tmp_path, files))
    assert (finding.id, finding.severity) == ("unknown-governor", Severity.INFO)
    assert finding.summary == ("scaling_governor names no governor for node 1's 4 CPUs (4-7) "
                               "(intel_pstate): their frequency policy is unknown")
    assert finding.evidence[0].value.startswith("empty (scaling_driver intel_pstate")


def test_some_governors_empty_say_both_parts(tmp_path: Path) -> None:
    files = two_node_files()
    for cpu in range(8):
        files.update(policy(cpu, "performance" if cpu < 6 else ""))
    found = {f.id: f for f in cpu_frequency(write_tree(tmp_path, files))}
    assert set(found) == {"unknown-governor", "performance"}
    assert "for 2 of node 1's 4 CPUs (4-7) (acpi-cpufreq)" in found["unknown-governor"].summary
    assert found["performance"].summary == \
        "2 of node 1's 4 CPUs (4-7) run the performance (acpi-cpufreq) policy"


@pytest.mark.parametrize("missing", ["scaling_driver", "scaling_cur_freq", "cpuinfo_min_freq",
                                     "cpuinfo_max_freq", "affected_cpus"])
def test_no_finding_says_none_whatever_file_is_missing(tmp_path: Path, missing: str) -> None:
    files = two_node_files()
    for cpu in range(8):
        files.update(percpu(cpu, "powersave" if cpu % 2 else ""))
    files = {path: text for path, text in files.items() if not path.endswith(f"/{missing}")}
    found = cpu_frequency(write_tree(tmp_path, files))
    assert {f.id for f in found} == {"powersave", "unknown-governor"}
    assert "None" not in texts(found)


# -- the fixture hosts ---------------------------------------------------------------------------
def host_findings(host: str) -> List[Dict[str, object]]:
    result = run_cli(["check", "--root", str(HOSTS / host), "--format", "json"])
    return [f for f in json.loads(result.stdout)["findings"] if f["check"] == "cpu-frequency"]


def test_percpu_cpufreq_host_warns_of_powersave_on_every_cpu() -> None:
    (finding,) = host_findings("percpu-cpufreq")
    assert (finding["id"], finding["severity"]) == ("powersave", "warning")
    assert finding["summary"] == ("the powersave governor of acpi-cpufreq holds all 32 CPUs at 1.20 GHz, "
                                  "their lowest clock (range 1.20-2.10 GHz)")
    assert finding["evidence"][0]["source"] == f"{CPU}/cpu0/cpufreq/scaling_governor"
    assert "31 more policies alike" in finding["evidence"][0]["value"]


def test_empty_governor_host_says_unknown_and_never_none() -> None:
    (finding,) = host_findings("empty-governor")
    assert (finding["id"], finding["severity"]) == ("unknown-governor", "info")
    assert "for all 12 CPUs (intel_pstate)" in finding["summary"]
    assert "None" not in json.dumps(finding)


@pytest.mark.parametrize("governors, summary", [
    (["performance"], "the host's one CPU (0) runs the performance (acpi-cpufreq) policy"),
    (["performance", ""], "1 of all 2 CPUs runs the performance (acpi-cpufreq) policy"),
])
def test_one_cpu_is_said_in_the_singular(tmp_path: Path, governors: List[str], summary: str) -> None:
    files = {"/sys/devices/system/cpu/online": f"0-{len(governors) - 1}\n"}
    for cpu, governor in enumerate(governors):
        files.update(policy(cpu, governor))
    found = {f.id: f for f in cpu_frequency(write_tree(tmp_path, files))}
    assert found["performance"].summary == summary
