"""Which AVX-512 and AMX state a CPU has that the kernel will not give a process, and what an
arm64 CPU gives the expert kernels."""

from typing import FrozenSet, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.cpu import XCOMP_AMX, XCOMP_AVX512, CpuFacts, KernelIsa, model_isa
from strata_doctor.facts.cpu_arch import CpuArch, arm_core_name, arm_part_has_sve


class Withheld(NamedTuple):
    """One vector extension the CPU has and the kernel withholds, and why."""

    feature: str
    """``avx512f`` or ``amx_tile``, as ``/proc/cpuinfo`` names it."""
    why: str
    """What withholds it, with the host's own values."""


def isa_the_cpu_has(cpu: CpuFacts) -> FrozenSet[str]:
    """``avx512f`` and ``amx_tile`` as far as the CPU has them: its flags, or its model
    (a model known to have them whose flags lack them has them withheld)."""
    known = model_isa(cpu.vendor_family_model)
    has = set(known[1]) if known else set()
    has |= {f for f in ("avx512f", "amx_tile") if f in cpu.flags}
    return frozenset(has)


def withheld_isa(cpu: CpuFacts, kernel: KernelIsa, has: FrozenSet[str]) -> Tuple[Withheld, ...]:
    """Of what the CPU has (:func:`isa_the_cpu_has`), what the kernel withholds: AVX-512
    first, then AMX."""
    known = model_isa(cpu.vendor_family_model)
    name = f" ({known[0]})" if known else ""
    found: List[Optional[Withheld]] = []
    if "avx512f" in has:
        found.append(_avx512_withheld(cpu, kernel, name))
    if "amx_tile" in has:
        found.append(_amx_withheld(cpu, kernel, name))
    return tuple(w for w in found if w is not None)


def _avx512_withheld(cpu: CpuFacts, kernel: KernelIsa, name: str) -> Optional[Withheld]:
    """No AVX-512 state in XSAVE, else no avx512f flag on a model that has it."""
    supported = kernel.xcomp_supported
    if supported is not None and supported & XCOMP_AVX512 != XCOMP_AVX512:
        return Withheld("avx512f", f"the kernel enables no AVX-512 state (XSAVE components "
                                   f"{supported:#x} lack 5-7)")
    if "avx512f" in cpu.flags:
        return None
    hidden = (f" (the kernel boots with {' '.join(kernel.hidden_by_cmdline)})"
              if kernel.hidden_by_cmdline else " (a boot option or the hypervisor hides it)")
    return Withheld("avx512f", f"this CPU model{name} has it, but /proc/cpuinfo does not list avx512f"
                    + hidden)


def _amx_withheld(cpu: CpuFacts, kernel: KernelIsa, name: str) -> Optional[Withheld]:
    """What the kernel answered when asked for the tile state, else what the release and
    the flags say."""
    why = _amx_refused(kernel) if kernel.amx_request is not None else _amx_not_asked(cpu, kernel, name)
    return Withheld("amx_tile", why) if why else None


def _amx_refused(kernel: KernelIsa) -> Optional[str]:
    """A refused ARCH_REQ_XCOMP_PERM, or one granted without the tile state in XSAVE."""
    if kernel.amx_request != "ok":
        return (f"arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed with {kernel.amx_request} "
                f"on Linux {kernel.release or 'unknown'}")
    if kernel.xcomp_supported is not None and kernel.xcomp_supported & XCOMP_AMX != XCOMP_AMX:
        return "the kernel grants no AMX tile state"
    return None


def _amx_not_asked(cpu: CpuFacts, kernel: KernelIsa, name: str) -> Optional[str]:
    """Without the kernel's answer: a release before 5.16, or no amx_tile flag on a model
    that has it."""
    if kernel.before(5, 16) and not kernel.amx_backported:
        return (f"Linux {kernel.release or 'unknown'} is older than 5.16, the first with AMX "
                "(arch_prctl ARCH_REQ_XCOMP_PERM)")
    if "amx_tile" not in cpu.flags:
        return (f"this CPU model{name} has it, but /proc/cpuinfo does not list amx_tile (a boot "
                "option or the hypervisor hides it)")
    return None


def usable_isa(expert_isa: Tuple[str, ...], withheld: Tuple[Withheld, ...]) -> Tuple[str, ...]:
    """The expert ISA the kernels can use: the CPU's, less the families the kernel withholds."""
    hidden = tuple("amx" if w.feature == "amx_tile" else "avx512" for w in withheld)
    return tuple(i for i in expert_isa if not i.startswith(hidden or ("-",)))


# -- arm64 ---------------------------------------------------------------------------------
ARM_EXPERT_ISA: Tuple[Tuple[str, str], ...] = (
    ("asimd", "NEON"), ("asimddp", "dotprod"), ("sve", "SVE"), ("sve2", "SVE2"),
    ("i8mm", "I8MM"), ("bf16", "BF16"),
)
"""arm64 ``Features`` the expert kernels use, in preference order, and their names."""
_ARM_WIDER = ("asimddp", "sve", "i8mm", "bf16")
"""The faster paths an arm64 CPU may lack (SVE2 goes with SVE)."""


def arm_isa(features: FrozenSet[str]) -> Tuple[str, ...]:
    """The names of the arm64 expert ISA that ``Features`` lists, in preference order."""
    return tuple(name for feature, name in ARM_EXPERT_ISA if feature in features)


def arm_missing(features: FrozenSet[str]) -> Tuple[str, ...]:
    """The names of the faster arm64 paths ``Features`` does not list."""
    names = dict(ARM_EXPERT_ISA)
    return tuple(names[f] for f in _ARM_WIDER if f not in features)


def arm_cpu_name(arch: CpuArch) -> str:
    """The arm CPU as the kernel names its cores: ``Arm Neoverse N1``; each kind with its
    count where there are several (``10 Arm Cortex-A725 and 10 Arm Cortex-X925``)."""
    names = [arm_core_name(core) for core in arch.arm_cores]
    if len(names) == 1:
        return names[0]
    if not names:
        return "an arm CPU"
    counted = [f"{core.processors} {name}" for core, name in zip(arch.arm_cores, names)]
    return ", ".join(counted[:-1]) + " and " + counted[-1]


def arm_withheld(arch: CpuArch, kernel: KernelIsa) -> Optional[Withheld]:
    """SVE when every core's part has it and Features does not list it, and why: a boot
    option, a release before 4.15 (the first with SVE), else a kernel or hypervisor."""
    if "sve" in arch.features or not arch.arm_cores or not all(map(arm_part_has_sve, arch.arm_cores)):
        return None
    if arch.boot_hides:
        hidden = f" (the kernel boots with {' '.join(arch.boot_hides)})"
    elif kernel.before(4, 15):
        hidden = f" (Linux {kernel.release} is older than 4.15, the first with SVE)"
    else:
        hidden = " (a kernel built without CONFIG_ARM64_SVE, or a hypervisor that hides it)"
    return Withheld("sve", "this CPU model has it, but /proc/cpuinfo's Features do not list sve" + hidden)
