"""The user story, end to end on its own numbers: the seed box before and after its fix."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import HOSTS, run_cli

SEED = HOSTS / "seed-box"
BOUND = HOSTS / "seed-box-bound"


@pytest.fixture(scope="module")
def seed_text() -> str:
    result = run_cli(["check", "--root", str(SEED), "-v"], env={"NO_COLOR": "1"})
    assert result.exit_code == 1
    return result.stdout


def test_binding_error_names_node_1_the_ratio_and_the_numactl_line(seed_text: str) -> None:
    line = next(x for x in seed_text.splitlines() if x.startswith("✗ numa-binding"))
    assert "not bound to the GPU's node 1" in line
    assert "21/10 = 2.1x local" in line
    assert "numactl --preferred=1 --cpunodebind=1" in line
    data = json.loads(run_cli(["check", "numa-binding", "--root", str(SEED), "--format", "json"]).stdout)
    detail = data["findings"][0]["detail"]
    assert "Binding keeps 22 of 44 cores (44 of 88 CPUs: 22-43,66-87)" in detail


def test_arena_fits_node_1_but_not_its_free_memory_in_one_row(seed_text: str) -> None:
    """One row, the worst: node 1's capacity holds the engine, its free memory now does not."""
    rows = [x for x in seed_text.splitlines() if re.match(r"[✓!✗] arena-fit[ /]", x)]
    assert len(rows) == 1 and rows[0].startswith("! arena-fit/low-free"), rows
    assert "46.84 GiB + K/V 3.09 GiB + headroom 4.00 GiB = 53.93 GiB fits node 1 (63.00 GiB)" in rows[0]
    assert "but only 33.93 GiB of it is free for the engine now: 20.00 GiB less than it needs" in rows[0]
    assert "Its MemTotal leaves 9.07 GiB to spare." in seed_text


def test_hugepage_trap_and_oomd_are_one_chain_with_the_seed_numbers(seed_text: str) -> None:
    assert "pool 24,000, free 15,779, needed 23,983" in seed_text
    assert "46.84 GiB / 2 MiB → 23,983 pages" in seed_text
    chain = next(x for x in seed_text.splitlines() if x.startswith("✗ oomd"))
    assert chain.index("hugepage trap") < chain.index("THP fallback") < chain.index("oomd kill")
    assert "restart loop" in chain and "NRestarts=7" in chain


def test_the_184_processes_the_operator_moved(seed_text: str) -> None:
    assert "184 other processes may run on node 1's CPUs (22-43,66-87)" in seed_text


def test_gpu_choice_skips_the_gt_710_boot_display() -> None:
    data = json.loads(run_cli(["check", "--root", str(SEED), "--format", "json"]).stdout)
    compute = [g for g in data["facts"]["gpus"] if g["compute"]]
    assert [(g["address"], g["numa_node"]) for g in compute] == [("0000:84:00.0", 1)]
    display = next(g for g in data["facts"]["gpus"] if not g["compute"])
    assert (display["address"], display["boot_vga"], display["numa_node"]) == ("0000:03:00.0", True, 0)


def test_the_bound_box_is_ready() -> None:
    result = run_cli(["check", "--root", str(BOUND)])
    assert result.exit_code == 0, result.stdout
    assert "strata.service is bound to node 1 (CPUs 22-43,66-87)" in result.stdout
