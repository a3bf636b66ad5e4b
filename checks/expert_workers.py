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
    cores are the ``physical id``/``core id`` pairs within a known package where they agree
    with the sampled ``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list`` (or
    ``thread_siblings`` mask), else the distinct groups of every CPU's list (``ctx.cpu``):
    CPU ids are not contiguous, the seed's node 1 is ``22-43,66-87`` and CPU 22's sibling
    is 66. Skipped when neither shows the cores. More workers than logical CPUs is
    a warning: threads queue for a CPU and every expert waits for the slowest. More than
    physical cores is info: SMT siblings share one core's FPU, vector units and L2, so the
    second thread on a core adds little to AVX-2/AVX-512 expert kernels. The suggestion
    is the physical cores less one or two for the GPU feeder thread. The pool's CPUs leave
    out those a service cannot use (isolated CPUs, and systemd's ``CPUAffinity=`` for an
    engine unit that sets none); when every one of them is isolated, the detail says the
    count holds only with each worker pinned (cpu-isolation).
    """

    id = "expert-workers"
    title = "Expert workers and cores"
    findings = ("oversubscribed", "smt-siblings", "fits")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.config.workers is None:
            return "no `workers:` in the config"
        cpus = ctx.pool_cpus[0]
        if not cpus:
            return "the host's online CPUs are unknown"
        if ctx.cpu.core_count(cpus) is None:
            return (f"the physical cores of CPUs {format_cpulist(cpus)} are unknown: no "
                    "thread_siblings file, and no core id within a known package")
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        workers = ctx.config.workers
        assert workers is not None  # applies() ruled this out
        cpus, where = ctx.pool_cpus
        cores, counted = _cores(ctx, cpus)
        evidence = [Evidence(ctx.config.source or "config", f"workers: {workers}"), counted]
        logical = len(cpus)
        place = f"{where}'s" if where != "the host" else "the host's"
        has = f"{place} {cores:,} physical cores ({logical:,} CPUs: {format_cpulist(cpus)})"
        suggest = _suggestion(cores)
        pinned = _pinned_note(ctx, cpus)
        if workers > logical:
            yield self.finding(
                "oversubscribed", Severity.WARNING,
                f"workers: {workers} is more than {has}: threads queue for a CPU; use {suggest}",
                detail=f"{workers - logical} workers have no CPU of their own, so the operating "
                "system time-slices them and every expert batch waits for the slowest thread. "
                f"Set `workers:` to {suggest} ({cores} physical cores less one or two for the GPU "
                "feeder thread)." + pinned,
                evidence=tuple(evidence),
            )
        elif workers > cores:
            yield self.finding(
                "smt-siblings", Severity.INFO,
                f"workers: {workers} is more than {has}: SMT siblings share a core; try {suggest}",
                detail=f"{workers - cores} workers share a core with another: SMT siblings share "
                "the core's FPU, vector units and L2, so a second expert thread on a core adds "
                f"little and competes for its cache. Try `workers:` {suggest} ({cores} physical "
                "cores less one or two for the GPU feeder thread) and keep what measures faster."
                + pinned,
                evidence=tuple(evidence),
            )
        else:
            yield self.finding(
                "fits", Severity.OK,
                f"workers: {workers} fits {has}",
                detail=pinned.strip(),
                evidence=tuple(evidence),
            )


def _cores(ctx: HostContext, cpus: FrozenSet[int]) -> Tuple[int, Evidence]:
    """Physical cores among ``cpus`` (their thread_siblings groups, else their distinct
    (package, core id) pairs), with the evidence: a core with SMT siblings, else the count."""
    cpu = ctx.cpu
    cores = cpu.core_count(cpus)
    assert cores is not None  # applies() ruled this out
    groups = cpu.thread_groups_in(cpus)
    example = next((group for group in groups if len(group) > 1), None)
    if example is not None:
        return cores, Evidence(f"/sys/devices/system/cpu/cpu{min(example)}/topology/{cpu.siblings_file}",
                               format_cpulist(example))
    if groups and cpus <= frozenset().union(*groups):  # counted from the lists, no SMT
        return cores, Evidence(f"/sys/devices/system/cpu/cpu*/topology/{cpu.siblings_file}",
                               f"{len(cpus):,} CPUs, each its own sibling list")
    from_cpuinfo = cpu.core_ids_source == "/proc/cpuinfo"
    pair = "(physical id, core id)" if from_cpuinfo else "(physical_package_id, core_id)"
    return cores, Evidence(cpu.core_ids_source, f"{cores} distinct {pair} among {len(cpus):,} CPUs")


def _pinned_note(ctx: HostContext, cpus: FrozenSet[int]) -> str:
    """The caveat when every CPU of the pool is isolated (cpu-isolation): the count holds
    only with each worker pinned; '' otherwise."""
    isolated = ctx.isolation.isolated
    if not cpus or not isolated or not cpus <= isolated:
        return ""
    return (f" Every one of these CPUs is isolated ({ctx.cpu_isolation.isolated_source}: no load "
            "balancing), so this holds only with each worker pinned to its own CPU; unpinned, all "
            "of them share the one CPU the engine starts on (cpu-isolation).")


def _suggestion(cores: int) -> str:
    """The physical cores less one or two (the GPU feeder thread), as ``20 or 21``."""
    if cores <= 2:
        return str(max(1, cores - 1))
    return f"{cores - 2} or {cores - 1}"
