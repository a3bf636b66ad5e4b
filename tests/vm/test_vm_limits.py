"""The engine's limits on a real kernel and systemd: MemoryMax=, LimitMEMLOCK=, a cpuset
that excludes the GPU's node, and MemorySwapMax= with swap on.

One boot of the seed-shaped guest (GPU on node 1, CPUs 2-3) runs the engine unit as a
long-running process under a drop-in that sets ``MemoryMax=256M`` (below arena + K/V +
headroom: 400 + 16 + 64 MiB), ``LimitMEMLOCK=8M`` with ``lock: true`` in the config,
``AllowedMemoryNodes=0`` and ``AllowedCPUs=0-1`` (node 0 only), and no ``MemorySwapMax=``.
systemd turns those into the cgroup files and the rlimit a real kernel shows, and the
checks must report them with those numbers. With the stand-in taken as the compute GPU
(``--gpu``) swap says the arena is pinned for it; as a CPU-only engine (no ``--gpu``)
``fix --apply --only memlock --only swap`` must write ``LimitMEMLOCK=infinity`` and
``MemorySwapMax=0``; once the unit restarts the kernel's limit must be unlimited,
``memory.swap.max`` 0, and memlock and swap must pass; ``fix --revert`` must remove both
drop-ins and, after a restart, give the engine swap again. The guest has no disk: swap is
a file on tmpfs behind a loop device (the image keeps the ``loop`` module, guest.py's
MODULES). Only a guest kernel with no loop device
at all skips the swap tests, and says so. It boots once with its own steps, so this
file runs alone (about three minutes):

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
LimitMEMLOCK=8M
AllowedMemoryNodes=0
AllowedCPUs=0-1
"""
CG = f"/sys/fs/cgroup/system.slice/{UNIT}"
SWAP_MIB = 64
# A swap file on tmpfs cannot be swapped on, but a loop device over it can. Any failure
# but a kernel without loop fails the step (set -e), and the test prints its stderr.
SWAP = f"""\
set -e
if ! modprobe loop; then echo "no-loop: $(uname -r)"; exit 0; fi
dd if=/dev/zero of=/run/swapfile bs=1M count={SWAP_MIB} status=none
chmod 0600 /run/swapfile
mkswap /run/swapfile >/dev/null
dev=$(losetup -f --show /run/swapfile)
swapon "$dev"
echo "swap-on $dev"
cat /proc/swaps
"""
FACTS = (
    f"pid=$(systemctl show -p MainPID --value {UNIT}); "
    f"for f in memory.max memory.swap.max cpuset.mems.effective cpuset.cpus.effective; do "
    f"echo \"$f=$(cat {CG}/$f)\"; done; "
    "grep '^Max locked memory' /proc/$pid/limits; grep ^Swap /proc/meminfo"
)


CPU_ONLY_SWAP = "check --format json swap"
"""The swap check as on a host without a compute GPU (no --gpu for the stand-in)."""


def steps() -> List[Step]:
    t = TOPOLOGIES[NAME]
    return [
        Step("swap", SWAP),
        Step("start", f"systemctl daemon-reload && systemctl start {UNIT} && sleep 1 && "
                      f"systemctl is-active {UNIT}"),
        Step("facts", FACTS),
        Step("check-before", doctor("check --format json cgroup-limits memlock swap", t)),
        # Without --gpu the stand-in display is no compute GPU: the engine pins nothing for
        # one, so its arena can be swapped and the swap check plans MemorySwapMax=0.
        Step("check-before-cpu", f"strata-doctor {CPU_ONLY_SWAP}"),
        Step("apply", "strata-doctor fix --apply --yes --only memlock --only swap"),
        # Between daemon-reload and the restart: whatever the running cgroup holds now,
        # the swap check must read that and no more.
        Step("reloaded", f"cat {CG}/memory.swap.max"),
        Step("check-reloaded", "strata-doctor check --format json swap"),
        Step("restart", f"systemctl restart {UNIT} && sleep 1 && grep '^Max locked memory' "
                        f"/proc/$(systemctl show -p MainPID --value {UNIT})/limits"),
        Step("facts-after", FACTS),
        Step("check-after", "strata-doctor check --format json memlock swap"),
        Step("revert", doctor("fix --revert --yes", t)),
        Step("after-revert", f"ls /etc/systemd/system/{UNIT}.d/"),
        Step("restart-reverted", f"systemctl restart {UNIT} && sleep 1 && cat {CG}/memory.swap.max"),
        # --restart: the apply itself restarts the unit, once, and the new limit is in effect.
        Step("pid-before-restart", f"systemctl show -p MainPID --value {UNIT}"),
        Step("apply-restart", doctor("fix --apply --yes --restart --only memlock", t)),
        Step("after-apply-restart", f"sleep 1; systemctl show -p MainPID --value {UNIT}; "
                                    f"grep '^Max locked memory' "
                                    f"/proc/$(systemctl show -p MainPID --value {UNIT})/limits"),
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


def facts(result: BootResult, step: str = "facts") -> Dict[str, str]:
    ran = result.step(step)
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


def swap_on(result: BootResult) -> Dict[str, str]:
    """The kernel's swap after the swap step (skips where the guest kernel has no loop)."""
    ran = result.step("swap")
    assert ran.rc == 0, ran.describe()
    if ran.stdout.startswith("no-loop"):
        pytest.skip(f"the guest kernel ({ran.stdout.split()[-1]}) has no loop device, so the "
                    "guest, which has no disk, has no swap: see tests/vm/guest.py MODULES")
    assert ran.stdout.startswith("swap-on /dev/loop"), ran.describe()
    f = facts(result)
    assert int(f["SwapTotal"]) > 0, f
    return f


def test_swap_without_memory_swap_max_can_take_the_arena(booted: BootResult) -> None:
    f = swap_on(booted)
    # Somewhat less than the file: mkswap keeps the first page for its header.
    assert (SWAP_MIB - 1) * 1024 <= int(f["SwapTotal"]) <= SWAP_MIB * 1024, f
    assert f["memory.swap.max"] == "max", f
    (pinned,) = findings(booted, "check-before", "swap")
    # With the stand-in taken as the compute GPU, arena + K/V are pinned for it: no fix.
    assert (pinned["id"], pinned["severity"]) == ("gpu-pinned", "ok"), pinned
    assert "are pinned for the GPU" in pinned["summary"] and pinned["fix"] is None, pinned
    (swap,) = findings(booted, "check-before-cpu", "swap")
    # Debian's systemd-oomd puts ManagedOOMSwap=kill on -.slice, so with swap on the
    # engine is what oomd would kill: a warning, not info.
    assert (swap["id"], swap["severity"]) == ("swappable", "warning"), swap
    assert "of swap (/dev/loop0), 0 B used and the engine may use it (memory.swap.max is max): " \
        "arena pages can be swapped out; systemd-oomd watches swap on / and kills the cgroup " \
        "using the most swap once swap is 90% full" in swap["summary"], swap["summary"]
    assert f"SwapTotal={int(f['SwapTotal']) / 1024:.2f} MiB" in swap["evidence"][0]["value"], swap
    assert {"source": "oomctl dump", "value": "ManagedOOMSwap=kill on /"} in swap["evidence"], swap
    paths = [c["path"] for c in swap["fix"]["files"]]
    assert paths == [f"/etc/systemd/system/{UNIT}.d/60-strata-doctor-swap.conf"], swap["fix"]


def test_the_swap_check_reads_the_running_cgroup_before_the_restart(booted: BootResult) -> None:
    swap_on(booted)
    running = booted.step("reloaded").stdout.strip()
    (swap,) = findings(booted, "check-reloaded", "swap")
    # systemd 252 (bookworm) sets the running cgroup's limit at daemon-reload already;
    # others may wait for the restart. The check must say which: in effect, or written
    # and waiting for the restart.
    if running == "0":
        assert (swap["id"], swap["severity"]) == ("swap-max-0", "ok"), swap
    else:
        assert (swap["id"], swap["severity"]) == ("configured", "info"), (running, swap)
        assert f"MemorySwapMax=0 in /etc/systemd/system/{UNIT}.d/60-strata-doctor-swap.conf" \
            in swap["summary"], swap["summary"]


def test_memory_swap_max_zero_keeps_the_engine_out_of_swap(booted: BootResult) -> None:
    swap_on(booted)
    f = facts(booted, "facts-after")
    assert f["memory.swap.max"] == "0", f
    assert int(f["SwapTotal"]) > 0, f
    (swap,) = findings(booted, "check-after", "swap")
    assert (swap["id"], swap["severity"]) == ("swap-max-0", "ok"), swap
    assert "the engine's cgroup may not swap (0)" in swap["summary"], swap["summary"]
    assert {"source": f"{CG}/memory.swap.max", "value": "0"} in swap["evidence"], swap


def test_revert_gives_the_engine_swap_again(booted: BootResult) -> None:
    swap_on(booted)
    ran = booted.step("restart-reverted")
    assert ran.rc == 0 and ran.stdout.strip() == "max", ran.describe()


def test_restart_option_restarts_the_engine_once_into_the_fix(booted: BootResult) -> None:
    before = booted.step("pid-before-restart").stdout.strip()
    applied = booted.step("apply-restart")
    assert applied.rc in (0, 1), applied.describe()
    assert applied.stdout.count(f"ran: systemctl restart {UNIT}") == 1, applied.describe()
    assert "Restart" not in applied.stdout, applied.describe()  # not left to the operator
    after = booted.step("after-apply-restart")
    pid, limit = after.stdout.splitlines()
    assert pid not in (before, "0"), after.describe()
    assert limit.split()[3] == "unlimited", after.describe()
