"""Where the engine should run: the binding plan, and whether the engine already follows it.

The plan binds memory with a *preferred* policy (``numactl --preferred``), never
``--membind``: a bound allocation fails hard when the node fills, a preferred one spills.
"""

from typing import Callable, FrozenSet, List, NamedTuple, Optional, Tuple

from strata_doctor.config import EngineConfig
from strata_doctor.facts.engine import EngineProcess, UnitBinding, UnitState
from strata_doctor.facts.numa import NumaFacts, NumaNode
from strata_doctor.facts.parse import format_cpulist, format_nodes, parse_cpulist, parse_int

SAME_SOCKET_MAX_DISTANCE = 12  # SNC / NPS sub-nodes report 11-12; a socket hop is 20+


class BindingPlan(NamedTuple):
    """The nodes the engine's memory and CPUs should use, and why."""

    mem_nodes: FrozenSet[int]
    """Nodes for the arena (``--preferred`` / ``NUMAMask``)."""
    cpu_nodes: FrozenSet[int]
    """Nodes whose CPUs run the expert pool (``--cpunodebind``)."""
    cpus: FrozenSet[int]
    """Online CPUs of ``cpu_nodes``."""
    policy: str
    """``preferred``, ``preferred-many`` (Linux 5.15+) or ``interleave``."""
    reasons: Tuple[str, ...]
    """One line per decision taken."""
    isolated_out: FrozenSet[int] = frozenset()
    """Isolated CPUs of ``cpu_nodes`` that ``cpus`` leaves out (no load balancing there)."""

    @property
    def nodes_text(self) -> str:
        """Memory nodes as a comma list."""
        return ",".join(str(n) for n in sorted(self.mem_nodes))

    @property
    def pins_cpus(self) -> bool:
        """Whether the engine is bound to ``cpus`` rather than to its nodes: the plan left
        isolated CPUs of the nodes out, which ``--cpunodebind=`` would give back."""
        return bool(self.isolated_out)


def socket_siblings(numa: NumaFacts, node: NumaNode) -> FrozenSet[int]:
    """CPU nodes at sub-node distance from ``node`` (SNC/NPS), including itself."""
    near = {node.id}
    for other in numa.cpu_nodes:
        distance = node.distance_to(other.id)
        if distance is not None and 0 < distance <= SAME_SOCKET_MAX_DISTANCE:
            near.add(other.id)
    return frozenset(near)


def nearest_cpu_node(numa: NumaFacts, node: NumaNode) -> Optional[NumaNode]:
    """The CPU node closest to a CPU-less node (its own id when it has CPUs)."""
    if node.cpus:
        return node
    ranked = sorted(
        (d, n.id) for n in numa.cpu_nodes if (d := node.distance_to(n.id)) is not None and d > 0
    )
    return numa.node(ranked[0][1]) if ranked else None


def kernel_at_least(release: Optional[str], major: int, minor: int) -> bool:
    """Whether ``/proc/sys/kernel/osrelease`` is at least ``major.minor``."""
    if not release:
        return False
    parts = release.split(".")
    found = (parse_int(parts[0]) or 0, parse_int((parts[1] if len(parts) > 1 else "0").split("-")[0]) or 0)
    return found >= (major, minor)


def plan_for(
    numa: NumaFacts, target: Optional[int], config: EngineConfig,
    kernel_release: Callable[[], Optional[str]], isolated: FrozenSet[int] = frozenset(),
) -> Optional[BindingPlan]:
    """The binding plan for a host; None when there is nothing to bind to.

    ``target`` is the node the engine should use (``ctx.target_node``); ``kernel_release``
    gives ``/proc/sys/kernel/osrelease``, asked only when the arena needs a socket's nodes;
    ``isolated`` are the CPUs the scheduler does not balance onto (:func:`leave_out_isolated`).
    ``ctx.binding_plan`` keeps the answer for a host.
    """
    node = numa.node(target) if target is not None else None
    if node is None or len(numa.cpu_nodes) < 2:
        return None
    cpu_node = nearest_cpu_node(numa, node)
    if cpu_node is None:
        return None
    reasons: List[str] = []
    if cpu_node.id != node.id:
        reasons.append(
            f"node {node.id} has no CPUs; the pool runs on the nearest CPU node {cpu_node.id}"
        )
    mem_nodes = frozenset({node.id}) if node.has_memory else frozenset({cpu_node.id})
    spread = socket_spread(numa, node.id, cpu_node, mem_nodes, config, kernel_release)
    if spread is None:
        cpu_nodes = frozenset({cpu_node.id})
        every = cpus_of(numa, cpu_nodes)
        cpus = leave_out_isolated(every, isolated, cpu_nodes, reasons)
        return BindingPlan(mem_nodes, cpu_nodes, cpus, "preferred", tuple(reasons), every - cpus)
    reasons.append(spread.reason)
    every = cpus_of(numa, spread.nodes)
    cpus = leave_out_isolated(every, isolated, spread.nodes, reasons)
    return BindingPlan(spread.nodes, spread.nodes, cpus, spread.policy, tuple(reasons), every - cpus)


def leave_out_isolated(
    cpus: FrozenSet[int], isolated: FrozenSet[int], nodes: FrozenSet[int], reasons: List[str],
) -> FrozenSet[int]:
    """The plan's CPUs less the isolated ones, with the plan's line for it.

    An isolated CPU gets no load balancing: an unpinned thread there stays where it
    started, and the kernel keeps every service off it by default, so the plan takes the
    node's other CPUs. When every CPU of the nodes is isolated they stay, and the line
    says the pool runs there only with each thread pinned to its own CPU.
    """
    off = cpus & isolated
    if not off:
        return cpus
    where = format_nodes(nodes)
    if off == cpus:
        reasons.append(
            f"every CPU of {where} is isolated ({format_cpulist(off)}: no load balancing), so the "
            "pool runs there only with each thread pinned to its own CPU; unpinned, all its threads "
            "stay on the one CPU the engine starts on"
        )
        return cpus
    reasons.append(
        f"CPUs {format_cpulist(off)} of {where} are isolated (no load balancing); the plan "
        f"leaves them out and keeps {len(cpus) - len(off):,} of {len(cpus):,} CPUs"
    )
    return cpus - off


class SocketSpread(NamedTuple):
    """The socket's nodes the arena spreads over when one node cannot hold it."""

    nodes: FrozenSet[int]
    """The sub-nodes of the socket (SNC/NPS), the target among them."""
    policy: str
    """``preferred-many`` (Linux 5.15+), else ``interleave``."""
    reason: str
    """The plan's line for this decision."""


def socket_spread(
    numa: NumaFacts, target: int, cpu_node: NumaNode, mem_nodes: FrozenSet[int],
    config: EngineConfig, kernel_release: Callable[[], Optional[str]],
) -> Optional[SocketSpread]:
    """The socket's nodes when the arena and its headroom do not fit ``mem_nodes`` and the
    socket has sub-nodes; None when the arena fits, has no size, or the socket is one node."""
    need = config.pinned_bytes
    if need is None or need + config.headroom_bytes <= _total(numa, mem_nodes):
        return None
    siblings = socket_siblings(numa, cpu_node)
    if len(siblings) < 2:
        return None
    many = kernel_at_least(kernel_release(), 5, 15)
    policy = "preferred-many" if many else "interleave"
    return SocketSpread(siblings, policy, (
        f"the arena does not fit node {target} alone; node {target} shares its socket "
        f"with {format_nodes(siblings - {target})}, so the "
        f"plan uses the socket's nodes ({policy}"
        + (", Linux 5.15+)" if many else "; preferred-many needs Linux 5.15+)")
    ))


def cpus_of(numa: NumaFacts, nodes: FrozenSet[int]) -> FrozenSet[int]:
    """Online CPUs of the given nodes."""
    return frozenset().union(*(n.cpus for n in numa.nodes if n.id in nodes))


def numactl_line(plan: BindingPlan) -> str:
    """The numactl prefix that binds as the plan does, e.g. ``numactl --preferred=1
    --cpunodebind=1``; ``--physcpubind=`` with the plan's CPUs when it leaves isolated CPUs
    of its nodes out (:attr:`BindingPlan.pins_cpus`). Every line a user is told to run
    comes from here."""
    cpus = (f"--physcpubind={format_cpulist(plan.cpus)}" if plan.pins_cpus
            else f"--cpunodebind={node_list(plan.cpu_nodes)}")
    return f"numactl --{plan.policy}={node_list(plan.mem_nodes)} {cpus}"


def node_list(nodes: FrozenSet[int]) -> str:
    """Nodes as a sorted comma list, as numactl and systemd write them."""
    return ",".join(str(n) for n in sorted(nodes))


def _total(numa: NumaFacts, nodes: FrozenSet[int]) -> int:
    return sum(n.memory_total or 0 for n in numa.nodes if n.id in nodes)


class BindingState(NamedTuple):
    """Whether the engine follows the plan: in effect now, only configured, or neither."""

    effective: Optional[bool]
    """True/False from the running engine or the loaded unit; None when unknown."""
    configured: bool
    """True when unit files or drop-ins on disk bind the engine as planned."""
    evidence: Tuple[Tuple[str, str], ...]
    """(source, value) pairs the decision rests on."""
    wrong: Optional[str] = None
    """Set when the engine is bound, but elsewhere."""


def assess(
    proc: Optional[EngineProcess], unit: UnitState, configured: UnitBinding, plan: BindingPlan
) -> BindingState:
    """Compare the engine's binding (running process, loaded unit, files on disk) with the plan."""
    evidence: List[Tuple[str, str]] = []
    effective: Optional[bool] = None
    wrong: Optional[str] = None
    if proc is not None:
        effective, wrong = _process_follows(proc, plan, evidence)
    elif unit.loaded:
        effective, wrong = _unit_follows(unit, plan, evidence)
    files_follow = _files_follow(configured, plan, evidence)
    return BindingState(effective, files_follow, tuple(evidence), wrong)


def _process_follows(
    proc: EngineProcess, plan: BindingPlan, evidence: List[Tuple[str, str]]
) -> Tuple[bool, Optional[str]]:
    evidence.append((f"/proc/{proc.pid}/status", f"Cpus_allowed_list: {format_cpulist(proc.cpus_allowed)}"))
    spread = ", ".join(f"N{n}={size / 2**30:.2f} GiB" for n, size in proc.memory_by_node)
    evidence.append((f"/proc/{proc.pid}/numa_maps", spread or "no pages"))
    if _cpus_follow(proc.cpus_allowed, plan) and _pages_follow(proc, plan):
        return True, None
    return False, _elsewhere(proc.cpus_allowed, plan)


def _pages_follow(proc: EngineProcess, plan: BindingPlan) -> bool:
    """Whether most of the engine's memory is under a policy of the planned nodes, or at
    least 90% of its pages lie on them."""
    total = proc.resident_bytes
    if total <= 0:
        return False
    preferred = any(_policy_nodes(p) <= plan.mem_nodes and _policy_nodes(p)
                    for p, size in proc.policies if size * 2 >= total)
    return preferred or sum(proc.bytes_on(n) for n in plan.mem_nodes) * 10 >= total * 9


def _cpus_follow(cpus: FrozenSet[int], plan: BindingPlan) -> bool:
    """Whether a CPU set is given and lies within the plan's CPUs."""
    return bool(cpus) and cpus <= plan.cpus


def _policy_follows(policy: Optional[str], mask: FrozenSet[int], plan: BindingPlan) -> bool:
    """Whether a systemd ``NUMAPolicy=``/``NUMAMask=`` keeps memory on the planned nodes."""
    return policy in ("preferred", "bind", "interleave") and bool(mask) and mask <= plan.mem_nodes


def _policy_nodes(policy: str) -> FrozenSet[int]:
    kind, _, nodes = policy.partition(":")
    kind = kind.partition("=")[0]  # mode flags: bind=static:0-1
    if kind not in ("prefer", "bind", "interleave", "preferred-many", "prefer (many)", "weighted interleave"):
        return frozenset()
    return parse_cpulist(nodes)


def _elsewhere(cpus: FrozenSet[int], plan: BindingPlan) -> Optional[str]:
    if cpus and not (cpus & plan.cpus):
        return f"its CPUs {format_cpulist(cpus)} are all off the planned {format_nodes(plan.nodes_text)}"
    return None


def _unit_follows(
    unit: UnitState, plan: BindingPlan, evidence: List[Tuple[str, str]]
) -> Tuple[bool, Optional[str]]:
    policy, mask = unit.get("NUMAPolicy"), unit.get("NUMAMask")
    affinity = parse_cpulist(",".join(unit.get("CPUAffinity").split()))
    allowed = parse_cpulist(",".join(unit.get("AllowedCPUs").split()))
    evidence.append(
        (f"$ systemctl show {unit.name}",
         f"NUMAPolicy={policy} NUMAMask={mask} CPUAffinity={unit.get('CPUAffinity')} "
         f"AllowedCPUs={unit.get('AllowedCPUs')}")
    )
    mem_ok = _policy_follows(policy, parse_cpulist(",".join(mask.split())), plan)
    cpu_set = affinity or allowed
    return _cpus_follow(cpu_set, plan) and mem_ok, _elsewhere(cpu_set, plan)


def _files_follow(
    files: UnitBinding, plan: BindingPlan, evidence: List[Tuple[str, str]]
) -> bool:
    if files.exec_numactl:
        evidence.append(("ExecStart", files.exec_numactl))
        if _numactl_follows(files.exec_numactl, plan):
            return True
    if not files.files:
        return False
    mem_ok = _policy_follows(files.numa_policy, files.numa_mask, plan)
    cpus_ok = _cpus_follow(files.cpu_affinity or files.allowed_cpus, plan)
    if mem_ok or cpus_ok:
        evidence.append(
            (files.files[-1], f"NUMAPolicy={files.numa_policy} NUMAMask="
             f"{format_cpulist(files.numa_mask)} CPUAffinity={format_cpulist(files.cpu_affinity)}")
        )
    return mem_ok and cpus_ok


def _numactl_follows(exec_numactl: str, plan: BindingPlan) -> bool:
    """Whether ``ExecStart=``'s numactl prefix (or strata-numa) binds as planned."""
    if exec_numactl == "strata-numa":
        return True
    words = exec_numactl.split()
    mems = plan.nodes_text
    wanted = (f"--preferred={mems}", f"--preferred-many={mems}", f"--interleave={mems}")
    return any(w in wanted for w in words) and any(
        w.startswith(("--cpunodebind=", "--physcpubind=")) for w in words)
