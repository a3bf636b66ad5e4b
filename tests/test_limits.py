"""The engine's limits: cgroup and container (cgroup-limits), locked memory (memlock), swap
(swap), and page cache on the GPU's node (page-cache); their facts, findings and fixes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from strata_doctor.checks.cgroup_limits import CgroupLimits
from strata_doctor.checks.memlock import Memlock
from strata_doctor.checks.page_cache import PageCache
from strata_doctor.checks.swap import Swap
from strata_doctor.config import ConfigError, EngineConfig, parse_config
from strata_doctor.context import HostContext
from strata_doctor.facts.cgroup import (
    parse_cap,
    parse_cgroup_bytes,
    parse_memlock,
    parse_systemd_bytes,
)
from strata_doctor.model import Finding, Severity
from strata_doctor.registry import Check
from strata_doctor.root import Root
from tests.conftest import HOSTS, run_check, run_cli, two_node_files, write_tree

GIB = 1024**3
CONFIG = EngineConfig(arena_bytes=40 * GIB, kv_bytes=2 * GIB, headroom_bytes=4 * GIB)
RUNNING_UNIT = (
    "Id=strata.service\nLoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n"
    "ControlGroup=/system.slice/strata.service\nSlice=system.slice\n"
)
CG = "/sys/fs/cgroup/system.slice/strata.service"
LIMITS = ("Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max locked memory         {0:<20} {0:<20} bytes     \n")


def _status(pid: int, locked_kb: int = 0, caps: str = "000001ffffffffff") -> str:
    return (f"Name:\tpython\nPid:\t{pid}\nVmLck:\t{locked_kb:8d} kB\nVmPin:\t       0 kB\n"
            f"CapEff:\t{caps}\nCpus_allowed_list:\t0-7\nMems_allowed_list:\t0-1\n")


def _host(tmp_path: Path, extra: Dict[str, str], unit: Optional[str] = RUNNING_UNIT,
          gpu: bool = True) -> Path:
    files = two_node_files(unit_show=unit)
    if not gpu:  # a CPU-only host: nothing pins the arena for a GPU, so swap can take it
        files = {k: v for k, v in files.items() if "0000:81:00.0" not in k}
    files["/sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory pids\n"
    files["/proc/meminfo"] = ("MemTotal:       33554432 kB\nMemFree:        16777216 kB\n"
                              "SwapTotal:       2097148 kB\nSwapFree:        2097148 kB\n")
    files["/proc/swaps"] = ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                            "/dev/vda3                               partition\t2097148\t\t0\t\t-2\n")
    files.update(extra)
    return write_tree(tmp_path / "host", files)


def _run(check: Check, root: Path, config: EngineConfig = CONFIG) -> List[Finding]:
    return run_check(check, root, config)


def _ids(findings: List[Finding]) -> List[str]:
    return [f.id for f in findings]


# -- parsers ------------------------------------------------------------------------------
def test_parsers() -> None:
    assert parse_cgroup_bytes("max\n") == (None,)
    assert parse_cgroup_bytes("51539607552") == (51539607552,)
    assert parse_cgroup_bytes("9223372036854771712") == (None,)  # v1 without a limit
    assert parse_cgroup_bytes("garbage") is None
    assert parse_systemd_bytes("48G", None) == (48 * GIB,)
    assert parse_systemd_bytes("512M", None) == (512 * 1024**2,)
    assert parse_systemd_bytes("infinity", None) == (None,)
    assert parse_systemd_bytes("50%", 64 * GIB) == (32 * GIB,)
    assert parse_systemd_bytes("50%", None) is None
    assert parse_systemd_bytes("9" * 400, None) is None
    memlock = parse_memlock(LIMITS.format(8388608))
    assert memlock is not None and memlock.value == 8388608
    unlimited = parse_memlock(LIMITS.format("unlimited"))
    assert unlimited is not None and unlimited.value is None
    assert parse_cap("00000000a80425fb") == 0xA80425FB
    assert parse_cap("zz") is None


def test_lock_is_a_validated_config_key() -> None:
    assert parse_config({"lock": True}, "f").lock is True
    assert parse_config({"lock": "no"}, "f").lock is False
    with pytest.raises(ConfigError, match="f: lock: expected true or false, got 'sometimes'"):
        parse_config({"lock": "sometimes"}, "f")


# -- cgroup-limits ------------------------------------------------------------------------
def test_memory_max_below_the_arena_is_an_error_with_the_hosts_numbers(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        f"{CG}/memory.max": f"{40 * GIB}\n", f"{CG}/memory.high": "max\n",
        "/sys/fs/cgroup/system.slice/memory.max": "max\n",
        "/proc/4242/status": _status(4242), "/proc/4242/cgroup": "0::/system.slice/strata.service\n",
    })
    found = _run(CgroupLimits(), root)
    assert _ids(found) == ["memory-max"]
    f = found[0]
    assert f.severity is Severity.ERROR
    assert "memory.max is 40.00 GiB" in f.summary and "6.00 GiB short" in f.summary
    assert "46.00 GiB" in f.summary
    assert f.fix is not None and "systemctl set-property strata.service MemoryMax=46G" in f.fix.manual[0].text


def test_the_tightest_ancestor_limit_counts(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        f"{CG}/memory.max": "max\n", "/sys/fs/cgroup/system.slice/memory.max": f"{32 * GIB}\n",
        f"{CG}/memory.high": f"{44 * GIB}\n",
    })
    found = _run(CgroupLimits(), root)
    assert _ids(found) == ["memory-max", "memory-high"]
    assert found[0].evidence[0].source == "/sys/fs/cgroup/system.slice/memory.max"


def test_a_stopped_unit_is_judged_by_its_files(tmp_path: Path) -> None:
    unit = RUNNING_UNIT.replace("ActiveState=active", "ActiveState=inactive").replace(
        "SubState=running", "SubState=dead").replace("MainPID=4242", "MainPID=0")
    root = _host(tmp_path, {
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\n",
        "/etc/systemd/system/strata.service.d/50-limits.conf":
            "[Service]\nMemoryMax=30G\nAllowedMemoryNodes=0\n",
        "/sys/fs/cgroup/system.slice/memory.max": "max\n",
    }, unit=unit)
    found = _run(CgroupLimits(), root)
    assert _ids(found) == ["memory-max", "cpuset-mems"]
    assert "MemoryMax=30G" in found[0].summary and "(not running" in found[0].summary
    assert found[1].evidence[0].source.endswith("50-limits.conf")


def test_cpuset_excluding_the_gpus_node_is_an_error(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        f"{CG}/memory.max": "max\n", f"{CG}/cpuset.mems.effective": "0\n",
        f"{CG}/cpuset.cpus.effective": "0-3\n",
    })
    found = _run(CgroupLimits(), root)
    assert _ids(found) == ["cpuset-mems", "cpuset-cpus"]
    assert all(f.severity is Severity.ERROR for f in found)
    assert "excludes node 1, the GPU's node" in found[0].summary
    assert "AllowedMemoryNodes=1 AllowedCPUs=4-7" in (found[0].fix.manual[0].text if found[0].fix else "")


def test_a_fitting_cgroup_passes_and_states_its_limits(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        f"{CG}/memory.max": f"{60 * GIB}\n", f"{CG}/memory.swap.max": "0\n",
        f"{CG}/cpuset.mems.effective": "0-1\n",
    })
    found = _run(CgroupLimits(), root)
    assert _ids(found) == ["ok"]
    assert "memory.max 60.00 GiB" in found[0].summary and "memory.swap.max 0 B" in found[0].summary


def test_docker_without_cap_sys_nice_names_the_runtime(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        "/.dockerenv": "", "/sys/fs/cgroup/memory.max": "max\n",
        "/sys/fs/cgroup/cpuset.mems.effective": "0-1\n",
        "/proc/1/status": _status(1, caps="00000000a80425fb"), "/proc/1/cgroup": "0::/\n",
        "/proc/1/cmdline": "/bin/sh\0/app/start.sh\0",
    }, unit=None)
    found = _run(CgroupLimits(), root)
    assert _ids(found) == ["no-cap-sys-nice"]
    assert found[0].severity is Severity.WARNING
    assert found[0].summary.startswith("docker container (/.dockerenv)")
    assert found[0].fix is not None and "--cap-add SYS_NICE" in found[0].fix.summary


def test_podman_from_pid1s_environment(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        "/proc/1/environ": "PATH=/usr/bin\0container=podman\0", "/sys/fs/cgroup/memory.max": "max\n",
        "/proc/1/status": _status(1, caps="00000000a80425fb"), "/proc/1/cgroup": "0::/\n",
    }, unit=None)
    found = _run(CgroupLimits(), root)
    assert "container=podman in /proc/1/environ" in found[0].summary
    assert found[0].fix is not None and "--cap-add=sys_nice" in found[0].fix.summary


def test_no_cgroup_no_container_skips(tmp_path: Path) -> None:
    root = _host(tmp_path, {}, unit=None)
    ctx = HostContext(Root(str(root)), CONFIG)
    assert "no cgroup to read" in (CgroupLimits().applies(ctx) or "")


# -- memlock ------------------------------------------------------------------------------
def test_memlock_without_lock_true_says_the_arena_is_not_charged(tmp_path: Path) -> None:
    # No `lock: true` and VmLck/VmPin 0: nothing charges the arena to RLIMIT_MEMLOCK, whatever
    # the limit; pinning for the GPU (cudaHostRegister) is not charged (docs/checks/memlock.md).
    root = _host(tmp_path, {"/proc/4242/status": _status(4242), "/proc/4242/limits": LIMITS.format(65536)})
    found = _run(Memlock(), root)
    assert _ids(found) == ["not-charged"] and found[0].severity is Severity.OK
    assert "may lock 64.00 KiB" in found[0].summary and "VmLck 0 B, VmPin 0 B now" in found[0].summary


def test_a_running_engine_that_locks_a_little_is_not_a_limit_problem(tmp_path: Path) -> None:
    # VmLck 64 MiB of a 42 GiB arena + K/V, under a 64 MiB limit: the engine locks some
    # buffers, not its arena, so the limit is no reason for a warning.
    root = _host(tmp_path, {
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\n",
        "/proc/4242/status": _status(4242, locked_kb=65536), "/proc/4242/limits": LIMITS.format(67108864),
        "/.strata-doctor/commands/systemctl-version.txt": "systemd 252 (252.30-1~deb12u2)\n",
    })
    found = _run(Memlock(), root)
    assert _ids(found) == ["not-charged"]
    assert "VmLck 64.00 MiB" in found[0].summary and found[0].fix is None


def test_lock_true_under_a_small_limit_is_an_error_with_a_dropin(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\n",
        "/proc/4242/status": _status(4242, locked_kb=65536), "/proc/4242/limits": LIMITS.format(67108864),
        "/.strata-doctor/commands/systemctl-version.txt": "systemd 252 (252.30-1~deb12u2)\n",
    })
    found = _run(Memlock(), root, CONFIG._replace(lock=True))
    assert _ids(found) == ["too-low"]
    f = found[0]
    assert f.severity is Severity.ERROR and "may lock 64.00 MiB" in f.summary
    assert f.fix is not None and f.fix.files[0].path == \
        "/etc/systemd/system/strata.service.d/60-strata-doctor-memlock.conf"


def test_memlock_configured_but_not_in_effect(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\nLimitMEMLOCK=infinity\n",
        "/proc/4242/status": _status(4242, locked_kb=65536), "/proc/4242/limits": LIMITS.format(8388608),
    })
    assert _ids(_run(Memlock(), root, CONFIG._replace(lock=True))) == ["configured"]


def test_lock_true_with_a_stopped_unit_reads_limit_memlock(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\nLimitMEMLOCK=infinity\n",
    }, unit=None)
    found = _run(Memlock(), root, CONFIG._replace(lock=True))
    assert _ids(found) == ["ok"] and "unlimited" in found[0].summary


# -- swap ---------------------------------------------------------------------------------
def test_swap_with_oomd_watching_swap_is_a_warning_and_fixed_by_a_dropin(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        f"{CG}/memory.max": "max\n", f"{CG}/memory.swap.max": "max\n",
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\n",
        "/etc/systemd/system/-.slice.d/10-oomd-root-slice-defaults.conf": "[Slice]\nManagedOOMSwap=kill\n",
        "/.strata-doctor/commands/systemctl-show-systemd-oomd.service.txt":
            "Id=systemd-oomd.service\nLoadState=loaded\nActiveState=active\n",
        "/.strata-doctor/commands/systemctl-show--.slice.txt":
            "Id=-.slice\nLoadState=loaded\nManagedOOMSwap=kill\n",
        "/.strata-doctor/commands/systemctl-version.txt": "systemd 252 (252.30-1~deb12u2)\n",
    }, gpu=False)
    found = _run(Swap(), root)
    assert _ids(found) == ["swappable"]
    f = found[0]
    assert f.severity is Severity.WARNING and "systemd-oomd watches swap on /" in f.summary
    assert f.fix is not None and f.fix.files[0].path.endswith("60-strata-doctor-swap.conf")
    # the file the summary quotes as unlimited is evidence, as a limit with a number would be
    assert "memory.swap.max is max" in f.summary
    assert (f"{CG}/memory.swap.max", "max") in [(e.source, e.value) for e in f.evidence]


def test_swap_max_zero_passes_and_no_swap_passes(tmp_path: Path) -> None:
    root = _host(tmp_path, {f"{CG}/memory.swap.max": "0\n"})
    assert _ids(_run(Swap(), root)) == ["swap-max-0"]
    other = _host(tmp_path / "b", {"/proc/meminfo": "MemTotal:       33554432 kB\nSwapTotal:  0 kB\n"
                                   "SwapFree:  0 kB\n"})
    assert _ids(_run(Swap(), other)) == ["off"]


# -- page-cache ---------------------------------------------------------------------------
def _node1(free_kb: int, file_kb: int) -> str:
    return (f"Node 1 MemTotal:       67108864 kB\nNode 1 MemFree:        {free_kb} kB\n"
            f"Node 1 Inactive(file):  {file_kb // 2} kB\nNode 1 FilePages:      {file_kb} kB\n"
            "Node 1 Shmem:              1024 kB\n")


def test_page_cache_filling_the_gpus_node_is_a_warning_with_the_remedy(tmp_path: Path) -> None:
    root = _host(tmp_path, {"/sys/devices/system/node/node1/meminfo": _node1(10 * 1024**2, 50 * 1024**2),
                            "/proc/sys/vm/zone_reclaim_mode": "0\n"}, unit=None)
    found = _run(PageCache(), root)
    assert _ids(found) == ["cache-fills-node"]
    f = found[0]
    assert "node 1 has 10.00 GiB free" in f.summary and "50.00 GiB of it is page cache" in f.summary
    assert "zone_reclaim_mode=0" in f.detail
    assert f.fix is not None and "sync; echo 1 > /proc/sys/vm/drop_caches" in f.fix.manual[0].text
    assert not f.fix.files and not f.fix.actions  # advice only: nothing is written


def test_page_cache_quiet_when_the_node_has_room(tmp_path: Path) -> None:
    root = _host(tmp_path, {"/sys/devices/system/node/node1/meminfo": _node1(50 * 1024**2, 4 * 1024**2)},
                 unit=None)
    assert _ids(_run(PageCache(), root)) == ["fits"]


# -- the fixture host ---------------------------------------------------------------------
def test_container_fixture_host() -> None:
    result = run_cli(["check", "--root", str(HOSTS / "container-numa-limits"), "--format", "json",
                      "cgroup-limits", "memlock", "swap", "page-cache"])
    data = json.loads(result.stdout)
    found = {(f["check"], f["id"]): f["severity"] for f in data["findings"]}
    assert found == {
        ("cgroup-limits", "memory-max"): "error", ("cgroup-limits", "cpuset-mems"): "error",
        ("cgroup-limits", "cpuset-cpus"): "error", ("cgroup-limits", "no-cap-sys-nice"): "warning",
        ("memlock", "too-low"): "error", ("swap", "gpu-pinned"): "ok",
        ("page-cache", "cache-fills-node"): "warning",
    }
    assert result.exit_code == 1


def _snapshot(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".strata-doctor/state" not in str(p) and not p.is_symlink()}


def test_memlock_and_swap_dropins_apply_and_revert_byte_exact(tmp_path: Path) -> None:
    root = _host(tmp_path, {
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\n",
        "/etc/strata-doctor.yaml": "arena: 40GiB\nkv: 2GiB\nlock: true\n",
        f"{CG}/memory.max": "max\n", f"{CG}/memory.swap.max": "max\n",
        "/proc/4242/status": _status(4242), "/proc/4242/limits": LIMITS.format(8388608),
        "/.strata-doctor/commands/systemctl-version.txt": "systemd 252 (252.30-1~deb12u2)\n",
    }, gpu=False)
    before = _snapshot(root)
    result = run_cli(["fix", "--root", str(root), "--only", "memlock", "--only", "swap", "--apply"])
    assert result.exit_code in (0, 1), result.stderr
    dropins = root / "etc/systemd/system/strata.service.d"
    assert "LimitMEMLOCK=infinity" in (dropins / "60-strata-doctor-memlock.conf").read_text()
    assert "MemorySwapMax=0" in (dropins / "60-strata-doctor-swap.conf").read_text()
    check = run_cli(["check", "--root", str(root), "--format", "json", "memlock", "swap"])
    ids = {(f["check"], f["id"]) for f in json.loads(check.stdout)["findings"]}
    assert ids == {("memlock", "configured"), ("swap", "configured")}
    result = run_cli(["fix", "--root", str(root), "--revert"])
    assert result.exit_code == 0, result.stderr
    assert _snapshot(root) == before
