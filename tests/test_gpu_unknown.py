"""A tree that lists no PCI function cannot show whether the host has a GPU: gpu-placement
and the map say unknown there, and "no GPU" only where the bus is listed and holds none."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import HOSTS, check_json, findings_of, run_cli


def test_a_tree_without_pci_functions_says_the_gpu_is_unknown() -> None:
    found = findings_of(check_json(HOSTS / "cpu-links-only"), "gpu-placement")
    assert list(found) == ["no-pci"]
    assert "whether a GPU exists is unknown" in found["no-pci"]["summary"]
    assert "no GPU found" not in found["no-pci"]["summary"]


def test_a_listed_bus_without_display_functions_says_no_gpu_and_counts_them() -> None:
    found = findings_of(check_json(HOSTS / "no-gpu"), "gpu-placement")
    assert list(found) == ["no-gpu"]
    functions = len(list((HOSTS / "no-gpu" / "sys/bus/pci/devices").iterdir()))
    assert f"Of the {functions:,} PCI functions listed, none is" in found["no-gpu"]["detail"]


def test_an_empty_pci_folder_is_no_listing(tmp_path: Path) -> None:
    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "no-gpu", tree, symlinks=True)
    devices = tree / "sys/bus/pci/devices"
    shutil.rmtree(devices)
    devices.mkdir()
    assert list(findings_of(check_json(tree), "gpu-placement")) == ["no-pci"]


def test_the_map_headline_follows_the_listing() -> None:
    unknown = run_cli(["map", "--root", str(HOSTS / "cpu-links-only")], env={"NO_COLOR": "1"})
    assert "GPUs unknown (no PCI functions in the tree)" in unknown.stdout.splitlines()[0]
    listed = run_cli(["map", "--root", str(HOSTS / "no-gpu")], env={"NO_COLOR": "1"})
    assert listed.stdout.splitlines()[0].endswith(", no GPU found")
