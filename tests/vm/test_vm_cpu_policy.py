"""Automatic NUMA balancing, SMT siblings and a virtual machine's nodes on a real kernel.

Debian's kernel turns ``kernel.numa_balancing`` on by itself on a host with two nodes:
the seed-shaped guest shows it without any setup. ``numa-balancing`` must warn with the
kernel's value, ``fix --apply --only numa-balancing`` must write ``kernel.numa_balancing = 0``
into strata-doctor's sysctl.d file and set the running kernel, and ``fix --revert`` must
put both back. The same boot checks ``virtual-numa`` against the guest's real ``hypervisor``
flag and ``systemd-detect-virt``, ``expert-workers`` against the guest's real
``thread_siblings_list`` files, and that ``cpu-frequency`` skips a guest without cpufreq.
It boots once with its own few steps, so this file runs alone (about a minute).
"""

from __future__ import annotations

import shutil
from typing import Any, Dict, Iterator, List

import pytest
from guest import BootResult, Image, Payload, Step, boot
from scenarios import doctor, payload_for
from topologies import TOPOLOGIES
from vmharness import BOOT_TIMEOUT, artifacts_root

pytestmark = [pytest.mark.vm, pytest.mark.topology("seed")]

NAME = "seed"
WORKERS = 4  # the seed guest's node 1 has 2 CPUs (2-3): more workers than CPUs
SYSCTL = "/proc/sys/kernel/numa_balancing"


def steps() -> List[Step]:
    t = TOPOLOGIES[NAME]
    return [
        Step("facts", f"cat {SYSCTL}; systemd-detect-virt --vm; grep -c hypervisor /proc/cpuinfo; "
                      "cat /sys/devices/system/cpu/cpu2/topology/thread_siblings_list "
                      "/sys/devices/system/cpu/cpu3/topology/thread_siblings_list; "
                      "ls /sys/devices/system/cpu/cpufreq 2>&1 | head -1; true"),
        Step("check-before", doctor("check --format json", t)),
        Step("apply", doctor("fix --apply --yes --only numa-balancing", t)),
        Step("after-apply", f"cat {SYSCTL}; grep -H numa_balancing /etc/sysctl.d/*strata-doctor.conf"),
        Step("check-after", doctor("check --format json numa-balancing", t)),
        Step("revert", doctor("fix --revert --yes", t)),
        Step("after-revert", f"cat {SYSCTL}; ls /etc/sysctl.d/ | grep -c strata-doctor; true"),
    ]


@pytest.fixture(scope="module")
def booted(guest_image: Image) -> Iterator[BootResult]:
    topology = TOPOLOGIES[NAME]
    artifacts = artifacts_root() / f"cpu-policy-{NAME}"
    if artifacts.exists():
        shutil.rmtree(artifacts)
    files = dict(payload_for(topology).files)
    config, mode = files["etc/strata-doctor.yaml"]
    files["etc/strata-doctor.yaml"] = (config + f"workers: {WORKERS}\n".encode(), mode)
    result = boot(topology, Payload(steps(), files), artifacts, guest_image, timeout=BOOT_TIMEOUT)
    if result.error:
        pytest.fail(f"{NAME} guest: {result.error}; console: {result.artifacts}/console.log", pytrace=False)
    yield result


def facts(result: BootResult) -> List[str]:
    ran = result.step("facts")
    return ran.stdout.split()


def findings(result: BootResult, step: str, check: str) -> List[Dict[str, Any]]:
    data = result.step(step).json()
    assert isinstance(data, dict), result.step(step).describe()
    return [f for f in data["findings"] if f["check"] == check]


def skipped(result: BootResult, step: str) -> Dict[str, str]:
    data = result.step(step).json()
    assert isinstance(data, dict)
    return {c["id"]: c["reason"] for c in data["checks"] if c.get("status") == "skipped"}


def test_the_kernel_balances_by_default_and_the_check_warns(booted: BootResult) -> None:
    value = facts(booted)[0]
    assert value != "0", "Debian's kernel should turn automatic NUMA balancing on with two nodes"
    (finding,) = findings(booted, "check-before", "numa-balancing")
    assert (finding["id"], finding["severity"]) == ("enabled", "warning"), finding
    assert f"kernel.numa_balancing = {value}" in finding["summary"]
    assert "on 2 CPU nodes (0, 1)" in finding["summary"]
    assert {"kind": "sysctl", "target": "kernel.numa_balancing", "value": "0"}.items() <= \
        finding["fix"]["actions"][0].items()


def test_apply_sets_the_kernel_and_the_sysctl_file(booted: BootResult) -> None:
    apply = booted.step("apply")
    assert apply.rc in (0, 1), apply.describe()
    lines = booted.step("after-apply").stdout.splitlines()
    assert lines[0] == "0", booted.step("after-apply").describe()
    assert any(line.startswith("/etc/sysctl.d/60-strata-doctor.conf:kernel.numa_balancing = 0")
               for line in lines[1:]), lines
    (after,) = findings(booted, "check-after", "numa-balancing")
    assert (after["id"], after["severity"]) == ("off", "ok"), after


def test_revert_turns_balancing_back_on_and_removes_the_file(booted: BootResult) -> None:
    revert = booted.step("revert")
    assert revert.rc == 0, revert.describe()
    before = facts(booted)[0]
    lines = booted.step("after-revert").stdout.split()
    assert lines == [before, "0"], booted.step("after-revert").describe()


def test_the_guest_is_named_a_virtual_machine(booted: BootResult) -> None:
    words = facts(booted)
    detected, flagged = words[1], int(words[2])
    assert detected != "none" or flagged
    (guest,) = findings(booted, "check-before", "virtual-numa")
    assert guest["id"] == "guest" and guest["severity"] in ("info", "warning"), guest
    assert "pins vNUMA" in guest["summary"]
    if detected != "none":
        assert f"({detected})" in guest["summary"]
    assert "sub-numa-clustering" in skipped(booted, "check-before")


def test_workers_are_compared_with_the_real_sibling_lists(booted: BootResult) -> None:
    siblings = facts(booted)[3:5]  # cpu2's and cpu3's lists: one thread per vCPU under QEMU's -smp
    (finding,) = findings(booted, "check-before", "expert-workers")
    assert (finding["id"], finding["severity"]) == ("oversubscribed", "warning"), finding
    cores = len(set(siblings))
    assert f"node 1's {cores} physical cores (2 CPUs: 2-3)" in finding["summary"], finding


def test_cpu_frequency_skips_a_guest_without_cpufreq(booted: BootResult) -> None:
    listing = facts(booted)[5:]
    if listing and "No" not in " ".join(listing):
        pytest.skip(f"this guest kernel shows cpufreq: {listing}")
    assert "cpu-frequency" in skipped(booted, "check-before")
