"""Pinned memory is not RLIMIT_MEMLOCK's: what the limit is charged with (memlock), and an
arena registered with the compute GPU as memory reclaim cannot take (swap, oomd)."""

from __future__ import annotations

import json
from pathlib import Path

from strata_doctor.checks.memlock import Memlock
from strata_doctor.checks.swap import Swap
from strata_doctor.config import EngineConfig
from strata_doctor.model import Severity
from strata_doctor.rules.limits import (
    LOCK_CONFIG,
    LOCKED_NOW,
    NOT_CHARGED,
    PINNED_NOW,
    memlock_need,
)
from strata_doctor.rules.memory import GpuPinned, gpu_pinned
from tests.conftest import HOSTS, run_check, run_cli
from tests.test_limits import CONFIG, GIB, LIMITS, _host, _ids

MIB = 1024**2
GPU = "0000:81:00.0"
"""The compute GPU of tests.conftest's two-node host, on node 1."""


def _status(locked_kb: int = 0, pinned_kb: int = 0) -> str:
    return (f"Name:\tpython\nPid:\t4242\nVmLck:\t{locked_kb:8d} kB\nVmPin:\t{pinned_kb:8d} kB\n"
            "Cpus_allowed_list:\t0-7\nMems_allowed_list:\t0-1\n")


# -- the rules ------------------------------------------------------------------------------
def test_memlock_need_charges_the_arena_only_to_mlock_and_rdma_pinning() -> None:
    arena = 42 * GIB
    assert memlock_need(True, arena, 0, 0) == (LOCK_CONFIG, arena)
    assert memlock_need(False, arena, arena, 0) == (LOCKED_NOW, arena)
    assert memlock_need(False, arena, 0, arena + MIB) == (PINNED_NOW, arena)
    # a little locked or pinned memory is what the limit holds, never the arena
    need = memlock_need(False, arena, 64 * MIB, 2 * MIB)
    assert need == (NOT_CHARGED, 64 * MIB) and not need.arena_charged
    # lock: true without an arena size has nothing to compare (the check skips)
    assert memlock_need(True, None, 0, 0) == (NOT_CHARGED, 0)


def test_gpu_pinned_is_arena_and_kv_with_a_compute_gpu_only() -> None:
    assert gpu_pinned(CONFIG, GPU) == GpuPinned(GPU, 42 * GIB)
    assert gpu_pinned(EngineConfig(), GPU) == GpuPinned(GPU, None)
    assert gpu_pinned(CONFIG, None) is None


# -- memlock --------------------------------------------------------------------------------
def test_memlock_is_ok_without_lock_true_whatever_the_limit(tmp_path: Path) -> None:
    root = _host(tmp_path, {"/proc/4242/status": _status(2048, 1024),
                            "/proc/4242/limits": LIMITS.format(8388608)})
    found = run_check(Memlock(), root, CONFIG)
    assert _ids(found) == ["not-charged"]
    f = found[0]
    assert f.severity is Severity.OK and f.fix is None
    assert "cudaHostRegister" in f.summary and "may lock 8.00 MiB" in f.summary
    assert "VmLck 2.00 MiB, VmPin 1.00 MiB now" in f.summary
    assert ("/proc/4242/status", "VmLck 2.00 MiB, VmPin 1.00 MiB") in \
        [(e.source, e.value) for e in f.evidence]


def test_memlock_for_a_stopped_engine_without_lock_true(tmp_path: Path) -> None:
    root = _host(tmp_path, {}, unit=None)
    found = run_check(Memlock(), root, CONFIG)
    assert _ids(found) == ["not-charged"]
    assert "now" not in found[0].summary and "None" not in found[0].summary


def test_rdma_pinning_the_whole_arena_is_charged(tmp_path: Path) -> None:
    # VmPin covers arena + K/V: RDMA registration counts it against the limit, so a later
    # start under this unlimited limit is fine, and under 8 MiB it would not be.
    root = _host(tmp_path, {"/proc/4242/status": _status(0, 42 * 1024**2),
                            "/proc/4242/limits": LIMITS.format("unlimited")})
    found = run_check(Memlock(), root, CONFIG)
    assert _ids(found) == ["ok"]
    assert "pinned against the limit (VmPin)" in found[0].summary


def test_memlock_too_low_only_with_lock_true(tmp_path: Path) -> None:
    root = _host(tmp_path, {"/proc/4242/status": _status(),
                            "/proc/4242/limits": LIMITS.format(8388608)})
    assert _ids(run_check(Memlock(), root, CONFIG)) == ["not-charged"]
    found = run_check(Memlock(), root, CONFIG._replace(lock=True))
    assert _ids(found) == ["too-low"] and found[0].severity is Severity.ERROR
    assert "arena + K/V is 42.00 GiB, 41.99 GiB more" in found[0].summary


# -- swap -----------------------------------------------------------------------------------
def test_an_arena_pinned_for_the_gpu_is_not_swappable(tmp_path: Path) -> None:
    root = _host(tmp_path, {"/sys/fs/cgroup/system.slice/strata.service/memory.swap.max": "max\n"})
    found = run_check(Swap(), root, CONFIG)
    assert _ids(found) == ["gpu-pinned"]
    f = found[0]
    assert f.severity is Severity.OK and f.fix is None
    assert f"arena + K/V (42.00 GiB) are pinned for the GPU {GPU}" in f.summary
    assert "2.00 GiB of swap (/dev/vda3), 0 B used" in f.summary


def test_a_cpu_only_host_can_still_swap_the_arena(tmp_path: Path) -> None:
    root = _host(tmp_path, {"/sys/fs/cgroup/system.slice/strata.service/memory.swap.max": "max\n"},
                 gpu=False)
    assert _ids(run_check(Swap(), root, CONFIG)) == ["swappable"]


def test_a_locked_arena_is_said_locked_before_pinned(tmp_path: Path) -> None:
    root = _host(tmp_path, {"/proc/4242/status": _status(42 * 1024**2),
                            "/proc/4242/limits": LIMITS.format("unlimited")})
    assert _ids(run_check(Swap(), root, CONFIG)) == ["locked"]


# -- the fixture hosts ----------------------------------------------------------------------
def test_seed_box_swap_and_oomd_see_the_pinned_arena() -> None:
    result = run_cli(["check", "--root", str(HOSTS / "seed-box"), "--format", "json", "-v",
                      "swap", "oomd", "memlock"])
    data = json.loads(result.stdout)
    found = {(f["check"], f["id"]): f for f in data["findings"]}
    assert found[("swap", "gpu-pinned")]["severity"] == "ok"
    assert found[("memlock", "not-charged")]["severity"] == "ok"
    chain = found[("oomd", "trap-chain")]
    assert "arena + K/V (49.93 GiB), pinned for the GPU 0000:84:00.0, stay in RAM" in chain["detail"]
    for finding in data["findings"]:
        assert "None" not in finding["summary"] + finding.get("detail", "")
