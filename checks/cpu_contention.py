"""cpu-contention: other processes that share the GPU node's CPUs with the expert pool."""

from __future__ import annotations

from typing import FrozenSet, Iterator, List, Optional

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.parse import format_cpulist, parse_cpulist
from strata_doctor.facts.processes import ProcessInfo
from strata_doctor.facts.units import RESERVED_UNITS
from strata_doctor.model import Evidence, Finding, Severity

TOP = 5
"""The top-level units whose AllowedCPUs= keep everything but the engine off its node."""


class CpuContention(Check):
    """Counts the other processes allowed to run on the engine node's CPUs.

    The expert pool is CPU-bound: on the seed box 58-84% of routed experts ran on the
    CPU. Any other process scheduled on the same cores steals cycles from it. The seed's
    operator moved 184 non-engine processes to node 0 and reserved node 1 for the engine.
    Reads ``/proc/PID/status`` (Cpus_allowed_list) and ``/proc/PID/stat`` (CPU time
    since start) of every process, skipping kernel threads and the engine itself. Advisory
    (info): ``strata-doctor fix --reserve-node`` moves the others away.
    """

    id = "cpu-contention"
    title = "CPU contention on the engine's node"
    findings = ("shared-cpus", "reserved", "configured")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if len(ctx.numa.cpu_nodes) < 2:
            return "one NUMA node with CPUs: no node to reserve"
        if ctx.binding_plan is None:
            return "no target node (no GPU, or its node is unknown)"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        plan = ctx.binding_plan
        assert plan is not None  # applies() ruled this out
        engine_pid = ctx.engine_pid  # the engine is not "another process", however started
        uptime = ctx.uptime or 0.0  # read on every run, also when no process shares the node
        others = [
            p for p in ctx.processes
            if not p.kernel_thread and p.pid != engine_pid and p.cpus_allowed & plan.cpus
        ]
        node_text = plan.nodes_text
        if not others:
            yield self.finding(
                "reserved", Severity.OK,
                f"no other process may run on node {node_text}'s CPUs",
            )
            return
        fenced = self._configured_fence(ctx, plan.cpus)
        if fenced:
            yield self.finding(
                "configured", Severity.INFO,
                f"node {node_text} is reserved in the unit files ({fenced}); "
                f"{len(others):,} processes still run there until `systemctl daemon-reload`",
                evidence=tuple(
                    Evidence(path, f"AllowedCPUs={value}")
                    for path, value in ctx.reserved_unit_cpus
                ),
            )
            return
        yield self._shared(others, uptime, plan.cpus, node_text)

    def _shared(
        self, others: List[ProcessInfo], uptime: float, cpus: FrozenSet[int], node_text: str,
    ) -> Finding:
        """Info naming the busiest of the processes that share the node's CPUs."""
        load = sum(p.cpu_share(uptime) for p in others)
        top = sorted(others, key=lambda p: p.cpu_share(uptime), reverse=True)[:TOP]
        names = ", ".join(f"{p.name} ({p.pid}) {p.cpu_share(uptime):.2f}" for p in top)
        return self.finding(
            "shared-cpus", Severity.INFO,
            f"{len(others):,} other processes may run on node {node_text}'s CPUs "
            f"({format_cpulist(cpus)}); together they averaged {load:.2f} CPUs",
            detail=f"Busiest (average CPUs since start): {names}. "
            "`strata-doctor fix --reserve-node` gives the engine its own slice on this node "
            "and moves system.slice, user.slice and init.scope to the other nodes.",
            evidence=(Evidence("/proc/*/status", f"{len(others):,} processes with Cpus_allowed_list "
                               f"overlapping {format_cpulist(cpus)}"),),
        )

    def _configured_fence(self, ctx: HostContext, cpus: FrozenSet[int]) -> str:
        """'system.slice, user.slice, init.scope on CPUs X' when all three are fenced off."""
        sources = ctx.reserved_unit_cpus
        if len(sources) < len(RESERVED_UNITS):
            return ""
        allowed = [parse_cpulist(",".join(value.split())) for _, value in sources]
        if any(not a or a & cpus for a in allowed):
            return ""
        return f"system.slice, user.slice and init.scope on CPUs {format_cpulist(allowed[0])}"

