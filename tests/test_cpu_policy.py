"""numa-balancing, cpu-frequency, expert-workers, sub-numa-clustering and virtual-numa: their
facts (doctor/facts/cpu_policy.py) on small trees, and the checks on the fixture hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from strata_doctor.config import EngineConfig, load_config
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import (
    read_cpu_frequency,
    read_numa_balancing,
    read_virtualization,
)
from strata_doctor.model import Finding, Severity
from strata_doctor.registry import builtin_checks, run_checks
from strata_doctor.root import Root
from tests.conftest import HOSTS, run_cli, two_node_files, write_tree

CPU = "/sys/devices/system/cpu"
IDS = ("numa-balancing", "cpu-frequency", "expert-workers", "sub-numa-clustering", "virtual-numa")


def findings(root: Path, *ids: str, config: Optional[EngineConfig] = None) -> Dict[str, List[Finding]]:
    """The named checks' findings on a tree, by check id ([] when skipped)."""
    r = Root(str(root))
    ctx = HostContext(r, config if config is not None else load_config(r, None))
    results = run_checks(ctx, [c for c in builtin_checks() if c.id in ids])
    for result in results:
        assert result.crash is None, result.crash
    return {result.check: list(result.findings) for result in results}


def check_json(host: str) -> Dict[str, Any]:
    result = run_cli(["check", "--root", str(HOSTS / host), "--format", "json"])
    data: Dict[str, Any] = json.loads(result.stdout)
    return data


def by_id(data: Dict[str, Any], check: str) -> List[Dict[str, Any]]:
    return [f for f in data["findings"] if f["check"] == check]


# -- facts ----------------------------------------------------------------------------------
def test_numa_balancing_reads_mode_and_vmstat_counters(tmp_path: Path) -> None:
    root = Root(str(write_tree(tmp_path, {
        "/proc/sys/kernel/numa_balancing": "1\n",
        "/proc/vmstat": "nr_free_pages 12\nnuma_pte_updates 30\nnuma_hint_faults 20\n"
                        "numa_pages_migrated 10\n",
    })))
    facts = read_numa_balancing(root)
    assert facts.on and facts.mode == 1
    assert facts.counter("numa_pages_migrated") == 10
    assert facts.counter("numa_hint_faults") == 20


def test_numa_balancing_absent_is_a_fact_not_an_error(tmp_path: Path) -> None:
    facts = read_numa_balancing(Root(str(tmp_path)))
    assert facts.mode is None and facts.unread == "missing" and not facts.on


def test_cpufreq_policies_and_switches(tmp_path: Path) -> None:
    files = {f"{CPU}/cpufreq/boost": "0\n", "/sys/firmware/acpi/platform_profile": "low-power\n",
             "/usr/sbin/tuned-adm": "", "/etc/tuned/active_profile": "balanced\n"}
    for n in (0, 1):
        base = f"{CPU}/cpufreq/policy{n}"
        files.update({f"{base}/affected_cpus": f"{n}\n", f"{base}/scaling_driver": "acpi-cpufreq\n",
                      f"{base}/scaling_governor": "powersave\n", f"{base}/scaling_cur_freq": "1200000\n",
                      f"{base}/cpuinfo_min_freq": "1200000\n", f"{base}/cpuinfo_max_freq": "2201000\n"})
    freq = read_cpu_frequency(Root(str(write_tree(tmp_path, files))), range(2))
    assert [sorted(p.cpus) for p in freq.policies] == [[0], [1]]
    assert [p.path.rsplit("/", 1)[1] for p in freq.policies] == ["policy0", "policy1"]
    assert all(p.pinned_low for p in freq.policies)
    assert freq.boost == 0 and freq.platform_profile == "low-power" and freq.no_turbo is None
    assert freq.tuned and freq.tuned_profile == "balanced"


def test_only_the_pools_policies_are_read_unless_a_cluster_policy_covers_them(tmp_path: Path) -> None:
    files = {}
    for n in (0, 4):  # two clusters of four CPUs, as on ARM
        base = f"{CPU}/cpufreq/policy{n}"
        files.update({f"{base}/affected_cpus": f"{n} {n + 1} {n + 2} {n + 3}\n",
                      f"{base}/scaling_governor": "schedutil\n", f"{base}/scaling_driver": "cppc_cpufreq\n"})
    root = Root(str(write_tree(tmp_path, files)))
    assert [sorted(p.cpus) for p in read_cpu_frequency(root, [4, 5, 6, 7]).policies] == [[4, 5, 6, 7]]
    assert len(read_cpu_frequency(root, [2, 3]).policies) == 2  # named after CPUs 0 and 4: all read


def test_powersave_under_an_active_pstate_driver_is_not_pinned(tmp_path: Path) -> None:
    base = f"{CPU}/cpufreq/policy0"
    freq = read_cpu_frequency(Root(str(write_tree(tmp_path, {
        f"{base}/affected_cpus": "0\n", f"{base}/scaling_driver": "intel_pstate\n",
        f"{base}/scaling_governor": "powersave\n",
        f"{base}/energy_performance_preference": "balance_performance\n"}))), [0])
    assert not freq.policies[0].pinned_low
    assert freq.policies[0].epp == "balance_performance"


def test_virtualization_from_flag_and_systemd_detect_virt(tmp_path: Path) -> None:
    root = Root(str(write_tree(tmp_path, {"/.strata-doctor/commands/systemd-detect-virt-vm.txt": "kvm\n"})))
    virt = read_virtualization(root, frozenset({"fpu"}))
    assert virt.virtual and virt.name == "kvm"
    bare = read_virtualization(Root(str(tmp_path / "none")), frozenset({"fpu"}))
    assert not bare.virtual
    assert read_virtualization(Root(str(tmp_path / "none")), frozenset({"hypervisor"})).virtual


# -- numa-balancing ---------------------------------------------------------------------------
def test_seed_box_numa_balancing_warns_with_its_counters_and_shares_the_hugepages_file() -> None:
    data = check_json("seed-box")
    (finding,) = by_id(data, "numa-balancing")
    assert finding["severity"] == "warning" and finding["id"] == "enabled"
    assert "kernel.numa_balancing = 1" in finding["summary"]
    assert "96,113,542 hinting faults" in finding["summary"]
    assert "9,874,312 pages" in finding["summary"]
    (trap,) = [f for f in by_id(data, "hugepages") if f["id"] == "trap"]
    ours = finding["fix"]["files"][0]["path"]
    assert ours == trap["fix"]["files"][0]["path"] == "/etc/sysctl.d/81-strata-doctor.conf"
    assert [a["kind"] for a in finding["fix"]["actions"]] == ["sysctl"]


def test_fix_plan_writes_both_keys_into_one_file_and_sets_it_now() -> None:
    result = run_cli(["fix", "--root", str(HOSTS / "seed-box"), "--format", "json"])
    plan = json.loads(result.stdout)["plan"]
    files = [f for f in plan["files"] if f["path"].startswith("/etc/sysctl.d/")]
    assert [f["path"] for f in files] == ["/etc/sysctl.d/81-strata-doctor.conf"]
    text = files[0]["content"]
    assert "kernel.numa_balancing = 0" in text and "vm.nr_hugepages = 0" in text
    actions = {(a["kind"], a["target"], a["value"]) for a in plan["actions"]}
    assert ("sysctl", "kernel.numa_balancing", "0") in actions


def test_numa_balancing_is_silent_on_one_node_hosts(tmp_path: Path) -> None:
    files = {"/sys/devices/system/node/node0/cpulist": "0-3\n", "/sys/devices/system/cpu/online": "0-3\n",
             "/proc/sys/kernel/numa_balancing": "1\n"}
    assert findings(write_tree(tmp_path, files), "numa-balancing") == {"numa-balancing": []}


@pytest.mark.parametrize("value, sysctl, expected", [
    ("0\n", None, ("off", Severity.OK)),
    ("0\n", "kernel.numa_balancing = 1\n", ("off", Severity.WARNING)),
    ("1\n", "kernel.numa_balancing = 0\n", ("configured", Severity.INFO)),
    ("2\n", None, ("enabled", Severity.WARNING)),
])
def test_numa_balancing_states(tmp_path: Path, value: str, sysctl: Optional[str],
                               expected: tuple[str, Severity]) -> None:
    files = two_node_files()
    files["/proc/sys/kernel/numa_balancing"] = value
    if sysctl:
        files["/etc/sysctl.d/90-local.conf"] = sysctl
    (finding,) = findings(write_tree(tmp_path, files), "numa-balancing")["numa-balancing"]
    assert (finding.id, finding.severity) == expected


# -- cpu-frequency ----------------------------------------------------------------------------
def test_seed_box_powersave_names_driver_clock_and_advice_without_files() -> None:
    (finding,) = by_id(check_json("seed-box"), "cpu-frequency")
    assert finding["severity"] == "warning" and finding["id"] == "powersave"
    assert "intel_cpufreq" in finding["summary"] and "1.20 GHz" in finding["summary"]
    assert "node 1's 44 CPUs (22-43,66-87)" in finding["summary"]
    assert "cpupower frequency-set -g performance" in finding["fix"]["summary"]
    assert finding["fix"]["files"] == [] and finding["fix"]["actions"] == []
    assert "power" in finding["fix"]["manual"][0]


def test_tuned_is_preferred_where_installed(tmp_path: Path) -> None:
    files = two_node_files()
    files["/usr/sbin/tuned-adm"] = ""
    for n in range(8):
        base = f"{CPU}/cpufreq/policy{n}"
        files.update({f"{base}/affected_cpus": f"{n}\n", f"{base}/scaling_driver": "acpi-cpufreq\n",
                      f"{base}/scaling_governor": "powersave\n"})
    (finding,) = findings(write_tree(tmp_path, files), "cpu-frequency")["cpu-frequency"]
    assert finding.id == "powersave"
    assert finding.fix is not None and "tuned-adm profile throughput-performance" in finding.fix.summary
    assert not finding.fix.files and not finding.fix.actions


def test_desktop_power_saver_mode_and_lab_turbo_off() -> None:
    desktop = {f["id"]: f["severity"] for f in by_id(check_json("desktop-user-oomd"), "cpu-frequency")}
    assert desktop == {"power-preference": "warning", "low-power-profile": "warning"}
    (lab,) = by_id(check_json("hugepages-wrong-node"), "cpu-frequency")
    assert (lab["id"], lab["severity"]) == ("turbo-off", "warning")
    assert "echo 0 > /sys/devices/system/cpu/intel_pstate/no_turbo" in lab["fix"]["summary"]
    (tuned,) = by_id(check_json("xeon-snc2"), "cpu-frequency")
    assert (tuned["id"], tuned["severity"]) == ("performance", "ok")


# -- expert-workers ---------------------------------------------------------------------------
def test_seed_box_44_workers_on_node1s_22_cores_is_info_with_a_suggestion() -> None:
    (finding,) = by_id(check_json("seed-box"), "expert-workers")
    assert (finding["id"], finding["severity"]) == ("smt-siblings", "info")
    assert "22 physical cores (44 CPUs: 22-43,66-87)" in finding["summary"]
    assert "20 or 21" in finding["summary"]
    assert any(e["value"] == "22,66" for e in finding["evidence"])


@pytest.mark.parametrize("workers, expected", [
    (9, ("oversubscribed", Severity.WARNING)),
    (5, ("smt-siblings", Severity.INFO)),
    (4, ("fits", Severity.OK)),
])
def test_workers_against_the_bound_nodes_cores(tmp_path: Path, workers: int,
                                               expected: tuple[str, Severity]) -> None:
    files = two_node_files()
    # 4 cores of 2 threads each on node 1 (CPUs 4-7 plus siblings 12-15), ids not contiguous
    files["/sys/devices/system/node/node1/cpulist"] = "4-7,12-15\n"
    files["/sys/devices/system/cpu/online"] = "0-7,12-15\n"
    for c in (4, 5, 6, 7, 12, 13, 14, 15):
        first = c if c < 8 else c - 8
        files[f"{CPU}/cpu{c}/topology/thread_siblings_list"] = f"{first},{first + 8}\n"
    (finding,) = findings(write_tree(tmp_path, files), "expert-workers",
                          config=EngineConfig(workers=workers))["expert-workers"]
    assert (finding.id, finding.severity) == expected


# -- sub-numa-clustering and virtual-numa --------------------------------------------------------
def test_snc_names_nodes_per_socket_and_why_the_plan_uses_the_socket() -> None:
    (finding,) = by_id(check_json("xeon-snc2"), "sub-numa-clustering")
    assert finding["severity"] == "info"
    assert finding["summary"].startswith("2 NUMA nodes per socket: SNC or NPS is on")
    assert "socket 0: nodes 0,1; socket 1: nodes 2,3" in finding["summary"]
    assert "fits the socket but not the node" in finding["detail"]
    assert "SNC off" in finding["detail"] and "NPS1" in finding["detail"]
    assert "#1147" in finding["detail"]
    (nps,) = by_id(check_json("epyc-nps4"), "sub-numa-clustering")
    assert nps["summary"].startswith("4 NUMA nodes per socket")
    (binding,) = by_id(check_json("xeon-snc2"), "numa-binding")
    assert "SNC off or NPS1" in binding["detail"]


def test_vm_guest_is_named_and_the_binding_advice_says_so() -> None:
    data = check_json("vm-gpu-nonuma")
    (guest,) = by_id(data, "virtual-numa")
    assert (guest["id"], guest["severity"]) == ("guest", "info")
    assert "kvm" in guest["summary"] and "pins vNUMA" in guest["summary"]
    (binding,) = by_id(data, "numa-binding")
    assert "pins vNUMA" in binding["detail"]
    skipped = {c["id"] for c in data["checks"] if c.get("status") == "skipped"}
    assert "sub-numa-clustering" in skipped


def test_equal_distances_in_a_guest_are_a_warning(tmp_path: Path) -> None:
    files = two_node_files()
    files["/sys/devices/system/node/node0/distance"] = "10 10\n"
    files["/sys/devices/system/node/node1/distance"] = "10 10\n"
    files["/proc/cpuinfo"] = files["/proc/cpuinfo"].replace("avx2", "avx2 hypervisor")
    (finding,) = findings(write_tree(tmp_path, files), "virtual-numa")["virtual-numa"]
    assert (finding.id, finding.severity) == ("guest", Severity.WARNING)
    assert "every distance is 10" in finding.summary


def test_bare_metal_hosts_pass_every_new_check() -> None:
    data = check_json("seed-box-bound")
    worst = {f["check"]: f["severity"] for f in data["findings"] if f["check"] in IDS}
    assert worst == {"sub-numa-clustering": "ok", "virtual-numa": "ok", "numa-balancing": "ok",
                     "expert-workers": "info", "cpu-frequency": "ok"}


def test_snc_without_packages_for_every_node_says_so_instead_of_crashing(tmp_path: Path) -> None:
    files = two_node_files()
    # node 1's CPUs are numbered otherwise in cpuinfo (a mutated or odd capture)
    files["/proc/cpuinfo"] = "".join(
        f"processor\t: {c if c < 4 else -c}\nphysical id\t: {c // 4}\ncore id\t\t: {c % 4}\n\n"
        for c in range(8))
    (finding,) = findings(write_tree(tmp_path, files), "sub-numa-clustering")["sub-numa-clustering"]
    assert (finding.id, finding.severity) == ("unknown", Severity.OK)
