"""AMD GPUs: which PCI functions are GPUs (amdgpu's classes 0x0300, 0x0302, 0x0380 and
0x1200), integrated GPUs set aside as the compute GPU, the model table, rocm-smi's
parsers, and what the AMD fixture hosts' checks find."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import pytest

from strata_doctor.facts.gpu import Gpu, PcieLink, read_gpus
from strata_doctor.facts.gpu_models import GPU_MODELS, gpu_model
from strata_doctor.facts.kfd import KfdMemBank, KfdNode
from strata_doctor.facts.rocm_smi import parse_rocm_product, parse_rocm_topo_nodes
from strata_doctor.root import Root
from strata_doctor.rules.gpu import choose_compute_gpu, compute_candidates, integrated_gpu
from tests.conftest import HOSTS, check_json, copy_host, findings_of, write_tree

PCI = "/sys/devices/pci0000:00/0000:00:03.1"


def _function(address: str, cls: str, vendor: str, device: str, driver: Optional[str]) -> Dict[str, str]:
    base = f"{PCI}/{address}"
    files = {f"{base}/class": cls + "\n", f"{base}/vendor": vendor + "\n", f"{base}/device": device + "\n",
             f"{base}/numa_node": "0\n", f"/sys/bus/pci/devices/{address}": "->../../.." + base[len("/sys"):]}
    if driver:
        files[f"{base}/driver"] = f"->../../../bus/pci/drivers/{driver}"
    return files


def _gpus(tmp_path: Path, named: Optional[str] = None, **functions: Dict[str, str]) -> Dict[str, Gpu]:
    files: Dict[str, str] = {}
    for spec in functions.values():
        files.update(spec)
    root = Root(str(write_tree(tmp_path / "host", files)))
    return {g.address: g for g in read_gpus(root, named=named)}


def test_amdgpu_accelerators_of_class_0x12_are_gpus_and_others_are_not(tmp_path: Path) -> None:
    found = _gpus(
        tmp_path,
        mi300x=_function("0000:05:00.0", "0x120000", "0x1002", "0x74a1", "amdgpu"),
        mi210=_function("0000:03:00.0", "0x038000", "0x1002", "0x740f", "amdgpu"),
        gaudi=_function("0000:06:00.0", "0x120000", "0x1da3", "0x1020", "habanalabs"),
        unbound=_function("0000:07:00.0", "0x120000", "0x1002", "0x74a1", None),
        psp=_function("0000:08:00.2", "0x108000", "0x1022", "0x1498", "ccp"),
    )
    assert sorted(found) == ["0000:03:00.0", "0000:05:00.0"]
    assert found["0000:05:00.0"].pci_class == 0x120000


def test_a_named_accelerator_of_another_vendor_counts(tmp_path: Path) -> None:
    found = _gpus(tmp_path, named="06:00.0",
                  gaudi=_function("0000:06:00.0", "0x120000", "0x1da3", "0x1020", "habanalabs"))
    assert list(found) == ["0000:06:00.0"]


def _gpu(address: str, vendor: int, device: int, driver: str, boot: bool = False) -> Gpu:
    return Gpu(address, vendor, device, 0x030000, driver, 0, frozenset({0}), boot,
               PcieLink("16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16), 32 * 2**30, True)


IGPU_NODE = KfdNode(2, {"simd_count": 4, "location_id": 0x1300}, ())
DGPU_NODE = KfdNode(1, {"simd_count": 192, "location_id": 0x0300}, (KfdMemBank(1, 25753026560),))


def test_an_apu_gpu_without_vram_is_set_aside_and_the_discrete_card_computes() -> None:
    igpu = _gpu("0000:13:00.0", 0x1002, 0x164E, "amdgpu")
    dgpu = _gpu("0000:03:00.0", 0x1002, 0x744C, "amdgpu", boot=True)
    marked = (dgpu._replace(integrated=integrated_gpu(dgpu, DGPU_NODE)),
              igpu._replace(integrated=integrated_gpu(igpu, IGPU_NODE)))
    assert marked[0].integrated is None
    assert marked[1].integrated == "an APU's integrated GPU (KFD node 2: simd_count 4, no VRAM bank)"
    gpu, reason = choose_compute_gpu(marked, None)
    assert gpu is not None and gpu.address == "0000:03:00.0"
    assert reason == ("the only GPU that is not an integrated GPU; 0000:13:00.0 is an APU's integrated GPU "
                      "(KFD node 2: simd_count 4, no VRAM bank)")
    # without the set-aside the old rule, "the GPU that is not the boot display", took the iGPU
    plain, _ = choose_compute_gpu((dgpu, igpu), None)
    assert plain is not None and plain.address == "0000:13:00.0"


def test_naming_the_igpu_still_takes_it() -> None:
    igpu = _gpu("0000:13:00.0", 0x1002, 0x164E, "amdgpu")
    marked = (igpu._replace(integrated=integrated_gpu(igpu, IGPU_NODE)),)
    gpu, reason = choose_compute_gpu(marked, "13:00.0")
    assert gpu is not None and reason == "the GPU named by --gpu (0000:13:00.0)"


def test_a_known_apu_id_is_integrated_where_kfd_is_not_captured() -> None:
    igpu = _gpu("0000:13:00.0", 0x1002, 0x164E, "amdgpu")
    assert integrated_gpu(igpu, None) == ("an APU's integrated GPU "
                                          "(AMD Radeon Graphics (Raphael iGPU), 1002:164e)")
    assert integrated_gpu(_gpu("0000:03:00.0", 0x1002, 0x744C, "amdgpu"), None) is None


@pytest.mark.parametrize("driver", ["i915", "xe"])
def test_an_intel_igpu_is_set_aside_but_an_arc_card_is_not(driver: str) -> None:
    igpu = _gpu("0000:00:02.0", 0x8086, 0xA780, driver)
    arc = _gpu("0000:03:00.0", 0x8086, 0x56A0, driver)
    assert integrated_gpu(igpu, None) == f"an Intel integrated GPU ({driver})"
    assert integrated_gpu(arc, None) is None
    split = compute_candidates((igpu._replace(integrated=integrated_gpu(igpu, None)), arc))
    assert [g.address for g in split.candidates] == ["0000:03:00.0"]
    only, reason = choose_compute_gpu((igpu._replace(integrated=integrated_gpu(igpu, None)),), None)
    assert only is None
    assert reason == (f"no compute GPU: 0000:00:02.0 (Intel 8086:a780) is an Intel integrated GPU "
                      f"({driver}), never a compute GPU unless --gpu names it")


def test_the_model_table_names_the_issue_s_gpus() -> None:
    assert gpu_model(0x1002, 0x740F) == "AMD Instinct MI210"
    assert gpu_model(0x1002, 0x74A1) == "AMD Instinct MI300X"
    assert gpu_model(0x1002, 0x744C) == "AMD Radeon RX 7900 XTX"
    assert gpu_model(0x10DE, 0x2330) == "NVIDIA H100 SXM5"
    assert gpu_model(0x10DE, 0x1B06) == "NVIDIA GeForce GTX 1080 Ti"
    assert gpu_model(0x10DE, 0xFFFF) is None and gpu_model(None, 0x2330) is None
    assert {v for v, _ in GPU_MODELS} == {0x10DE, 0x1002}


PRODUCT = """

============================ ROCm System Management Interface ============================
====================================== PCI Bus ID ======================================
GPU[0]\t\t: PCI Bus: 0000:03:00.0
GPU[1]\t\t: PCI Bus: 0000:13:00.0
=================================== Product Info ===================================
GPU[0]\t\t: Card Series: \t\tAMD Radeon RX 7900 XTX
GPU[0]\t\t: Card Model: \t\t0x744c
GPU[0]\t\t: Node ID: \t\t1
GPU[1]\t\t: Card series: \t\tAMD Radeon Graphics
GPU[2]\t\t: Card Series: \t\tN/A
==========================================================================================
================================== End of ROCm SMI Log ===================================
"""


def test_rocm_smi_product_rows_by_card() -> None:
    rows = parse_rocm_product(PRODUCT)
    assert [(r.card, r.series, r.bus, r.kfd_node) for r in rows] == [
        (0, "AMD Radeon RX 7900 XTX", "0000:03:00.0", 1), (1, "AMD Radeon Graphics", "0000:13:00.0", None)]
    assert parse_rocm_product("") == () and parse_rocm_product("rocm-smi: command not found\n") == ()


def test_rocm_smi_topology_nodes() -> None:
    text = ("GPU[0]\t\t: (Topology) Numa Node: 0\nGPU[1]\t\t: (Topology) Numa Node: -1\n"
            "GPU[2]\t\t: (Topology) Numa Node: N/A\n")
    assert parse_rocm_topo_nodes(text) == {0: 0, 1: -1}


# -- the fixture hosts ---------------------------------------------------------------------
def test_mi210_8x_finds_eight_instinct_gpus_with_their_nodes() -> None:
    data = check_json(HOSTS / "mi210-8x")
    gpus = {g["address"]: g for g in data["facts"]["gpus"] if g["address"] != "0000:02:00.0"}
    assert len(gpus) == 8
    placed = findings_of(data, "gpu-placement")["placed"]
    assert placed["summary"] == ("compute GPU AMD Instinct MI210 (1002:740f) at 0000:03:00.0 on node 0 "
                                 "(from numa_node)")
    assert ("KFD node 2: 63.98 GiB of VRAM, PCIe to KFD CPU node 0 (weight 20), xGMI to 3 GPUs."
            in placed["detail"])
    assert findings_of(data, "pcie-link")["full"]["summary"].startswith(
        "0000:03:00.0 (AMD Instinct MI210) link at Gen4 (16.0 GT/s) x16")
    assert "hipHostRegister" in findings_of(data, "swap")["gpu-pinned"]["summary"]


def test_mi300x_8x_is_no_longer_no_gpu() -> None:
    data = check_json(HOSTS / "mi300x-8x")
    placement = findings_of(data, "gpu-placement")
    assert "no-gpu" not in placement
    assert placement["placed"]["summary"].startswith(
        "compute GPU AMD Instinct MI300X OAM (1002:74a1) at 0000:05:00.0")
    classes = {g["address"]: g for g in data["facts"]["gpus"]}
    assert len(classes) == 9  # eight MI300X and the BMC's VGA
    assert findings_of(data, "pcie-link")["full"]["summary"].startswith(
        "0000:05:00.0 (AMD Instinct MI300X OAM) link at Gen5 (32.0 GT/s) x16")


def test_radeon_desktop_computes_on_the_discrete_card() -> None:
    data = check_json(HOSTS / "radeon-apu-desktop")
    found = findings_of(data, "gpu-placement")["node-from-cpulist"]
    assert found["summary"].startswith(
        "compute GPU AMD Radeon RX 7900 XTX (1002:744c) at 0000:03:00.0 on node 0")
    assert found["detail"].startswith(
        "Chosen as the only GPU that is not an integrated GPU; 0000:13:00.0 is an APU's integrated GPU "
        "(KFD node 2: simd_count 4, no VRAM bank).")
    memlock = findings_of(data, "memlock")["not-charged"]
    assert "pinning for a GPU (hipHostRegister) is not charged" in memlock["summary"]
    assert "amdgpu's KFD pins" in memlock["detail"]


def test_an_nvidia_host_keeps_cuda_s_words() -> None:
    data = check_json(HOSTS / "seed-box")
    assert "(cudaHostRegister)" in findings_of(data, "swap")["gpu-pinned"]["summary"]


def _names(root: Path) -> Dict[str, str]:
    from strata_doctor.config import EngineConfig
    from strata_doctor.context import HostContext

    return HostContext(Root(str(root)), EngineConfig()).gpu_names


def test_the_tools_names_win_over_the_table(tmp_path: Path) -> None:
    assert _names(HOSTS / "vm-gpu-nonuma")["0000:06:00.0"] == "Tesla P100-PCIE-16GB"  # nvidia-smi's
    assert _names(HOSTS / "mi300x-8x")["0000:05:00.0"] == "AMD Instinct MI300X OAM"  # rocm-smi's
    tree = copy_host("mi300x-8x", tmp_path / "host")
    (tree / ".strata-doctor/commands/rocm-smi-showproductname.txt").unlink()
    names = _names(tree)
    assert names["0000:05:00.0"] == "AMD Instinct MI300X"  # the table's, without rocm-smi
    assert "0000:02:00.0" not in names  # the BMC's VGA: no model known
