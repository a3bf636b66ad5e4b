"""virtual-numa says "no hypervisor" only where the tree shows bare metal: an IBM pSeries LPAR
runs under PowerVM, a PowerNV host is bare metal, and a tree without /proc/cpuinfo, or a
non-x86 CPU without systemd-detect-virt's answer, is unknown."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from strata_doctor.facts.cpu_arch import CpuArch, parse_cpu_arch, read_cpu_arch
from strata_doctor.facts.cpu_policy import Virtualization
from strata_doctor.root import Root
from strata_doctor.rules.hypervisor import host_kind
from tests.conftest import HOSTS, check_json, findings_of, write_tree

PSERIES_TAIL = ("timebase\t: 512000000\nplatform\t: pSeries\nmodel\t\t: IBM,9009-22A\n"
                "machine\t\t: CHRP IBM,9009-22A\nMMU\t\t: Radix\n")
POWER_BLOCK = ("processor\t: 0\ncpu\t\t: POWER9 (architected), altivec supported\n"
               "clock\t\t: 3800.000000MHz\nrevision\t: 2.2 (pvr 004e 0202)\n\n")


def two_nodes(extra: Dict[str, str]) -> Dict[str, str]:
    """Two CPU nodes (0-1 and 2-3) with distances 10/20, and ``extra``."""
    files = {"/sys/devices/system/node/online": "0-1\n", "/sys/devices/system/cpu/online": "0-3\n"}
    for nid in (0, 1):
        files[f"/sys/devices/system/node/node{nid}/cpulist"] = f"{2 * nid}-{2 * nid + 1}\n"
        files[f"/sys/devices/system/node/node{nid}/distance"] = "10 20\n" if nid == 0 else "20 10\n"
        files[f"/sys/devices/system/node/node{nid}/meminfo"] = (
            f"Node {nid} MemTotal:       33554432 kB\nNode {nid} MemFree:        30000000 kB\n")
    files.update(extra)
    return files


# -- the fact and the rule --------------------------------------------------------------------
def test_pseries_cpuinfo_names_the_platform_and_machine() -> None:
    arch = parse_cpu_arch((POWER_BLOCK + PSERIES_TAIL).encode())
    assert (arch.arch, arch.platform, arch.machine) == ("ppc", "pSeries", "IBM,9009-22A")
    assert arch.platform_guest == "PowerVM LPAR"


def test_pseries_under_kvm_is_a_kvm_guest() -> None:
    emulated = PSERIES_TAIL.replace("IBM,9009-22A", "IBM pSeries (emulated by qemu)")
    qemu = parse_cpu_arch((POWER_BLOCK + emulated).encode())
    assert qemu.platform_guest == "qemu"
    assert parse_cpu_arch((POWER_BLOCK + PSERIES_TAIL).encode())._replace(
        dt_hypervisor="linux,kvm").platform_guest == "kvm"


@pytest.mark.parametrize("virt, arch, kind", [
    (Virtualization(False, None, "PowerVM LPAR"), CpuArch(None, "ppc", platform="pSeries"), "lpar"),
    (Virtualization(False, "powervm"), CpuArch(None, "ppc"), "lpar"),
    (Virtualization(True, None), CpuArch(None, "x86"), "guest"),
    (Virtualization(False, "kvm"), CpuArch(None, "arm64"), "guest"),
    (Virtualization(False, None), CpuArch(None, "x86"), "bare-metal"),
    (Virtualization(False, "none"), CpuArch(None, "arm64"), "bare-metal"),
    (Virtualization(False, None), CpuArch(None, "ppc", platform="PowerNV"), "bare-metal"),
    (Virtualization(False, None), CpuArch("missing", ""), "unknown"),
    (Virtualization(False, None), CpuArch(None, "arm64"), "unknown"),
    (Virtualization(False, None), CpuArch(None, "ia64"), "unknown"),
])
def test_host_kind(virt: Virtualization, arch: CpuArch, kind: str) -> None:
    assert host_kind(virt, arch).kind == kind


def test_unknown_says_what_is_missing() -> None:
    why = host_kind(Virtualization(False, None), CpuArch("missing", "")).why
    assert why == "/proc/cpuinfo cannot be read (missing) and systemd-detect-virt --vm gave no answer"


def test_lpar_files_are_only_looked_for(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/cpuinfo": POWER_BLOCK + PSERIES_TAIL, "/proc/ppc64/lparcfg": "lparcfg 1.9\n",
                          "/proc/device-tree/hmc-managed?": ""})
    root = Root(str(tmp_path))
    arch = read_cpu_arch(root)
    assert arch.lparcfg and arch.hmc_managed and arch.dt_hypervisor is None
    assert "/proc/ppc64/lparcfg" not in root.reads  # it names the machine's serial number


# -- the check, on trees ----------------------------------------------------------------------
def test_pseries_lpar_runs_under_powervm() -> None:
    data = check_json(HOSTS / "pseries-lpar")
    numa = findings_of(data, "virtual-numa")
    assert list(numa) == ["lpar"]
    finding = numa["lpar"]
    assert finding["severity"] == "info"
    assert finding["summary"].startswith("an IBM pSeries LPAR under PowerVM (IBM,9009-22A) with 2 NUMA "
                                         "nodes: they are the hypervisor's home nodes")
    assert "no hypervisor" not in finding["summary"]
    sources = {e["source"]: e["value"] for e in finding["evidence"]}
    assert sources["/proc/cpuinfo"] == "platform: pSeries; model: IBM,9009-22A"
    assert "/proc/device-tree/hmc-managed?" in sources


def test_tree_without_cpuinfo_is_unknown_not_bare_metal(tmp_path: Path) -> None:
    numa = findings_of(check_json(write_tree(tmp_path, two_nodes({}))), "virtual-numa")
    assert list(numa) == ["unknown"]
    assert numa["unknown"]["severity"] == "info"
    assert numa["unknown"]["summary"] == (
        "nothing shows whether a hypervisor presents the 2 NUMA nodes: /proc/cpuinfo cannot be read "
        "(missing) and systemd-detect-virt --vm gave no answer")


def test_systemd_detect_virt_settles_an_arm_tree(tmp_path: Path) -> None:
    cpuinfo = ("processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
               "CPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n")
    arm = two_nodes({"/proc/cpuinfo": cpuinfo})
    assert list(findings_of(check_json(write_tree(tmp_path / "a", arm)), "virtual-numa")) == ["unknown"]
    arm["/.strata-doctor/commands/systemd-detect-virt-vm.txt"] = "none\n"
    assert list(findings_of(check_json(write_tree(tmp_path / "b", arm)), "virtual-numa")) == ["bare-metal"]


def test_powernv_is_bare_metal(tmp_path: Path) -> None:
    tail = "timebase\t: 512000000\nplatform\t: PowerNV\nmodel\t\t: 8335-GTW\nfirmware\t: OPAL\n"
    numa = findings_of(check_json(write_tree(tmp_path, two_nodes({"/proc/cpuinfo": POWER_BLOCK + tail}))),
                       "virtual-numa")
    assert list(numa) == ["bare-metal"]
    assert numa["bare-metal"]["evidence"][0]["value"] == "platform: PowerNV; model: 8335-GTW; firmware: OPAL"
