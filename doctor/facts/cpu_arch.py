"""Which architecture /proc/cpuinfo describes, and what it names the CPU on arm and POWER,
where cpuinfo has no ``model name`` and no x86 ``flags``: the arm cores by implementer and
part, their ``Features``, and a POWER machine's platform (an IBM pSeries LPAR runs under a
hypervisor, a PowerNV host on the bare metal).

Facts here are kept apart from :mod:`~strata_doctor.facts.cpu` (the model, topology and x86
ISA of the first processor): they read the same cached bytes, so /proc/cpuinfo is opened
once.
"""

import re
from typing import Dict, FrozenSet, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import parse_cpuinfo
from strata_doctor.root import Root

CPUINFO = "/proc/cpuinfo"
LPARCFG = "/proc/ppc64/lparcfg"
"""The pseries kernel's partition configuration; present only in an LPAR."""
DT_HYPERVISOR = "/proc/device-tree/hypervisor/compatible"
"""``linux,kvm`` in a KVM guest: what systemd-detect-virt reads on POWER and arm."""
DT_HMC_MANAGED = "/proc/device-tree/hmc-managed?"
"""Present in a partition an HMC manages: systemd-detect-virt's sign of PowerVM."""


class ArmCore(NamedTuple):
    """One kind of arm core in /proc/cpuinfo, and how many processors report it."""

    implementer: int
    """``CPU implementer`` (0x41 Arm, 0x48 HiSilicon, 0xc0 Ampere...)."""
    part: int
    """``CPU part`` (0xd0c Neoverse N1...)."""
    processors: int
    """Processors whose block names this implementer and part."""


class CpuArch(NamedTuple):
    """What /proc/cpuinfo says of the CPU's architecture, beyond x86's model and flags."""

    unread: Optional[str]
    """Why /proc/cpuinfo could not be read (``missing``...); None when it was read."""
    arch: str
    """``x86``, ``arm64``, ``arm`` (a 32-bit kernel), ``ppc``, ``ia64``, ``s390`` or
    ``other``; empty when unread."""
    arm_cores: Tuple[ArmCore, ...] = ()
    """The arm cores, in the order their first processor is listed."""
    arm_architecture: Optional[str] = None
    """``CPU architecture`` (``8`` from every arm64 kernel, ``7`` or lower from a 32-bit one)."""
    features: FrozenSet[str] = frozenset()
    """arm ``Features``, from whichever block holds them (old 32-bit kernels print them
    once, after the processors)."""
    platform: Optional[str] = None
    """POWER's ``platform`` (``pSeries``, ``PowerNV``, ``PS3``...)."""
    machine: Optional[str] = None
    """POWER's ``model`` line (the summary's; its processors have none): the machine
    type-model (``IBM,9009-22A``), or qemu's ``IBM pSeries (emulated by qemu)``."""
    firmware: Optional[str] = None
    """POWER's ``firmware`` line (``OPAL`` on PowerNV)."""
    lparcfg: bool = False
    """Whether /proc/ppc64/lparcfg exists (looked for on pSeries only)."""
    dt_hypervisor: Optional[str] = None
    """/proc/device-tree/hypervisor/compatible (``linux,kvm``); pSeries only."""
    hmc_managed: bool = False
    """Whether /proc/device-tree/hmc-managed? exists (looked for on pSeries only)."""
    boot_hides: Tuple[str, ...] = ()
    """Words of /proc/cmdline that hide SVE from an arm64 kernel (``arm64.nosve``,
    ``id_aa64pfr0.sve=0``); read on arm64 only."""

    @property
    def platform_guest(self) -> Optional[str]:
        """The hypervisor of an IBM pSeries LPAR, which runs only as a guest: ``kvm`` when
        the device tree says ``linux,kvm``, ``qemu`` when the model says it emulates the
        machine, else ``PowerVM LPAR`` (a machine type-model such as ``IBM,9009-22A``); None
        on any other platform."""
        if self.platform != "pSeries":
            return None
        if self.dt_hypervisor and "kvm" in self.dt_hypervisor:
            return "kvm"
        if self.machine and "emulated by qemu" in self.machine:
            return "qemu"
        return "PowerVM LPAR"


_SVE_HIDING = re.compile(r"^(arm64\.nosve|id_aa64pfr0\.sve=0)$")
_BLANK_LINE = re.compile(rb"\n[ \t]*(?=\n)")
_ARM_IDS = re.compile(rb"^CPU (implementer|part)[ \t]*:[ \t]*(0x[0-9a-fA-F]+)[ \t]*$", re.M)
_LINE = r"^{}[ \t]*:[ \t]*(.*?)[ \t]*$"


def parse_cpu_arch(data: bytes) -> CpuArch:
    """The architecture facts of /proc/cpuinfo's bytes (a pure function, tested on bytes).

    Only the first block is parsed whole; the arm ids and POWER's summary lines are picked
    from the bytes, so a 3 MB cpuinfo of an x86 host costs a few searches."""
    data = data.replace(b"\0", b"")
    end = _BLANK_LINE.search(data, max(data.find(b":"), 0))
    blocks = parse_cpuinfo(data[: end.start() if end else len(data)].decode("utf-8", "replace"))
    first = blocks[0] if blocks else {}
    if b"\nCPU implementer" in b"\n" + data:
        return _arm(data)
    if "vendor_id" in first and "flags" in first:
        return CpuArch(None, "x86")
    if first.get("arch") == "IA-64":
        return CpuArch(None, "ia64")
    if "IBM/S390" in first.get("vendor_id", ""):
        return CpuArch(None, "s390")
    if "cpu" in first and b"\ntimebase" in data:
        return CpuArch(None, "ppc", platform=_value(data, "platform"), machine=_value(data, "model"),
                       firmware=_value(data, "firmware"))
    return CpuArch(None, "other")


def _arm(data: bytes) -> CpuArch:
    """Cores by implementer and part, the architecture and the Features of arm cpuinfo."""
    counts: Dict[Tuple[int, int], int] = {}
    implementer: Optional[int] = None
    for key, value in _ARM_IDS.findall(data):
        if key == b"implementer":
            implementer = int(value, 16)
        elif implementer is not None:
            pair = (implementer, int(value, 16))
            counts[pair] = counts.get(pair, 0) + 1
    architecture = _value(data, "CPU architecture")
    arch = "arm64" if architecture in ("8", "AArch64") else "arm"
    cores = tuple(ArmCore(imp, part, n) for (imp, part), n in counts.items())
    features = frozenset((_value(data, "Features") or "").split())
    return CpuArch(None, arch, cores, architecture, features)


def _value(data: bytes, key: str) -> Optional[str]:
    """The value of the first ``key : value`` line; None when absent or empty."""
    match = re.search(_LINE.format(re.escape(key)).encode(), data, re.M)
    if match is None:
        return None
    return match.group(1).decode("utf-8", "replace") or None


# The names arch/arm64/include/asm/cputype.h gives implementers and parts (and, for 32-bit
# cores, arch/arm/include/asm/cputype.h); a part the kernel does not name is shown by number.
_IMPLEMENTERS: Dict[int, str] = {
    0x41: "Arm", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon",
    0x4E: "NVIDIA", 0x50: "APM", 0x51: "Qualcomm", 0x61: "Apple", 0x6D: "Microsoft", 0xC0: "Ampere",
}
_PARTS: Dict[Tuple[int, int], str] = {
    (0x41, 0xC07): "Cortex-A7", (0x41, 0xC09): "Cortex-A9", (0x41, 0xC0F): "Cortex-A15",
    (0x41, 0xD03): "Cortex-A53", (0x41, 0xD04): "Cortex-A35", (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57", (0x41, 0xD08): "Cortex-A72", (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75", (0x41, 0xD0B): "Cortex-A76", (0x41, 0xD0C): "Neoverse N1",
    (0x41, 0xD0D): "Cortex-A77", (0x41, 0xD40): "Neoverse V1", (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD44): "Cortex-X1", (0x41, 0xD46): "Cortex-A510", (0x41, 0xD47): "Cortex-A710",
    (0x41, 0xD48): "Cortex-X2", (0x41, 0xD49): "Neoverse N2", (0x41, 0xD4F): "Neoverse V2",
    (0x41, 0xD80): "Cortex-A520", (0x41, 0xD81): "Cortex-A720", (0x41, 0xD82): "Cortex-X4",
    (0x41, 0xD84): "Neoverse V3", (0x41, 0xD85): "Cortex-X925", (0x41, 0xD87): "Cortex-A725",
    (0x41, 0xD8E): "Neoverse N3",
    (0x42, 0x516): "Vulcan", (0x43, 0x0A1): "ThunderX", (0x43, 0x0AF): "ThunderX2",
    (0x46, 0x001): "A64FX", (0x48, 0xD01): "TaiShan v110", (0x48, 0xD02): "HIP09",
    (0x4E, 0x003): "Denver", (0x4E, 0x004): "Carmel", (0x50, 0x000): "X-Gene",
    (0x51, 0xC00): "Falkor", (0x51, 0x001): "Oryon X1", (0x61, 0x022): "M1 Icestorm",
    (0x61, 0x023): "M1 Firestorm", (0x6D, 0xD49): "Azure Cobalt 100",
    (0xC0, 0xAC3): "Ampere-1", (0xC0, 0xAC4): "Ampere-1A",
}


_SVE_PARTS = frozenset({
    (0x41, 0xD40), (0x41, 0xD49), (0x41, 0xD4F), (0x41, 0xD84), (0x41, 0xD8E),  # Neoverse V1-V3, N2, N3
    (0x41, 0xD46), (0x41, 0xD47), (0x41, 0xD48), (0x41, 0xD4D), (0x41, 0xD4E),  # Armv9 Cortex cores
    (0x41, 0xD80), (0x41, 0xD81), (0x41, 0xD82), (0x41, 0xD85), (0x41, 0xD87),
    (0x46, 0x001), (0x6D, 0xD49),  # Fujitsu A64FX; Azure Cobalt 100 (a Neoverse N2)
})
"""Cores whose silicon has SVE (every Armv9 core has SVE2): a kernel or hypervisor that hides
it leaves no trace in Features, so the part has to tell."""


def arm_part_has_sve(core: ArmCore) -> bool:
    """Whether this kind of core has SVE in silicon."""
    return (core.implementer, core.part) in _SVE_PARTS


def arm_core_name(core: ArmCore) -> str:
    """``Arm Neoverse N1``; ``Arm part 0xd99`` or ``implementer 0x99 part 0x001`` for a core
    the kernel does not name."""
    maker = _IMPLEMENTERS.get(core.implementer)
    part = _PARTS.get((core.implementer, core.part))
    if maker is None:
        return f"implementer {core.implementer:#04x} part {core.part:#05x}"
    return f"{maker} {part}" if part else f"{maker} part {core.part:#05x}"


def read_cpu_arch(root: Root) -> CpuArch:
    """Read the architecture facts of /proc/cpuinfo through ``root``; on an IBM pSeries
    platform also whether the LPAR's files are there (only whether they exist: lparcfg and
    the device tree name the partition and its serial number, which a report must not
    carry)."""
    data = root.read_bytes(CPUINFO)
    if data is None:
        return CpuArch(root.reads.get(CPUINFO) or "unreadable", "")
    facts = parse_cpu_arch(data)
    if facts.arch == "arm64":
        words = (root.read("/proc/cmdline") or "").split()
        return facts._replace(boot_hides=tuple(w for w in words if _SVE_HIDING.match(w)))
    if facts.platform != "pSeries":
        return facts
    return facts._replace(lparcfg=root.exists(LPARCFG), dt_hypervisor=root.read_value(DT_HYPERVISOR),
                          hmc_managed=root.exists(DT_HMC_MANAGED))


__all__ = ["CPUINFO", "LPARCFG", "ArmCore", "CpuArch", "arm_core_name", "arm_part_has_sve", "parse_cpu_arch",
           "read_cpu_arch"]
