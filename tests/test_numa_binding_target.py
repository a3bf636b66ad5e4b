"""numa-binding against what the user chose: ``numa: N`` is said as the chosen node, never
as the GPU's."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from strata_doctor.checks.numa_binding import NumaBinding
from strata_doctor.context import HostContext
from strata_doctor.engine import EngineConfig
from strata_doctor.model import Finding
from strata_doctor.registry import Check
from strata_doctor.root import Root
from tests.conftest import UNBOUND_UNIT, two_node_files, write_tree

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
    ctx = HostContext(Root(str(root)), config)
    reason = check.applies(ctx)
    assert reason is None, reason
    return list(check.run(ctx))


def _all_text(findings: List[Finding]) -> str:
    return " ".join(f.summary + " " + (f.detail or "") + " " + (f.fix.summary if f.fix else "")
                    for f in findings)


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
