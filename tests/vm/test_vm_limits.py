"""The engine's limits on a real kernel and systemd: MemoryMax=, LimitMEMLOCK=, a cpuset
that excludes the GPU's node, and MemorySwapMax= with swap.

One boot of the seed-shaped guest (GPU on node 1, CPUs 2-3) runs the engine unit as a
long-running process under a drop-in that sets ``MemoryMax=256M`` (below arena + K/V +
headroom: 400 + 16 + 64 MiB), ``LimitMEMLOCK=8M`` with ``lock: true`` in the config,
``AllowedMemoryNodes=0`` and ``AllowedCPUs=0-1`` (node 0 only) and ``MemorySwapMax=0``.
systemd turns those into the cgroup files and the rlimit a real kernel shows, and the
checks must report them with those numbers. ``fix --apply --only memlock`` must write
``LimitMEMLOCK=infinity`` and, once the unit restarts, the kernel's limit must be
unlimited and memlock must pass; ``fix --revert`` must remove the drop-in. Swap is made
from a loop device when the guest kernel has one (it has no disk); otherwise the swap
assertions that need swap skip and say why. It boots once with its own steps, so this
file runs alone (about a minute):

    python3 -m pytest -m vm tests/vm/test_vm_limits.py -q -p no:cacheprovider
"""

from __future__ import annotations

import shutil
from typing import Any, Dict, Iterator, List

import pytest
from guest import BootResult, Image, Payload, Step, boot
from scenarios import TRAP_ARENA_MIB, TRAP_HEADROOM_MIB, TRAP_KV_MIB, UNIT, doctor, payload_for
from topologies import TOPOLOGIES
from vmharness import BOOT_TIMEOUT, artifacts_root

pytestmark = [pytest.mark.vm, pytest.mark.topology("seed")]

NAME = "seed"
MEMORY_MAX_MIB = 256
MEMLOCK = 8 * 1024 * 1024
LIMITS_DROPIN = f"""\
[Service]
Type=simple
ExecStart=
ExecStart=/bin/sleep infinity
MemoryMax={MEMORY_MAX_MIB}M
MemorySwapMax=0
LimitMEMLOCK=8M
AllowedMemoryNodes=0
AllowedCPUs=0-1
"""
CG = f"/sys/fs/cgroup/system.slice/{UNIT}"
SWAP = (
    "if dd if=/dev/zero of=/run/swapfile bs=1M count=64 status=none && mkswap -q /run/swapfile "
    ">/dev/null && dev=$(losetup -f --show /run/swapfile 2>/dev/null) && swapon \"$dev\" 2>/dev/null; "
    "then echo swap-on; else echo swap-off; fi"
)
FACTS = (
    f"pid=$(systemctl show -p MainPID --value {UNIT}); "
    f"for f in memory.max memory.swap.max cpuset.mems.effective cpuset.cpus.effective; do "
    f"echo \"$f=$(cat {CG}/$f)\"; done; "
    "grep '^Max locked memory' /proc/$pid/limits; grep ^Swap /proc/meminfo"
)


def steps() -> List[Step]:
    t = TOPOLOGIES[NAME]
    return [
        Step("swap", SWAP),
        Step("start", f"systemctl daemon-reload && systemctl start {UNIT} && sleep 1 && "
                      f"systemctl is-active {UNIT}"),
        Step("facts", FACTS),
        Step("check-before", doctor("check --format json cgroup-limits memlock swap", t)),
        Step("apply", doctor("fix --apply --yes --only memlock --only swap", t)),
        Step("restart", f"systemctl restart {UNIT} && sleep 1 && grep '^Max locked memory' "
                        f"/proc/$(systemctl show -p MainPID --value {UNIT})/limits"),
        Step("check-after", doctor("check --format json memlock", t)),
        Step("revert", doctor("fix --revert --yes", t)),
        Step("after-revert", f"ls /etc/systemd/system/{UNIT}.d/"),
    ]


@pytest.fixture(scope="module")
def booted(guest_image: Image) -> Iterator[BootResult]:
    topology = TOPOLOGIES[NAME]
    artifacts = artifacts_root() / f"limits-{NAME}"
    if artifacts.exists():
        shutil.rmtree(artifacts)
    files = dict(payload_for(topology).files)
    config, mode = files["etc/strata-doctor.yaml"]
    files["etc/strata-doctor.yaml"] = (config + b"lock: true\n", mode)
    files[f"etc/systemd/system/{UNIT}.d/50-limits.conf"] = (LIMITS_DROPIN.encode(), 0o644)
    result = boot(topology, Payload(steps(), files), artifacts, guest_image, timeout=BOOT_TIMEOUT)
    if result.error:
        pytest.fail(f"{NAME} guest: {result.error}; console: {result.artifacts}/console.log", pytrace=False)
    yield result


def facts(result: BootResult) -> Dict[str, str]:
    ran = result.step("facts")
    assert ran.rc == 0, ran.describe()
    out: Dict[str, str] = {}
    for line in ran.stdout.splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            out[key] = value.strip()
        elif line.startswith("Max locked memory"):
            out["memlock"] = line.split()[3]
        elif line.startswith("Swap"):
            key, _, value = line.partition(":")
            out[key] = value.split()[0]
    return out


def findings(result: BootResult, step: str, check: str) -> List[Dict[str, Any]]:
    data = result.step(step).json()
    assert isinstance(data, dict), result.step(step).describe()
    return [f for f in data["findings"] if f["check"] == check]


def test_systemd_made_the_limits_the_checks_read(booted: BootResult) -> None:
    start = booted.step("start")
    assert start.rc == 0 and "active" in start.stdout, start.describe()
    f = facts(booted)
    assert f["memory.max"] == str(MEMORY_MAX_MIB * 1024 * 1024)
    assert f["cpuset.mems.effective"] == "0"
    assert f["cpuset.cpus.effective"] == "0-1"
    assert f["memlock"] == str(MEMLOCK)


def test_memory_max_below_the_arena_is_an_error_with_the_kernels_number(booted: BootResult) -> None:
    found = {x["id"]: x for x in findings(booted, "check-before", "cgroup-limits")}
    memory = found["memory-max"]
    assert memory["severity"] == "error"
    assert f"memory.max is 256.00 MiB ({MEMORY_MAX_MIB * 1024 * 1024})" in memory["summary"]
    need = TRAP_ARENA_MIB + TRAP_KV_MIB + TRAP_HEADROOM_MIB
    assert f"{need - MEMORY_MAX_MIB:.2f} MiB short" in memory["summary"], memory["summary"]
    assert {"source": f"{CG}/memory.max", "value": str(MEMORY_MAX_MIB * 1024 * 1024)} in memory["evidence"]


def test_a_cpuset_that_excludes_the_gpus_node_is_an_error(booted: BootResult) -> None:
    found = {x["id"]: x for x in findings(booted, "check-before", "cgroup-limits")}
    assert found["cpuset-mems"]["severity"] == "error"
    assert "cpuset.mems is 0 and excludes node 1, the GPU's node" in found["cpuset-mems"]["summary"]
    assert found["cpuset-cpus"]["severity"] == "error"
    assert "holds none of node 1's CPUs (2-3)" in found["cpuset-cpus"]["summary"]


def test_limit_memlock_against_the_arena_then_fixed(booted: BootResult) -> None:
    (before,) = findings(booted, "check-before", "memlock")
    assert (before["id"], before["severity"]) == ("too-low", "error"), before
    assert "may lock 8.00 MiB" in before["summary"] and "`lock: true`" in before["summary"]
    assert before["fix"]["files"][0]["path"] == f"/etc/systemd/system/{UNIT}.d/60-strata-doctor-memlock.conf"
    assert booted.step("apply").rc in (0, 1), booted.step("apply").describe()
    restart = booted.step("restart")
    assert restart.rc == 0 and restart.stdout.split()[3] == "unlimited", restart.describe()
    (after,) = findings(booted, "check-after", "memlock")
    assert (after["id"], after["severity"]) == ("ok", "ok"), after


def test_revert_removes_the_fixes_dropins(booted: BootResult) -> None:
    assert booted.step("revert").rc == 0, booted.step("revert").describe()
    assert booted.step("after-revert").stdout.split() == ["50-limits.conf"]


def test_memory_swap_max_zero_keeps_the_engine_out_of_swap(booted: BootResult) -> None:
    f = facts(booted)
    assert f["memory.swap.max"] == "0"
    (swap,) = findings(booted, "check-before", "swap")
    assert {"source": f"{CG}/memory.swap.max", "value": "0"} in swap["evidence"], swap
    if booted.step("swap").stdout.strip() != "swap-on" or f.get("SwapTotal") in (None, "0"):
        assert (swap["id"], swap["severity"]) == ("off", "ok"), swap
        pytest.skip("the guest kernel has no loop device to swap on: SwapTotal 0, so only "
                    "memory.swap.max = 0 and the no-swap finding were checked")
    assert (swap["id"], swap["severity"]) == ("swap-max-0", "ok"), swap
