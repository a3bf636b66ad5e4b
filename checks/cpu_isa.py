"""cpu-isa: which instruction sets the CPU expert kernels can use."""

from __future__ import annotations

from typing import Iterator

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.model import Evidence, Finding, Severity


class CpuIsa(Check):
    """Reports the CPU's ISA extensions that the expert kernels use.

    Reads ``flags`` from ``/proc/cpuinfo``. The CPU pool computes most routed experts
    (58-84% on the seed box), so its instruction set bounds decode speed: the seed's
    Broadwell-EP Xeons have AVX2 and no AVX-512, and decode stayed the same after binding
    because it is bound by AVX2 compute. AVX-512 (avx512f), BF16 (avx512_bf16) and AMX
    (amx_tile) give faster kernels. A CPU without AVX2 is a warning: the engine falls back
    to slow scalar kernels.
    """

    id = "cpu-isa"
    title = "CPU instruction set"

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        cpu = ctx.cpu
        isa = cpu.expert_isa
        model = cpu.model or "unknown CPU"
        evidence = (Evidence("/proc/cpuinfo", f"model name: {model}; expert ISA: {' '.join(isa) or 'none'}"),)
        if not cpu.flags:
            yield self.finding(
                "unknown", Severity.INFO, "/proc/cpuinfo lists no CPU flags", evidence=evidence
            )
        elif "avx2" not in isa:
            yield self.finding(
                "no-avx2", Severity.WARNING,
                f"{model} has no AVX2: expert kernels fall back to slow generic code",
                evidence=evidence,
            )
        else:
            missing = [f for f in ("avx512f", "amx_tile") if f not in isa]
            note = f" (no {', no '.join(m.upper().replace('_TILE', '') for m in missing)})" if missing else ""
            yield self.finding(
                "isa", Severity.INFO,
                f"{model}: expert kernels can use {', '.join(i.upper() for i in isa)}{note}",
                evidence=evidence,
            )
