"""cpu-isa on arm and on trees without /proc/cpuinfo: the CPU is named from its implementer
and part, its arm64 ISA comes from Features, AVX2 is never asked of it, and a missing file
is unknown rather than a fact about the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata_doctor.facts.cpu_arch import ArmCore, arm_core_name, parse_cpu_arch, read_cpu_arch
from strata_doctor.root import Root
from strata_doctor.rules.isa import arm_cpu_name, arm_isa, arm_missing
from tests.conftest import HOSTS, check_json, findings_of, write_tree

N1_FEATURES = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc "
               "dcpop asimddp ssbs")
MEMINFO = "MemTotal:       16384000 kB\nMemFree:        15360000 kB\n"
"""A tree needs one of node/, cpu/ or meminfo to be taken for a host."""


def arm64_block(n: int, part: str, features: str = N1_FEATURES) -> str:
    return (f"processor\t: {n}\nBogoMIPS\t: 50.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
            f"CPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: {part}\nCPU revision\t: 1\n\n")


# -- the fact, on bytes -----------------------------------------------------------------------
def test_arm64_cpuinfo_gives_cores_by_part_and_features() -> None:
    text = "".join(arm64_block(n, "0xd0c") for n in range(4))
    arch = parse_cpu_arch(text.encode())
    assert arch.arch == "arm64" and arch.arm_architecture == "8"
    assert arch.arm_cores == (ArmCore(0x41, 0xD0C, 4),)
    assert {"asimd", "asimddp"} <= arch.features and "sve" not in arch.features


def test_cores_of_two_kinds_are_counted_in_the_order_listed() -> None:
    text = "".join(arm64_block(n, "0xd87") for n in range(2))
    text += "".join(arm64_block(n, "0xd85") for n in (2, 3, 4))
    arch = parse_cpu_arch(text.encode())
    assert arch.arm_cores == (ArmCore(0x41, 0xD87, 2), ArmCore(0x41, 0xD85, 3))
    assert arm_cpu_name(arch) == "2 Arm Cortex-A725 and 3 Arm Cortex-X925"


def test_old_32_bit_layout_keeps_features_after_the_processors() -> None:
    # The corpus's 2arm-2c: a 3.x ARMv7 kernel prints the ids and Features once, at the end.
    text = ("Processor\t: ARMv7 Processor rev 1 (v7l)\nprocessor\t: 0\nBogoMIPS\t: 1595.80\n\n"
            "processor\t: 1\nBogoMIPS\t: 1595.80\n\n"
            "Features\t: swp half thumb fastmult vfp edsp neon vfpv3 \n"
            "CPU implementer\t: 0x41\nCPU architecture: 7\nCPU variant\t: 0x2\nCPU part\t: 0xc09\n"
            "CPU revision\t: 1\n\nHardware\t: ST-Ericsson MOP500 platform\n")
    arch = parse_cpu_arch(text.encode())
    assert arch.arch == "arm" and arch.arm_architecture == "7"
    assert "neon" in arch.features
    assert arm_cpu_name(arch) == "Arm Cortex-A9"


@pytest.mark.parametrize("implementer, part, name", [
    (0x41, 0xD0C, "Arm Neoverse N1"), (0x41, 0xD49, "Arm Neoverse N2"), (0x41, 0xD40, "Arm Neoverse V1"),
    (0x41, 0xD4F, "Arm Neoverse V2"), (0x41, 0xD08, "Arm Cortex-A72"), (0x41, 0xD0B, "Arm Cortex-A76"),
    (0x48, 0xD01, "HiSilicon TaiShan v110"), (0xC0, 0xAC3, "Ampere Ampere-1"),
    (0x41, 0xD99, "Arm part 0xd99"), (0x99, 0x001, "implementer 0x99 part 0x001"),
])
def test_cores_are_named_as_the_kernel_names_them(implementer: int, part: int, name: str) -> None:
    assert arm_core_name(ArmCore(implementer, part, 1)) == name


def test_arm64_isa_in_preference_order_and_the_faster_paths_missing() -> None:
    n1 = frozenset(N1_FEATURES.split())
    assert arm_isa(n1) == ("NEON", "dotprod")
    assert arm_missing(n1) == ("SVE", "I8MM", "BF16")
    v2 = n1 | {"sve", "sve2", "i8mm", "bf16", "svei8mm"}
    assert arm_isa(v2) == ("NEON", "dotprod", "SVE", "SVE2", "I8MM", "BF16")
    assert arm_missing(v2) == ()


def test_x86_cpuinfo_is_not_arm() -> None:
    text = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: fpu avx2\n\n"
    assert parse_cpu_arch(text.encode()).arch == "x86"


def test_missing_cpuinfo_is_unread_with_its_reason(tmp_path: Path) -> None:
    arch = read_cpu_arch(Root(str(tmp_path)))
    assert arch.unread == "missing" and arch.arch == ""


# -- the check, on trees ----------------------------------------------------------------------
def test_neoverse_n1_host_is_named_and_gets_neon_and_dotprod() -> None:
    isa = findings_of(check_json(HOSTS / "arm64-neoverse-n1"), "cpu-isa")
    assert list(isa) == ["isa"]
    summary = isa["isa"]["summary"]
    assert summary == "Arm Neoverse N1: expert kernels can use NEON, dotprod (no SVE, no I8MM, no BF16)"
    assert "AVX" not in summary and "unknown" not in summary
    assert "CPU part 0xd0c" in isa["isa"]["evidence"][0]["value"]


def test_arm64_with_sve2_lists_it(tmp_path: Path) -> None:
    features = N1_FEATURES + " sve sve2 i8mm bf16"
    write_tree(tmp_path, {"/proc/cpuinfo": "".join(arm64_block(n, "0xd4f", features) for n in range(4)),
                          "/proc/meminfo": MEMINFO})
    isa = findings_of(check_json(tmp_path), "cpu-isa")
    assert isa["isa"]["summary"] == ("Arm Neoverse V2: expert kernels can use NEON, dotprod, SVE, SVE2, "
                                     "I8MM, BF16")


def test_arm64_without_neon_warns_without_naming_avx(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/cpuinfo": arm64_block(0, "0xd03", "fp evtstrm cpuid"),
                          "/proc/meminfo": MEMINFO})
    isa = findings_of(check_json(tmp_path), "cpu-isa")
    assert isa["no-neon"]["severity"] == "warning"
    assert isa["no-neon"]["summary"].startswith("Arm Cortex-A53 has no NEON (asimd)")


def test_32_bit_arm_kernel_cannot_run_the_arm64_kernels(tmp_path: Path) -> None:
    block = ("processor\t: 0\nmodel name\t: ARMv7 Processor rev 4 (v7l)\nBogoMIPS\t: 38.40\n"
             "Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae\n"
             "CPU implementer\t: 0x41\nCPU architecture: 7\nCPU variant\t: 0x0\nCPU part\t: 0xc07\n"
             "CPU revision\t: 5\n\n")
    write_tree(tmp_path, {"/proc/cpuinfo": block, "/proc/meminfo": MEMINFO})
    isa = findings_of(check_json(tmp_path), "cpu-isa")
    assert isa["not-arm64"]["severity"] == "warning"
    assert "32-bit ARM kernel (CPU architecture: 7)" in isa["not-arm64"]["summary"]


def test_tree_without_cpuinfo_says_unknown_not_no_flags(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/meminfo": MEMINFO})
    isa = findings_of(check_json(tmp_path), "cpu-isa")
    assert list(isa) == ["no-cpuinfo"]
    finding = isa["no-cpuinfo"]
    assert finding["severity"] == "info"
    assert finding["summary"] == ("/proc/cpuinfo cannot be read (missing): which instruction sets the "
                                  "CPU has is unknown")
    assert "flags" not in finding["summary"]


def test_power_cpu_is_not_said_to_lack_avx2() -> None:
    isa = findings_of(check_json(HOSTS / "pseries-lpar"), "cpu-isa")
    assert list(isa) == ["unknown"]
    assert isa["unknown"]["summary"].startswith("POWER9 (architected), altivec supported: /proc/cpuinfo "
                                                "lists no x86 flags and no arm64 Features")


# -- SVE the kernel withholds -----------------------------------------------------------------
def test_neoverse_v1_without_sve_in_features_is_withheld_by_the_boot_option(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/cpuinfo": "".join(arm64_block(n, "0xd40") for n in range(4)),
                          "/proc/meminfo": MEMINFO, "/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro arm64.nosve\n"})
    isa = findings_of(check_json(tmp_path), "cpu-isa")
    assert isa["kernel-withholds"]["severity"] == "warning"
    assert isa["kernel-withholds"]["summary"] == (
        "Arm Neoverse V1 has SVE but the kernel will not give it: this CPU model has it, but "
        "/proc/cpuinfo's Features do not list sve (the kernel boots with arm64.nosve)")
    assert "SVE" not in isa["isa"]["summary"].split("(")[0]


def test_old_kernel_on_an_sve_core_names_its_release(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/cpuinfo": arm64_block(0, "0xd49"), "/proc/meminfo": MEMINFO,
                          "/proc/sys/kernel/osrelease": "4.14.0-115.el7a.aarch64\n"})
    why = findings_of(check_json(tmp_path), "cpu-isa")["kernel-withholds"]["summary"]
    assert why.endswith("(Linux 4.14.0-115.el7a.aarch64 is older than 4.15, the first with SVE)")


def test_a_core_without_sve_in_silicon_is_not_withheld() -> None:
    isa = findings_of(check_json(HOSTS / "arm64-neoverse-n1"), "cpu-isa")
    assert "kernel-withholds" not in isa
