"""check with a saved probe result: the measured ratio replaces the firmware's distances.

The seed-box fixture is copied and ``/var/lib/strata-doctor/probe.json`` is added to the
copy; the golden output is ``tests/golden/probe/seed-box-measured.txt``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

from strata_doctor.config import load_config
from strata_doctor.context import HostContext
from strata_doctor.facts import saved_probe as probe_data
from strata_doctor.root import Root
from tests.conftest import HOSTS, REPO, compare_golden, copy_host, run_cli

GOLDEN = REPO / "tests" / "golden" / "probe"
MODEL = "Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz"
KERNEL = "6.1.0-27-amd64"


def seed_probe(**changes: Any) -> Dict[str, Any]:
    """The seed box as the probe would see it (the issue's figures: 61.0 local, 24.4 remote)."""
    cells = []
    for cpu in (0, 1):
        for mem in (0, 1):
            local = cpu == mem
            cells.append({"cpu_node": cpu, "mem_node": mem, "read_gbps": 61.0 if local else 24.4,
                          "latency_ns": 88.4 if local else 139.7, "placed_fraction": 1.0,
                          "verified": True, "threads": 44})
    data: Dict[str, Any] = {
        "schema": "strata-doctor/probe/1", "created": "2026-11-30T09:00:00+00:00",
        "cpu_model": MODEL, "kernel": KERNEL, "size_bytes": 1 << 30, "latency_bytes": 220 << 20,
        "llc_bytes": 55 << 20, "seconds": 10.0, "chase_overhead_ns": 6.1, "matrix": cells,
        "gpu": {"status": "skipped", "reason": "--no-gpu", "copies": []}, "notes": [],
    }
    data.update(changes)
    return data


@pytest.fixture
def seed_tree(tmp_path: Path) -> Path:
    return copy_host("seed-box", tmp_path / "seed-box")


def save(tree: Path, data: Any) -> None:
    path = tree / probe_data.SAVED_PATH.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def check_text(tree: Path) -> str:
    result = run_cli(["check", "--root", str(tree), "-v", "numa-binding"], env={"NO_COLOR": "1"})
    assert result.exit_code == 1, result.output
    return result.stdout


def test_golden_check_with_a_saved_probe(seed_tree: Path) -> None:
    save(seed_tree, seed_probe())
    text = check_text(seed_tree)
    assert "remote reads 2.5x slower (24.4 vs 61.0 GB/s, measured)" in text
    assert "21/10" not in text
    compare_golden(GOLDEN / "seed-box-measured.txt", text)


def test_the_gain_is_a_range_from_the_matrix(seed_tree: Path) -> None:
    save(seed_tree, seed_probe())
    text = " ".join(check_text(seed_tree).split())
    # 2 nodes, 2.5x: unbound reads take 1/2 + 1/2 x 2.5 = 1.75 of the bound time.
    assert "binding should make a memory-bound pool 27% to 75% faster" in text
    assert "about 1/2 of the reads remote" in text


@pytest.mark.parametrize("changes, why", [
    ({"kernel": "6.12.0-1-amd64"}, "it was measured under another kernel (6.12.0-1-amd64)"),
    ({"cpu_model": "AMD EPYC 7763 64-Core Processor"},
     "it was measured on another CPU (AMD EPYC 7763 64-Core Processor)"),
    ({"schema": "strata-doctor/probe/0"},
     "it is not a probe result: schema 'strata-doctor/probe/0', expected 'strata-doctor/probe/1'"),
])
def test_a_stale_or_bad_result_falls_back_to_the_distances(seed_tree: Path, changes: Dict[str, Any],
                                                           why: str) -> None:
    save(seed_tree, seed_probe(**changes))
    text = " ".join(check_text(seed_tree).split())
    assert "21/10 = 2.1x" in text and "measured)" not in text
    assert (f"The saved probe result /var/lib/strata-doctor/probe.json is not used: {why}; "
            "the ratio is the firmware's.") in text


def test_without_a_saved_result_the_output_is_unchanged(seed_tree: Path) -> None:
    assert check_text(seed_tree) == check_text(HOSTS / "seed-box")


def test_the_reader_lives_on_host_context_and_reads_once(seed_tree: Path) -> None:
    save(seed_tree, seed_probe())
    root = Root(seed_tree)
    ctx = HostContext(root, load_config(root, None))
    saved = ctx.saved_probe
    assert saved is not None and saved.usable is not None and saved.unused is None
    assert ctx.saved_probe is saved
    assert probe_data.SAVED_PATH in root.reads  # recorded, so a bundle carries it


def test_report_shows_the_matrix_and_the_bundle_carries_the_file(seed_tree: Path, tmp_path: Path) -> None:
    import tarfile

    save(seed_tree, seed_probe())
    bundle = tmp_path / "out.tar.gz"
    result = run_cli(["report", "--root", str(seed_tree), "--bundle", str(bundle)])
    assert result.exit_code in (0, 1), result.output
    text = result.stdout
    assert "Measured by `strata-doctor probe` (`/var/lib/strata-doctor/probe.json`)" in text
    assert "CPU node      mem 0     mem 1" in text
    assert "       1       24.4      61.0" in text
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any(n.endswith("var/lib/strata-doctor/probe.json") for n in names), names
    replay = run_cli(["check", "--bundle", str(bundle), "-v", "numa-binding"], env={"NO_COLOR": "1"})
    assert "remote reads 2.5x slower (24.4 vs 61.0 GB/s, measured)" in replay.stdout, replay.output
