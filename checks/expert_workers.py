"""expert-workers: the config's expert workers against the cores they will run on."""

from __future__ import annotations

from typing import FrozenSet, Iterator, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.model import Evidence, Finding, Severity


class ExpertWorkers(Check):
    """Compares the config's workers setting with the cores of the CPUs the pool will run on.

    The CPUs are the binding plan's (the GPU's node, or its socket's nodes when the arena
    needs them), else the running engine's allowed CPUs, else every online CPU. Physical
    cores come from ``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list`` (else
    ``physical id``/``core id`` in ``/proc/cpuinfo``): CPU ids are not contiguous, the seed's
    node 1 is ``22-43,66-87`` and CPU 22's sibling is 66. More workers than logical CPUs is
    a warning: threads queue for a CPU and every expert waits for the slowest. More than
    physical cores is info: SMT siblings share one core's FPU, vector units and L2, so the
    second thread on a core adds little to AVX-2/AVX-512 expert kernels. The suggestion
    is the physical cores less one or two for the GPU feeder thread.
    """

    id = "expert-workers"
    title = "Expert workers and cores"
    findings = ("oversubscribed", "smt-siblings", "fits")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.config.workers is None:
            return "no `workers:` in the config"
        if not ctx.pool_cpus[0]:
            return "the host's online CPUs are unknown"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        workers = ctx.config.workers
        assert workers is not None  # applies() ruled this out
        cpus, where = ctx.pool_cpus
        cores, counted = _cores(ctx, cpus)
        evidence = [Evidence(ctx.config.source or "config", f"workers: {workers}"), counted]
        logical = len(cpus)
        place = f"{where}'s" if where != "the host" else "the host's"
        has = f"{place} {cores} physical cores ({logical} CPUs: {format_cpulist(cpus)})"
        suggest = _suggestion(cores)
        if workers > logical:
            yield self.finding(
                "oversubscribed", Severity.WARNING,
                f"workers: {workers} is more than {has}: threads queue for a CPU; use {suggest}",
                detail=f"{workers - logical} workers have no CPU of their own, so the operating "
                "system time-slices them and every expert batch waits for the slowest thread. "
                f"Set `workers:` to {suggest} ({cores} physical cores less one or two for the GPU "
                "feeder thread).",
                evidence=tuple(evidence),
            )
        elif workers > cores:
            yield self.finding(
                "smt-siblings", Severity.INFO,
                f"workers: {workers} is more than {has}: SMT siblings share a core; try {suggest}",
                detail=f"{workers - cores} workers share a core with another: SMT siblings share "
                "the core's FPU, vector units and L2, so a second expert thread on a core adds "
                f"little and competes for its cache. Try `workers:` {suggest} ({cores} physical "
                "cores less one or two for the GPU feeder thread) and keep what measures faster.",
                evidence=tuple(evidence),
            )
        else:
            yield self.finding(
                "fits", Severity.OK,
                f"workers: {workers} fits {has}",
                evidence=tuple(evidence),
            )


def _cores(ctx: HostContext, cpus: FrozenSet[int]) -> Tuple[int, Evidence]:
    """Physical cores among ``cpus`` (from thread_siblings_list, else cpuinfo's core ids),
    with the evidence: a core with SMT siblings, else the count of distinct core ids."""
    siblings = ctx.thread_siblings
    cores = siblings.cores_in(cpus)
    example = next((core for core in siblings.cores if core & cpus and len(core) > 1), None)
    if cores is not None and example is not None:
        return cores, Evidence(f"/sys/devices/system/cpu/cpu{min(example)}/topology/thread_siblings_list",
                               format_cpulist(example))
    if cores is None:
        cores = ctx.cpu.cores_in(cpus)
    return cores, Evidence("/proc/cpuinfo", f"{cores} distinct (physical id, core id) among "
                           f"{len(cpus)} CPUs")


def _suggestion(cores: int) -> str:
    """The physical cores less one or two (the GPU feeder thread), as ``20 or 21``."""
    if cores <= 2:
        return str(max(1, cores - 1))
    return f"{cores - 2} or {cores - 1}"
