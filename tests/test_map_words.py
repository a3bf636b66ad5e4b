"""``strata-doctor map`` says what check says: the arena given is the arena drawn, and a
BMC's or hypervisor's display is no compute GPU in the header either.

Goldens for the sparse small-no-gpu host sit beside the others in tests/golden/map/;
``STRATA_UPDATE_GOLDEN=1`` rewrites them for review.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

from tests.conftest import HOSTS, REPO, compare_golden, run_cli, two_node_files, write_tree

GOLDEN = REPO / "tests" / "golden" / "map"
GPU_DIR = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"
NOT_CONFIGURED = "size not configured"
SUFFIX = {"text": "txt", "mermaid": "mmd", "json": "json"}


def map_of(root: Path, *args: str) -> str:
    result = run_cli(["map", "--root", str(root), *args])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def map_json(root: Path, *args: str) -> Dict[str, Any]:
    data: Dict[str, Any] = json.loads(map_of(root, "--format", "json", *args))
    return data


def host_with_display(tmp_path: Path, vendor: str, device: str) -> Path:
    """The two-node test host with its one display function replaced by ``vendor:device``."""
    files = two_node_files()
    files[f"{GPU_DIR}/vendor"] = f"0x{vendor}\n"
    files[f"{GPU_DIR}/device"] = f"0x{device}\n"
    return write_tree(tmp_path / "host", files)


@pytest.mark.parametrize("fmt", sorted(SUFFIX))
def test_golden_small_no_gpu(fmt: str) -> None:
    compare_golden(GOLDEN / f"small-no-gpu.{SUFFIX[fmt]}", map_of(HOSTS / "small-no-gpu", "--format", fmt))


# -- the arena given is the arena drawn ---------------------------------------------
def test_arena_from_the_command_line(tmp_path: Path) -> None:
    """--arena on a host with no config: the map draws that arena, never 'not configured'."""
    root = write_tree(tmp_path / "host", two_node_files())
    assert NOT_CONFIGURED in map_of(root)
    text = map_of(root, "--arena", "8GiB", "--kv", "1GiB")
    assert NOT_CONFIGURED not in text
    assert "8.00 GiB + K/V 1.00 GiB + headroom 4.00 GiB" in text
    arena = map_json(root, "--arena", "8GiB", "--kv", "1GiB")["arena"]
    assert arena["arena_bytes"] == 8 * 2**30 and arena["kv_bytes"] == 2**30


def test_arena_from_the_config(tmp_path: Path) -> None:
    """``arena:`` in the tree's /etc/strata-doctor.yaml is drawn as --arena is."""
    files = two_node_files()
    files["/etc/strata-doctor.yaml"] = "arena: 8GiB\nkv: 1GiB\n"
    text = map_of(write_tree(tmp_path / "host", files))
    assert NOT_CONFIGURED not in text
    assert "8.00 GiB + K/V 1.00 GiB + headroom 4.00 GiB on node 1 (16.00 GiB): 3.00 GiB to spare" in text


@pytest.mark.parametrize("host", ["small-no-gpu", "roomy-no-meminfo"])
def test_arena_on_a_capture_without_proc_meminfo(host: str) -> None:
    """Without /proc/meminfo the host's size is its nodes' sum, as arena-fit counts it."""
    data = map_json(HOSTS / host, "--arena", "46.84GiB", "--kv", "3.09GiB")
    nodes_total = sum(n["memory_total_bytes"] for n in data["nodes"])
    assert data["memory_total_bytes"] == nodes_total
    assert data["arena"]["total_bytes"] == nodes_total
    need = data["arena"]["pinned_bytes"] + data["arena"]["headroom_bytes"]
    assert data["arena"]["spare_bytes"] == nodes_total - need
    result = run_cli(["check", "arena-fit", "--root", str(HOSTS / host), "--format", "json"])
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["id"] == ("fits" if nodes_total > need else "does-not-fit")


def test_arena_with_no_memory_size(tmp_path: Path) -> None:
    """An arena, but no MemTotal anywhere: its size is unknown, said in words, no number."""
    files = {k: v for k, v in two_node_files().items() if not k.endswith("meminfo")}
    text = map_of(write_tree(tmp_path / "host", files), "--arena", "8GiB")
    assert NOT_CONFIGURED not in text
    assert "its size is unknown" in text
    assert "None" not in text and "unknown to spare" not in text


# -- a BMC's or hypervisor's display is no compute GPU --------------------------------
@pytest.mark.parametrize("vendor, device, what", [
    ("1a03", "2000", "a BMC's ASPEED VGA"),
    ("102b", "0532", "a BMC's Matrox VGA"),
    ("1af4", "1050", "a virtio-gpu display"),
    ("1013", "00b8", "an emulated or BMC Cirrus Logic VGA"),
])
def test_header_says_no_compute_gpu(tmp_path: Path, vendor: str, device: str, what: str) -> None:
    root = host_with_display(tmp_path, vendor, device)
    header = map_of(root).splitlines()[0]
    assert header.endswith(f"no compute GPU (0000:81:00.0 is {what})"), header
    assert "1 GPU" not in header
    (gpu,) = map_json(root)["gpus"]
    assert gpu["management"] == what and gpu["compute"] is False
    check = json.loads(run_cli(["check", "gpu-placement", "--root", str(root), "--format", "json"]).stdout)
    assert check["findings"][0]["summary"].startswith("no compute GPU")


def test_a_named_display_counts_as_the_gpu(tmp_path: Path) -> None:
    """--gpu naming the ASPEED makes it the compute GPU, in the map as in check."""
    root = host_with_display(tmp_path, "1a03", "2000")
    header = map_of(root, "--gpu", "0000:81:00.0").splitlines()[0]
    assert header.endswith(", 1 GPU"), header
    (gpu,) = map_json(root, "--gpu", "0000:81:00.0")["gpus"]
    assert gpu["compute"] is True and gpu["management"] is None


def test_a_compute_gpu_beside_a_bmc_display(tmp_path: Path) -> None:
    """The GPU is counted and the BMC's display named beside it (as xeon-snc2's H100)."""
    header = map_of(HOSTS / "xeon-snc2").splitlines()[0]
    assert header.endswith("1 GPU (0000:03:00.0 is a BMC's ASPEED VGA)"), header


def test_a_host_without_display_functions(tmp_path: Path) -> None:
    files = {k: v for k, v in two_node_files().items() if "0000:81:00.0" not in k}
    # with no PCI function at all the tree cannot tell; a listed NIC and no display says no GPU
    assert map_of(write_tree(tmp_path / "bare", files)).splitlines()[0].endswith(
        "GPUs unknown (no PCI functions in the tree)")
    files["/sys/bus/pci/devices/0000:01:00.0/class"] = "0x020000\n"
    assert map_of(write_tree(tmp_path / "host", files)).splitlines()[0].endswith("no GPU found")
