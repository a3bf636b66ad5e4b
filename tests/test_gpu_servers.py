"""Issue conditions 10-12: GPUs on real servers, the ISA the kernel gives, and CPU and PCI
facts on older or odd captures. Small host trees, each built to a real machine's numbers."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Dict, Tuple

import pytest

from strata_doctor.facts.numa import read_numa
from strata_doctor.facts.nvidia_smi import read_smi_query
from strata_doctor.root import XCOMP_COMMAND, Root, _xcomp_live
from tests.conftest import UNBOUND_UNIT, check_json, findings_of, two_node_files, write_tree

DEV = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"
ASPEED = "/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.0/0000:03:00.0"
CMDS = "/.strata-doctor/commands"


def aspeed_files() -> Dict[str, str]:
    """The BMC's ASPEED AST2600 VGA behind its own bridge, as on a Supermicro X13 board."""
    return {
        f"{ASPEED}/class": "0x030000\n", f"{ASPEED}/vendor": "0x1a03\n", f"{ASPEED}/device": "0x2000\n",
        f"{ASPEED}/numa_node": "0\n", f"{ASPEED}/local_cpulist": "0-3\n", f"{ASPEED}/boot_vga": "1\n",
        "/sys/bus/pci/devices/0000:03:00.0": "->../../.." + ASPEED[len("/sys"):],
    }


def bmc_only(tmp_path: Path) -> Path:
    files = {k: v for k, v in two_node_files(unit_show=UNBOUND_UNIT).items() if "81:00.0" not in k}
    return write_tree(tmp_path / "host", {**files, **aspeed_files()})


# -- 11: GPUs on real servers ----------------------------------------------------------------
def test_a_bmc_vga_is_never_the_compute_gpu(tmp_path: Path) -> None:
    data = check_json(bmc_only(tmp_path))
    (gpu,) = data["facts"]["gpus"]
    assert not gpu["compute"]
    placement = findings_of(data, "gpu-placement")
    assert placement["no-compute-gpu"]["severity"] == "warning"
    assert "0000:03:00.0 (ASPEED 1a03:2000) is a BMC's ASPEED VGA" in placement["no-compute-gpu"]["summary"]
    assert not [f for f in data["findings"] if f["severity"] == "error"]
    skipped = {s["check"]: s["reason"] for s in data.get("skipped", [])} if "skipped" in data else {}
    for check_id in ("numa-binding", "pcie-link"):
        assert not findings_of(data, check_id), check_id
        if skipped:
            assert "no compute GPU" in skipped[check_id]


def test_gpu_option_still_takes_the_bmc_vga(tmp_path: Path) -> None:
    data = check_json(bmc_only(tmp_path), "--gpu", "03:00.0")
    (gpu,) = data["facts"]["gpus"]
    assert gpu["compute"] and gpu["choice_reason"] == "the GPU named by --gpu (0000:03:00.0)"


def test_the_real_gpu_wins_over_the_bmc_and_the_reason_says_why(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "host", {**two_node_files(), **aspeed_files()})
    data = check_json(root)
    compute = next(g for g in data["facts"]["gpus"] if g["compute"])
    assert compute["address"] == "0000:81:00.0"
    assert compute["choice_reason"] == ("the only GPU that is not a management or emulated display; "
                                        "0000:03:00.0 is a BMC's ASPEED VGA")


def test_without_resource_files_the_reason_claims_no_bar(tmp_path: Path) -> None:
    files = two_node_files()
    second = DEV.replace("81:00.0", "82:00.0")
    files.update({k.replace(DEV, second): v for k, v in files.items() if k.startswith(DEV)})
    files["/sys/bus/pci/devices/0000:82:00.0"] = "->../../../devices/pci0000:80/0000:80:01.0/0000:82:00.0"
    data = check_json(write_tree(tmp_path / "host", files))
    compute = next(g for g in data["facts"]["gpus"] if g["compute"])
    assert compute["address"] == "0000:81:00.0"
    assert "BAR (0 MiB)" not in compute["choice_reason"]
    assert compute["choice_reason"].startswith("the first by PCI address of 2 NVIDIA GPUs") or \
        compute["choice_reason"].startswith("the first by PCI address of 2 GPUs (no resource file")


def link_files(gpu: Tuple[str, int, str, int], bridge: Tuple[str, int, str, int]) -> Dict[str, str]:
    files = two_node_files()
    port = "/sys/devices/pci0000:80/0000:80:01.0"
    for base, (speed, width, max_speed, max_width) in ((DEV, gpu), (port, bridge)):
        files.update({f"{base}/current_link_speed": f"{speed} GT/s PCIe\n",
                      f"{base}/current_link_width": f"{width}\n",
                      f"{base}/max_link_speed": f"{max_speed} GT/s PCIe\n",
                      f"{base}/max_link_width": f"{max_width}\n"})
    return files


def test_pcie_link_is_the_minimum_over_the_path_to_the_root_port(tmp_path: Path) -> None:
    """An H100 PCIe (Gen5 x16) under a root port that trained at x8."""
    files = link_files(("32.0", 16, "32.0", 16), ("32.0", 8, "32.0", 16))
    data = check_json(write_tree(tmp_path / "host", files))
    narrow = findings_of(data, "pcie-link")["narrow-path"]
    assert narrow["severity"] == "warning"
    assert "0000:80:01.0 on its path to the root port runs at x8: the GPU gets x8" in narrow["summary"]


def test_an_idle_gpu_trains_down_and_nvidia_smi_is_preferred(tmp_path: Path) -> None:
    files = link_files(("2.5", 16, "8.0", 16), ("8.0", 16, "8.0", 16))
    files[f"{CMDS}/nvidia-smi-query.txt"] = (
        "00000000:81:00.0, NVIDIA GeForce GTX 1080 Ti, 11264 MiB, 470.256.02, GPU-x, [N/A], 1, 3, 16, 16\n")
    root = write_tree(tmp_path / "host", files)
    idle = findings_of(check_json(root), "pcie-link")["idle-speed"]
    assert idle["severity"] == "info"
    assert ("link at Gen1 (2.5 GT/s) x16 (max Gen3 (8.0 GT/s) x16, nvidia-smi); an idle GPU trains its "
            "link down") in idle["summary"]
    state = read_smi_query(Root(root))["0000:81:00.0"]
    assert (state.gen_current, state.gen_max, state.width_current, state.width_max) == (1, 3, 16, 16)


def test_persistence_mode_off_is_info(tmp_path: Path) -> None:
    files = two_node_files()
    files[f"{CMDS}/nvidia-smi-q.txt"] = (
        "\n==============NVSMI LOG==============\n\nDriver Version                            : 535.183.01\n"
        "Attached GPUs                             : 1\nGPU 00000000:81:00.0\n"
        "    Product Name                          : NVIDIA GeForce GTX 1080 Ti\n"
        "    Persistence Mode                      : Disabled\n")
    found = findings_of(check_json(write_tree(tmp_path / "host", files)), "gpu-placement")
    assert found["persistence-off"]["severity"] == "info"
    assert "nvidia-smi -pm 1" in found["persistence-off"]["detail"]


# -- 12: CPU and PCI facts on older or odd captures --------------------------------------------
def test_offline_cpus_from_per_cpu_online_when_cpu_online_is_absent(tmp_path: Path) -> None:
    """16 CPUs, 4 of them (12-15) offline, on a kernel tree without cpu/online."""
    node = "/sys/devices/system/node"
    files = {f"{node}/node0/cpulist": "0-7\n", f"{node}/node1/cpulist": "8-15\n",
             f"{node}/node0/distance": "10 20\n", f"{node}/node1/distance": "20 10\n"}
    for cpu in range(16):
        if cpu:  # cpu0 has no online file: it cannot go offline
            files[f"/sys/devices/system/cpu/cpu{cpu}/online"] = "0\n" if cpu >= 12 else "1\n"
        else:
            files["/sys/devices/system/cpu/cpu0/topology/core_id"] = "0\n"
    numa = read_numa(Root(write_tree(tmp_path / "host", files)))
    assert numa.online_cpus == frozenset(range(12)) and numa.offline_cpus == frozenset(range(12, 16))
    assert numa.node(1) is not None and numa.node(1).cpus == frozenset(range(8, 12))  # type: ignore[union-attr]


def test_local_cpus_contradicting_local_cpulist_is_flagged(tmp_path: Path) -> None:
    files = two_node_files()
    files[f"{DEV}/local_cpus"] = "0f\n"  # CPUs 0-3, node 0's; local_cpulist says 4-7
    found = findings_of(check_json(write_tree(tmp_path / "host", files)), "gpu-placement")
    contradiction = found["local-cpus-contradiction"]
    assert contradiction["severity"] == "warning"
    assert contradiction["summary"] == "0000:81:00.0: local_cpulist is 4-7 but local_cpus 0f is 0-3"


def test_class_from_modalias_when_the_class_file_is_missing(tmp_path: Path) -> None:
    files = two_node_files()
    del files[f"{DEV}/class"]
    files[f"{DEV}/modalias"] = "pci:v000010DEd00001B06sv00001458sd00003752bc03sc00i00\n"
    data = check_json(write_tree(tmp_path / "host", files))
    (gpu,) = data["facts"]["gpus"]
    assert gpu["class"] == "030000" and gpu["compute"]


# -- 10: AMX and AVX-512 the CPU has but the kernel will not give -------------------------------
SPR_FLAGS = "fpu sse2 avx avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8"


def spr_files(release: str, xcomp: str = "") -> Dict[str, str]:
    """A Xeon Platinum 8480+ (family 6, model 143) under a given kernel."""
    files = two_node_files()
    files["/proc/cpuinfo"] = "".join(
        f"processor\t: {c}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
        f"model name\t: Intel(R) Xeon(R) Platinum 8480+\nphysical id\t: {c // 4}\ncore id\t\t: {c % 4}\n"
        f"flags\t\t: {SPR_FLAGS}\n\n" for c in range(8))
    files["/proc/sys/kernel/osrelease"] = release + "\n"
    if xcomp:
        files[f"{CMDS}/{XCOMP_COMMAND.key}.txt"] = xcomp
    return files


def test_amx_on_a_515_kernel_is_withheld(tmp_path: Path) -> None:
    found = findings_of(check_json(write_tree(tmp_path / "host", spr_files("5.15.0-119-generic"))), "cpu-isa")
    withheld = found["kernel-withholds"]
    assert withheld["severity"] == "warning"
    assert "has AMX but the kernel will not give it: Linux 5.15.0-119-generic is older than 5.16" in \
        withheld["summary"]
    assert "AMX" not in found["isa"]["summary"].split("(")[0]


def test_amx_refused_by_arch_prctl_is_withheld(tmp_path: Path) -> None:
    files = spr_files("6.8.0-45-generic",
                      "ARCH_GET_XCOMP_SUPP: 0x602e7\nARCH_REQ_XCOMP_PERM XTILEDATA: EPERM\n")
    found = findings_of(check_json(write_tree(tmp_path / "host", files)), "cpu-isa")
    summary = found["kernel-withholds"]["summary"]
    assert "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed with EPERM" in summary


def test_amx_granted_is_used(tmp_path: Path) -> None:
    files = spr_files("6.8.0-45-generic", "ARCH_GET_XCOMP_SUPP: 0x602e7\nARCH_REQ_XCOMP_PERM XTILEDATA: ok\n")
    found = findings_of(check_json(write_tree(tmp_path / "host", files)), "cpu-isa")
    assert "kernel-withholds" not in found
    assert "AMX_TILE" in found["isa"]["summary"]


def test_avx512_hidden_by_a_boot_option(tmp_path: Path) -> None:
    files = spr_files("6.8.0-45-generic")
    files["/proc/cpuinfo"] = files["/proc/cpuinfo"].replace(SPR_FLAGS, "fpu sse2 avx avx2")
    files["/proc/cmdline"] = "BOOT_IMAGE=/vmlinuz ro clearcpuid=avx512f,amx_tile\n"
    found = findings_of(check_json(write_tree(tmp_path / "host", files)), "cpu-isa")
    summaries = [f["summary"] for f in check_json(write_tree(tmp_path / "h2", files))["findings"]
                 if f["id"] == "kernel-withholds"]
    assert any("AVX-512" in s and "clearcpuid=avx512f,amx_tile" in s for s in summaries), summaries
    assert found["kernel-withholds"]["severity"] == "warning"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="arch_prctl exists on x86-64 only")
def test_the_live_call_answers_in_the_replayed_format() -> None:
    """Root's own call, in this process (it asks for AMX and changes nothing else)."""
    result = _xcomp_live(XCOMP_COMMAND)
    lines = result.stdout.splitlines()
    assert result.status == 0 and len(lines) == 2
    assert lines[0].startswith("ARCH_GET_XCOMP_SUPP: ")
    assert lines[1].startswith("ARCH_REQ_XCOMP_PERM XTILEDATA: ")
