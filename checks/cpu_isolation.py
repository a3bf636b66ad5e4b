"""cpu-isolation: CPUs the scheduler will not balance the pool onto, and CPUs systemd keeps
every service off."""

from __future__ import annotations

from typing import FrozenSet, Iterator, List, Optional

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.isolation import CMDLINE, ISOLATED, NOHZ_FULL, SYSTEM_CONF, IsolationFacts
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.isolation import IsolationVerdict

PINNED = ("An isolated CPU belongs to no scheduling domain: the load balancer never moves a "
          "thread onto it or off it, so threads whose mask holds several isolated CPUs all stay on the "
          "one they start on, and the kernel keeps init, and with it every service, off them "
          "from boot.")


class CpuIsolation(Check):
    """Says which of the engine's planned CPUs the scheduler will not balance onto, and
    which CPUs systemd keeps every service off.

    Reads ``/proc/cmdline`` (``isolcpus=`` with its flags, ``nohz_full=``, ``rcu_nocbs=``,
    ``systemd.cpu_affinity=``, ``idle=``), ``/sys/devices/system/cpu/isolated`` and
    ``nohz_full``, and ``CPUAffinity=`` in ``/etc/systemd/system.conf`` and its
    ``system.conf.d`` drop-ins. The planned CPUs are the binding plan's nodes' CPUs, or
    every online CPU without a plan. An isolated CPU (``isolcpus=`` with the domain flag,
    or none) gets no load balancing: an unpinned pool on isolated CPUs piles onto one CPU.
    systemd's ``CPUAffinity=`` is the affinity of every unit that sets none of its own,
    the engine's included. ``isolcpus=managed_irq,...`` alone moves only managed
    interrupts: those CPUs are still balanced.
    """

    id = "cpu-isolation"
    title = "Isolated CPUs and systemd's CPU affinity"
    findings = ("unknown", "isolated", "isolated-left-out", "managed-irq-only", "confined",
                "unit-overrides", "idle-poll", "none", "not-isolated")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if not ctx.isolation.planned:
            return "the host's online CPUs are unknown"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        facts, verdict = ctx.cpu_isolation, ctx.isolation
        if facts.cmdline is None and facts.isolated is None:
            yield self._unknown(ctx)
            return
        found: List[Finding] = []
        if verdict.isolated:
            found.append(self._isolated(verdict, facts))
        elif _irq_only(facts, verdict.planned):
            found.append(self._irq_only(verdict, facts))
        if verdict.confined is not None:
            found.append(self._confined(ctx, verdict))
        if not found:
            found.append(self._none(verdict, facts))
        if facts.cmdline is not None and facts.cmdline.idle == "poll":
            found.append(self._idle_poll(facts))
        yield from found

    def _unknown(self, ctx: HostContext) -> Finding:
        why = ", ".join(f"{path} is {ctx.why_unread(path) or 'missing'}" for path in (CMDLINE, ISOLATED))
        return self.finding(
            "unknown", Severity.INFO,
            f"whether any CPU is isolated from the scheduler is unknown: {why}",
        )

    def _isolated(self, verdict: IsolationVerdict, facts: IsolationFacts) -> Finding:
        isolated = verdict.isolated or frozenset()
        share = f"{len(isolated):,} of {_place(verdict.where)} {len(verdict.planned):,} CPUs"
        evidence = _isolation_evidence(facts)
        nohz = _nohz_note(facts, isolated)
        if verdict.all_isolated:
            return self.finding(
                "isolated", Severity.WARNING,
                f"{facts.isolated_source} keeps {share} ({format_cpulist(isolated)}) out of the "
                "scheduler's balancing: the pool runs there only with each thread pinned to its "
                "own CPU",
                detail=f"{PINNED} Unpinned, every expert thread queues on that one CPU. Pin each "
                f"worker to one CPU of {format_cpulist(isolated)} (one thread per CPU), or boot "
                f"with fewer isolated CPUs so that {_place(verdict.where)} CPUs are balanced.{nohz}",
                evidence=evidence,
            )
        return self.finding(
            "isolated-left-out", Severity.INFO,
            f"{facts.isolated_source} keeps {share} ({format_cpulist(isolated)}) out of the "
            f"scheduler's balancing; the engine runs on the other {len(verdict.balanced):,}",
            detail=f"{PINNED} The binding plan and the pool's CPUs leave them out, so the pool is "
            f"balanced over {format_cpulist(verdict.balanced)}; what they were isolated for keeps "
            f"them.{nohz}",
            evidence=evidence,
        )

    def _irq_only(self, verdict: IsolationVerdict, facts: IsolationFacts) -> Finding:
        iso = facts.cmdline.isolcpus if facts.cmdline is not None else None
        assert iso is not None  # _irq_only() ruled this out
        cpus = iso.cpus & verdict.planned
        named = (f"all {len(cpus):,} of {_place(verdict.where)} CPUs, which it names,"
                 if cpus == verdict.planned else
                 f"the {len(cpus):,} of {_place(verdict.where)} {len(verdict.planned):,} CPUs it names")
        return self.finding(
            "managed-irq-only", Severity.INFO,
            f"{iso.word} has no domain flag: {named} stay in the scheduler's balancing, and only "
            "managed interrupts move off them",
            detail="isolcpus= takes CPUs out of the scheduler's domains only with the `domain` "
            "flag, or with no flag at all (kernel/sched/isolation.c); `managed_irq` and `nohz` "
            f"alone leave them balanced, as {ISOLATED} shows.{_nohz_note(facts, cpus)}",
            evidence=_isolation_evidence(facts),
        )

    def _confined(self, ctx: HostContext, verdict: IsolationVerdict) -> Finding:
        affinity = verdict.confined
        assert affinity is not None  # run() ruled this out
        unit = ctx.config.unit
        cpus = f"{len(affinity.cpus):,} of {verdict.online:,} CPUs ({format_cpulist(affinity.cpus)})"
        evidence = (Evidence(affinity.source, affinity.setting),)
        if verdict.own is not None:
            return self.finding(
                "unit-overrides", Severity.INFO,
                f"{affinity.setting} confines every service to {cpus}; {unit} sets its own "
                f"{verdict.own}",
                detail="A unit's own CPUAffinity= (or AllowedCPUs=) replaces the affinity systemd "
                "gives every other unit, so the engine is not held to it.",
                evidence=(*evidence, Evidence(unit, verdict.own)),
            )
        inside = len(verdict.planned & affinity.cpus)
        return self.finding(
            "confined", Severity.WARNING,
            f"{affinity.setting} confines every service, {unit} included, to {cpus}",
            detail=f"systemd gives every unit that sets no CPUAffinity= of its own this affinity, "
            f"so the engine runs on these CPUs, {inside} of them among {_place(verdict.where)} "
            f"{len(verdict.planned):,} planned CPUs. "
            + ("numa-binding's drop-in sets CPUAffinity= for the plan's CPUs, which replaces it. "
               if verdict.where != "the host" else
               f"Give {unit} its own CPUAffinity= (a drop-in) for the CPUs it should use, or "
               "widen the default."),
            evidence=evidence,
        )

    def _idle_poll(self, facts: IsolationFacts) -> Finding:
        return self.finding(
            "idle-poll", Severity.INFO,
            "idle=poll keeps every idle CPU spinning instead of sleeping: the host runs hot, "
            "turbo has less headroom, and an idle SMT sibling takes cycles from the pool's thread "
            "on its core",
            detail="idle=poll trades power for wake-up latency, a choice for real-time work; "
            "the expert pool gains nothing from it. Leave it out of the command line unless "
            "what runs on the isolated CPUs needs it.",
            evidence=(Evidence(CMDLINE, "idle=poll"),),
        )

    def _none(self, verdict: IsolationVerdict, facts: IsolationFacts) -> Finding:
        if facts.cmdline is None:  # no systemd.cpu_affinity= to read: say only what sysfs says
            return self.finding(
                "not-isolated", Severity.OK,
                f"none of {_place(verdict.where)} {len(verdict.planned):,} CPUs is isolated from "
                f"the scheduler ({ISOLATED}); {CMDLINE} is missing, so systemd.cpu_affinity= is "
                "unknown",
                evidence=_isolation_evidence(facts) + _conf_evidence(facts),
            )
        return self.finding(
            "none", Severity.OK,
            f"none of {_place(verdict.where)} {len(verdict.planned):,} CPUs is isolated from the "
            "scheduler, and no systemd CPUAffinity= confines the services",
            evidence=_isolation_evidence(facts) + _conf_evidence(facts),
        )


def _place(where: str) -> str:
    """``node 1's``, ``the host's``."""
    return f"{where}'s"


def _irq_only(facts: IsolationFacts, planned: FrozenSet[int]) -> bool:
    """``isolcpus=`` without the domain flag names some planned CPUs."""
    iso = facts.cmdline.isolcpus if facts.cmdline is not None else None
    return iso is not None and not iso.domain and bool(iso.cpus & planned)


def _nohz_note(facts: IsolationFacts, cpus: FrozenSet[int]) -> str:
    """What nohz_full adds on these CPUs, when it names any."""
    nohz = (facts.nohz_full or frozenset()) & cpus
    if not nohz:
        return ""
    return (f" nohz_full also stops the scheduler tick on {len(nohz):,} of them while one thread "
            "runs there, which suits one pinned thread per CPU.")


def _isolation_evidence(facts: IsolationFacts) -> tuple[Evidence, ...]:
    """The command line's isolation words and the two sysfs files, as the host has them."""
    evidence: List[Evidence] = []
    line = facts.cmdline
    if line is not None:
        words = [w for w in (line.isolcpus.word if line.isolcpus else None,
                             line.nohz_full[0] if line.nohz_full else None,
                             line.rcu_nocbs[0] if line.rcu_nocbs else None) if w]
        evidence.append(Evidence(CMDLINE, " ".join(words) or "no isolcpus=, nohz_full= or rcu_nocbs="))
    for path, cpus in ((ISOLATED, facts.isolated), (NOHZ_FULL, facts.nohz_full)):
        if cpus is not None:
            evidence.append(Evidence(path, format_cpulist(cpus) or "(empty)"))
    return tuple(evidence)


def _conf_evidence(facts: IsolationFacts) -> tuple[Evidence, ...]:
    """The system.conf files read, or that the tree has none."""
    if not facts.conf_files:
        return (Evidence(SYSTEM_CONF, "missing"),)
    return tuple(Evidence(path, "no CPUAffinity=") for path in facts.conf_files)
