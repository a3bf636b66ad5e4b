"""Which of the engine's CPUs the scheduler will not balance onto, and which systemd keeps
every service off.

An isolated CPU (``isolcpus=`` with the domain flag, listed in ``cpu/isolated``) belongs
to no scheduling domain: a thread whose mask holds several isolated CPUs stays on the one
it started on, so an unpinned pool piles onto the first CPU of its mask. The kernel also
moves init off isolated CPUs at boot, so every service starts without them. systemd's
``CPUAffinity=`` (system.conf, or ``systemd.cpu_affinity=``) is the affinity every unit
inherits unless it sets its own ``CPUAffinity=`` (or ``AllowedCPUs=``).
"""

from typing import FrozenSet, NamedTuple, Optional, Tuple

from strata_doctor.facts.isolation import IsolationFacts, SystemdAffinity
from strata_doctor.facts.numa import NumaFacts
from strata_doctor.rules.binding import BindingPlan, cpus_of


class IsolationVerdict(NamedTuple):
    """The engine's planned CPUs against isolation and systemd's default affinity."""

    planned: FrozenSet[int]
    """The CPUs of the binding plan's nodes, or every online CPU without a plan."""
    where: str
    """``node 1``, ``nodes 0,1`` or ``the host``."""
    online: int
    """Online CPUs on the host."""
    isolated: Optional[FrozenSet[int]]
    """Planned CPUs out of the scheduler's balancing; None when unknown."""
    confined: Optional[SystemdAffinity]
    """systemd's default affinity, when it leaves out online CPUs."""
    own: Optional[str]
    """The engine unit's own ``CPUAffinity=``/``AllowedCPUs=``, which escapes it."""

    @property
    def all_isolated(self) -> bool:
        """Every planned CPU is isolated: the pool can run there only with each thread pinned."""
        return bool(self.planned) and self.isolated == self.planned

    @property
    def balanced(self) -> FrozenSet[int]:
        """Planned CPUs the scheduler balances onto."""
        return self.planned - (self.isolated or frozenset())


def planned_cpus(
    numa: NumaFacts, plan: Optional[BindingPlan], online: FrozenSet[int],
) -> Tuple[FrozenSet[int], str]:
    """(CPUs, where) the engine is planned onto: the plan's nodes' online CPUs before any
    isolated CPU is left out, else every online CPU."""
    if plan is None:
        return online, "the host"
    nodes = sorted(plan.cpu_nodes)
    cpus = cpus_of(numa, plan.cpu_nodes)
    return (cpus & online if online else cpus), ("node " if len(nodes) == 1 else "nodes ") + \
        ",".join(map(str, nodes))


def assess_isolation(
    facts: IsolationFacts, planned: Tuple[FrozenSet[int], str], online: FrozenSet[int],
    own: Optional[str],
) -> IsolationVerdict:
    """The verdict for the planned CPUs; ``own`` is the engine unit's own CPU setting."""
    cpus, where = planned
    domain = facts.domain_isolated
    affinity = facts.affinity
    confined = affinity if affinity is not None and online - affinity.cpus else None
    return IsolationVerdict(cpus, where, len(online), cpus & domain if domain is not None else None,
                            confined, own)


def service_cpus(facts: IsolationFacts, online: FrozenSet[int]) -> FrozenSet[int]:
    """The online CPUs a unit that sets no CPU affinity of its own starts on: the kernel
    keeps init off isolated CPUs, and systemd's ``CPUAffinity=`` narrows it further.
    Every online CPU when that would leave none (a capture that does not add up)."""
    usable = online - (facts.domain_isolated or frozenset())
    if facts.affinity is not None:
        usable &= facts.affinity.cpus
    return usable or online

