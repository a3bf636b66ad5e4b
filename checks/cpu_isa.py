"""cpu-isa: which instruction sets the CPU expert kernels can use, and which the kernel withholds."""

from __future__ import annotations

from typing import Iterator, List, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu import KernelIsa
from strata_doctor.facts.cpu_arch import CpuArch
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.isa import (
    ARM_EXPERT_ISA,
    Withheld,
    arm_cpu_name,
    arm_isa,
    arm_missing,
    arm_withheld,
    isa_the_cpu_has,
    usable_isa,
    withheld_isa,
)

XCOMP = "arch_prctl-xcomp"
_ARM_FEATURES = frozenset(feature for feature, _ in ARM_EXPERT_ISA)


class CpuIsa(Check):
    """Reports the CPU's ISA extensions that the expert kernels use, and those the CPU has
    but the kernel will not give.

    Reads ``flags`` from ``/proc/cpuinfo`` on x86, and ``CPU implementer``, ``CPU part``,
    ``CPU architecture`` and ``Features`` on arm. The CPU pool computes most routed experts
    (58-84% on the seed box), so its instruction set bounds decode speed: the seed's
    Broadwell-EP Xeons have AVX2 and no AVX-512, and decode stayed the same after binding
    because it is bound by AVX2 compute. AVX-512 (avx512f), BF16 (avx512_bf16) and AMX
    (amx_tile) give faster kernels. A CPU without AVX2 is a warning: the engine falls back
    to slow scalar kernels.

    AMX needs more than the flag: Linux 5.16 or later, and a process must ask for the tile
    state with ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`` before its first tile
    instruction. On a live x86-64 host strata-doctor makes that call itself (through Root, so
    a bundle records the answer as ``arch_prctl-xcomp`` and a replay reads it); on a captured
    host without that record the kernel release decides. A CPU model known to have AVX-512 or
    AMX (Skylake-SP to Granite Rapids, Zen 4 and 5) whose flags lack them, because of a boot
    option (``clearcpuid=``, ``noxsave``), an old kernel or a hypervisor that masks them, is a
    warning too: the engine then runs the slower kernels.

    On arm64 the expert kernels use NEON (``asimd``), dotprod (``asimddp``), SVE and SVE2,
    I8MM and BF16 from ``Features``; the CPU is named from its implementer and part as the
    kernel's cputype.h names them (0x41 0xd0c: Arm Neoverse N1). AVX2 is x86's and never asked
    of an arm CPU; a part known to have SVE whose Features lack it is a withheld SVE (a
    kernel before 4.15, ``arm64.nosve``, a hypervisor). A 32-bit ARM kernel (``CPU
    architecture`` 7 or lower) cannot run the arm64 kernels at all: a warning. Without
    /proc/cpuinfo nothing is known of the CPU.
    """

    id = "cpu-isa"
    title = "CPU instruction set"
    findings = ("isa", "kernel-withholds", "no-avx2", "no-neon", "not-arm64", "no-cpuinfo", "unknown")

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        arch = ctx.cpu_arch
        if arch.unread:
            yield self.finding(
                "no-cpuinfo", Severity.INFO,
                f"/proc/cpuinfo cannot be read ({arch.unread}): which instruction sets the CPU "
                "has is unknown",
                evidence=(Evidence("/proc/cpuinfo", arch.unread),),
            )
            return
        if arch.arch in ("arm64", "arm"):
            yield from self._arm(ctx)
            return
        cpu = ctx.cpu
        model = cpu.model or {"s390": "an s390 CPU", "ia64": "an ia64 CPU"}.get(arch.arch, "unknown CPU")
        withheld, evidence_more = _withheld(ctx)
        evidence = (Evidence("/proc/cpuinfo", f"model name: {model}; expert ISA: "
                             f"{' '.join(cpu.expert_isa) or 'none'}"), *evidence_more)
        for item in withheld:
            yield self._withholds(model, item, evidence)
        yield self._isa(ctx, model, usable_isa(cpu.expert_isa, withheld), evidence)

    def _withholds(self, model: str, item: Withheld, evidence: Tuple[Evidence, ...]) -> Finding:
        feature = item.feature
        return self.finding(
            "kernel-withholds", Severity.WARNING,
            f"{model} has {feature.upper().replace('_TILE', '').replace('512F', '-512')} but the "
            f"kernel will not give it: {item.why}",
            detail="The expert kernels pick their code path by what the kernel lets a process use; "
            "what it withholds runs as the next slower path. "
            + ("AMX needs Linux 5.16 or later (ARCH_REQ_XCOMP_PERM); upgrade the kernel (Ubuntu "
               "22.04's HWE kernel is 6.x) or use a distribution kernel that backports it."
               if feature == "amx_tile" else
               "Remove the boot option that hides it, or let the hypervisor pass it through "
               "(host CPU model or `host-passthrough`)."),
            evidence=evidence,
        )

    def _isa(self, ctx: HostContext, model: str, isa: Tuple[str, ...],
             evidence: Tuple[Evidence, ...]) -> Finding:
        if not ctx.cpu.flags:
            return self.finding(
                "unknown", Severity.INFO,
                f"{model}: /proc/cpuinfo lists no x86 flags and no arm64 Features, the instruction "
                "sets the expert kernels are built for",
                evidence=evidence)
        if "avx2" not in isa:
            return self.finding(
                "no-avx2", Severity.WARNING,
                f"{model} has no AVX2: expert kernels fall back to slow generic code",
                evidence=evidence,
            )
        missing = [f for f in ("avx512f", "amx_tile") if f not in isa]
        note = f" (no {', no '.join(m.upper().replace('_TILE', '') for m in missing)})" if missing else ""
        return self.finding(
            "isa", Severity.INFO,
            f"{model}: expert kernels can use {', '.join(i.upper() for i in isa)}{note}",
            evidence=evidence,
        )

    def _arm(self, ctx: HostContext) -> Iterator[Finding]:
        """An arm CPU named from its cores, SVE the kernel withholds, and the arm64 paths its
        Features allow."""
        arch = ctx.cpu_arch
        name = arm_cpu_name(arch)
        usable = arm_isa(arch.features)
        evidence = _arm_evidence(arch)
        if arch.arch == "arm":
            version = arch.arm_architecture or "not listed"
            yield self.finding(
                "not-arm64", Severity.WARNING,
                f"{name} runs a 32-bit ARM kernel (CPU architecture: {version}): the engine's arm64 "
                "expert kernels cannot run under it",
                detail="A 32-bit ARM kernel runs no AArch64 program; the engine needs an arm64 CPU "
                "and a 64-bit kernel.",
                evidence=evidence,
            )
            return
        withheld = arm_withheld(arch, ctx.kernel_isa)
        if withheld is not None:
            release = ctx.kernel_isa.release
            yield self._withholds(name, withheld, evidence + tuple(
                [Evidence("/proc/sys/kernel/osrelease", release)] if release else []))
        if "NEON" not in usable:
            yield self.finding(
                "no-neon", Severity.WARNING,
                f"{name} has no NEON (asimd): expert kernels fall back to slow generic code",
                evidence=evidence,
            )
            return
        missing = arm_missing(arch.features)
        note = f" (no {', no '.join(missing)})" if missing else ""
        yield self.finding(
            "isa", Severity.INFO, f"{name}: expert kernels can use {', '.join(usable)}{note}",
            evidence=evidence,
        )


def _withheld(ctx: HostContext) -> Tuple[Tuple[Withheld, ...], List[Evidence]]:
    """What the kernel withholds of AVX-512 and AMX, and the kernel's values it rests on;
    the kernel is asked only when the CPU has either."""
    has = isa_the_cpu_has(ctx.cpu)
    if not has:
        return (), []  # nothing to withhold: the kernel is not asked
    kernel = ctx.kernel_isa
    return withheld_isa(ctx.cpu, kernel, has), _kernel_evidence(kernel)


def _kernel_evidence(kernel: KernelIsa) -> List[Evidence]:
    """The release, arch_prctl's answers and the boot options that hide vector state."""
    evidence: List[Evidence] = []
    if kernel.release:
        evidence.append(Evidence("/proc/sys/kernel/osrelease", kernel.release))
    if kernel.amx_request is not None or kernel.xcomp_supported is not None:
        mask = f"{kernel.xcomp_supported:#x}" if kernel.xcomp_supported is not None else "refused"
        evidence.append(Evidence(XCOMP, f"ARCH_GET_XCOMP_SUPP {mask}; ARCH_REQ_XCOMP_PERM XTILEDATA "
                                 f"{kernel.amx_request or 'not asked'}"))
    if kernel.hidden_by_cmdline:
        evidence.append(Evidence("/proc/cmdline", " ".join(kernel.hidden_by_cmdline)))
    return evidence


def _arm_evidence(arch: CpuArch) -> Tuple[Evidence, ...]:
    """The cores' ids (with their processors where there are several kinds), the
    architecture and the Features the kernels use."""
    several = len(arch.arm_cores) > 1
    cores = [f"CPU implementer {c.implementer:#04x}, CPU part {c.part:#05x}"
             + (f" ({c.processors} processor{'s' if c.processors != 1 else ''})" if several else "")
             for c in arch.arm_cores]
    features = " ".join(sorted(arch.features & _ARM_FEATURES)) or "none the kernels use"
    return (Evidence("/proc/cpuinfo", "; ".join(
        [*cores, f"CPU architecture: {arch.arm_architecture or 'not listed'}", f"Features: {features}"])),)
