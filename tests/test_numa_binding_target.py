"""numa-binding against what the host allows and what the user chose: a cpuset that leaves
out the target node makes binding impossible (cgroup-limits reports it; numa-binding defers
with an info finding and advises no numactl line), and ``numa: N`` is said as the chosen
node, never as the GPU's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

from strata_doctor.checks.cgroup_limits import CgroupLimits
from strata_doctor.checks.numa_binding import NumaBinding
from strata_doctor.config import EngineConfig
from strata_doctor.model import Finding, Severity
from strata_doctor.registry import Check
from tests.conftest import HOSTS, UNBOUND_UNIT, copy_host, run_check, run_cli, two_node_files, write_tree

GIB = 1024**3
CONFIG = EngineConfig(arena_bytes=8 * GIB, kv_bytes=GIB, headroom_bytes=2 * GIB)
RUNNING_UNIT = (
    "Id=strata.service\nLoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n"
    "ControlGroup=/system.slice/strata.service\nSlice=system.slice\n"
    "NUMAPolicy=n/a\nNUMAMask=\nCPUAffinity=\nAllowedCPUs=\n"
)
CG = "/sys/fs/cgroup/system.slice/strata.service"


def _host(tmp_path: Path, cpuset: Dict[str, str], gpu_node: int = 1) -> Path:
    """Two nodes (0-3, 4-7), the GPU on ``gpu_node``, the engine running unbound in its
    unit's cgroup with the given cpuset files."""
    files = two_node_files(gpu_node=gpu_node, unit_show=RUNNING_UNIT)
    files["/sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory pids\n"
    files[f"{CG}/memory.max"] = "max\n"
    files["/proc/4242/status"] = ("Name:\tpython\nPid:\t4242\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n"
                                  "Cpus_allowed_list:\t0-7\nMems_allowed_list:\t0-1\n")
    files["/proc/4242/cgroup"] = "0::/system.slice/strata.service\n"
    files.update({f"{CG}/{name}": value for name, value in cpuset.items()})
    return write_tree(tmp_path / "host", files)


def _run(check: Check, root: Path, config: EngineConfig = CONFIG) -> List[Finding]:
    return run_check(check, root, config)


def _all_text(findings: List[Finding]) -> str:
    return " ".join(f.summary + " " + (f.detail or "") + " " + (f.fix.summary if f.fix else "")
                    for f in findings)


# -- a cpuset without the target node -------------------------------------------------------
def test_a_cpuset_without_the_gpus_node_defers_to_cgroup_limits(tmp_path: Path) -> None:
    root = _host(tmp_path, {"cpuset.mems.effective": "0\n", "cpuset.cpus.effective": "0-3\n"})
    (found,) = _run(NumaBinding(), root)
    assert found.id == "cgroup-excludes-node"
    assert found.severity is Severity.INFO  # cgroup-limits' error already fails the check
    assert found.fix is None
    assert found.summary == (
        "binding strata.service to the GPU's node 1 is impossible in the engine's cgroup: "
        "cpuset.mems 0 excludes it and cpuset.cpus 0-3 holds none of its CPUs (4-7); "
        "cgroup-limits reports it")
    assert "numactl --preferred" not in _all_text([found])
    assert [(e.source, e.value) for e in found.evidence] == [
        (f"{CG}/cpuset.mems.effective", "0"), (f"{CG}/cpuset.cpus.effective", "0-3")]
    # the one error, with the fix, is cgroup-limits'
    limits = _run(CgroupLimits(), root)
    assert [(f.id, f.severity) for f in limits] == [
        ("cpuset-mems", Severity.ERROR), ("cpuset-cpus", Severity.ERROR)]
    assert all(f.fix is not None for f in limits)


def test_memory_nodes_alone_are_enough_to_defer(tmp_path: Path) -> None:
    root = _host(tmp_path, {"cpuset.mems.effective": "0\n", "cpuset.cpus.effective": "0-7\n"})
    (found,) = _run(NumaBinding(), root)
    assert found.id == "cgroup-excludes-node"
    assert "cpuset.mems 0 excludes it;" in found.summary and "cpuset.cpus" not in found.summary


def test_a_cpuset_that_holds_the_gpus_node_still_gets_the_binding(tmp_path: Path) -> None:
    root = _host(tmp_path, {"cpuset.mems.effective": "0-1\n", "cpuset.cpus.effective": "0-7\n"})
    (found,) = _run(NumaBinding(), root)
    assert found.id == "unbound" and found.severity is Severity.ERROR
    assert "run it under `numactl --preferred=1 --cpunodebind=1`" in found.summary
    assert found.fix is not None
    assert _run(CgroupLimits(), root)[0].id == "ok"


def test_the_container_fixture_host_defers_and_its_plan_has_no_binding(tmp_path: Path) -> None:
    """container-numa-limits: --cpuset-mems 0 --cpuset-cpus 0-21,44-65, the GPU on node 1."""
    host = HOSTS / "container-numa-limits"
    result = run_cli(["check", "--root", str(host), "--format", "json"])
    assert result.exit_code == 1  # cgroup-limits' errors
    data = json.loads(result.stdout)
    binding = [f for f in data["findings"] if f["check"] == "numa-binding"]
    assert [(f["id"], f["severity"]) for f in binding] == [("cgroup-excludes-node", "info")]
    assert binding[0]["fix"] is None
    assert "cpuset.mems 0 excludes it and cpuset.cpus 0-21,44-65 holds none of its CPUs " \
        "(22-43,66-87)" in binding[0]["summary"]
    assert "this docker container" in binding[0]["summary"]
    errors = {f["id"] for f in data["findings"] if f["check"] == "cgroup-limits" and f["severity"] == "error"}
    assert {"cpuset-mems", "cpuset-cpus"} <= errors
    # the plan writes no numactl wrapper or binding drop-in that cannot work here
    copy = copy_host(host, tmp_path / "host")
    plan = run_cli(["fix", "--root", str(copy)])
    assert "Traceback" not in plan.stdout + plan.stderr
    assert "strata-numa" not in plan.stdout and "numactl" not in plan.stdout


# -- numa: N, chosen by the user -------------------------------------------------------------
def _summary(tmp_path: Path, numa: str, gpu_node: Optional[int] = 1) -> str:
    files = two_node_files(gpu_node=gpu_node or 1, unit_show=UNBOUND_UNIT)
    if gpu_node is None:
        files = {k: v for k, v in files.items() if "81:00.0" not in k}
    root = write_tree(tmp_path / f"host-{numa}-{gpu_node}", files)
    (found,) = _run(NumaBinding(), root, CONFIG._replace(numa=numa))
    assert found.id == "unbound"
    return found.summary


def test_a_chosen_node_is_never_called_the_gpus(tmp_path: Path) -> None:
    summary = _summary(tmp_path, "0")
    assert summary.startswith("strata.service is not bound to the chosen node 0 (the GPU is on node 1):")
    assert "GPU's node 0" not in summary
    assert "`numactl --preferred=0 --cpunodebind=0`" in summary


def test_a_chosen_node_that_is_the_gpus_says_both(tmp_path: Path) -> None:
    assert _summary(tmp_path, "1").startswith("strata.service is not bound to the chosen node 1, the GPU's:")


def test_a_chosen_node_without_a_gpu(tmp_path: Path) -> None:
    assert _summary(tmp_path, "0", gpu_node=None).startswith(
        "strata.service is not bound to the chosen node 0:")


def test_the_gpus_own_node_is_said_as_before(tmp_path: Path) -> None:
    assert _summary(tmp_path, "auto").startswith("strata.service is not bound to the GPU's node 1:")


def test_a_cpuset_without_the_chosen_node_says_it_is_chosen(tmp_path: Path) -> None:
    root = _host(tmp_path, {"cpuset.mems.effective": "1\n", "cpuset.cpus.effective": "4-7\n"})
    (found,) = _run(NumaBinding(), root, CONFIG._replace(numa="0"))
    assert found.id == "cgroup-excludes-node"
    assert found.summary.startswith(
        "binding strata.service to the chosen node 0 (the GPU is on node 1) is impossible in the "
        "engine's cgroup: cpuset.mems 1 excludes it and cpuset.cpus 4-7 holds none of its CPUs (0-3)")


def test_every_deferral_has_cgroup_limits_error_beside_it() -> None:
    """On every fixture host: numa-binding defers exactly where cgroup-limits reports the
    cpuset as an error, so the one cause is never left without its error and fix."""
    hosts = sorted(p for p in HOSTS.iterdir() if p.is_dir())
    deferred = []
    for host in hosts:
        found = json.loads(run_cli(["check", "--root", str(host), "--format", "json"]).stdout)["findings"]
        ids = {(f["check"], f["id"], f["severity"]) for f in found}
        defers = ("numa-binding", "cgroup-excludes-node", "info") in ids
        fenced = bool(ids & {("cgroup-limits", "cpuset-mems", "error"),
                             ("cgroup-limits", "cpuset-cpus", "error")})
        assert defers == fenced, host.name
        if defers:
            deferred.append(host.name)
    assert deferred == ["container-numa-limits"]
