"""The report's hardware lines say what the tree shows: an arm CPU by its cores' name and
arm64 ISA, a tree without PCI functions as GPUs unknown, cores unknown where no sibling list
or core id exists, and no x86 words on other architectures."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List

from tests.conftest import HOSTS, run_cli


def hardware(root: Path) -> List[str]:
    result = run_cli(["report", "--root", str(root)])
    assert result.exit_code in (0, 1), result.stderr
    return [line for line in result.stdout.splitlines() if line.startswith(("- CPU:", "- GPU:", "  - node"))]


def test_an_arm64_cpu_is_named_by_its_cores_with_its_isa() -> None:
    lines = hardware(HOSTS / "arm64-neoverse-n1")
    assert "- CPU: **Arm Neoverse N1** (80 cores / 80 threads); expert-kernel ISA: NEON, dotprod" in lines
    assert not any("AVX" in line for line in lines)


def test_no_pci_function_is_gpus_unknown_and_a_listed_bus_is_none_found() -> None:
    assert "- GPU: unknown (the tree lists no PCI function)" in hardware(HOSTS / "cpu-links-only")
    assert "- GPU: none found (no PCI function of class display/3D)" in hardware(HOSTS / "no-gpu")


def test_other_architectures_get_no_x86_words_and_one_core_is_singular() -> None:
    cpu = next(line for line in hardware(HOSTS / "cpu-links-only") if line.startswith("- CPU:"))
    assert "(1 core / 4 threads)" in cpu
    assert cpu.endswith("expert-kernel ISA: none (ppc: the expert kernels are built for x86-64 and arm64)")


def test_cores_are_unknown_where_the_tree_shows_no_core(tmp_path: Path) -> None:
    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "no-gpu", tree, symlinks=True)
    (tree / "proc/cpuinfo").unlink()
    for topology in (tree / "sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        shutil.rmtree(topology)
    lines = hardware(tree)
    assert any("(cores unknown / 32 threads" in line for line in lines if line.startswith("- CPU:")), lines
    assert any("(cores unknown / 16 threads)" in line for line in lines if line.startswith("  - node")), lines
    drawn = run_cli(["map", "--root", str(tree)], env={"NO_COLOR": "1"}).stdout
    assert "cores unknown, 16 threads" in drawn
