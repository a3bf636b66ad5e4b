"""numa-binding: is the engine bound to its GPU's NUMA node?"""

from __future__ import annotations

from typing import FrozenSet, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.engine import SYSTEMD_VERSION, unit_command
from strata_doctor.facts.numa import UNREACHABLE, NumaNode
from strata_doctor.facts.parse import format_cpulist, parse_cpulist
from strata_doctor.facts.saved_probe import Remote, SavedProbe, remote_reads
from strata_doctor.fix.binding import binding_fix_for
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.binding import BindingPlan, BindingState, numactl_line
from strata_doctor.rules.isolation import service_cpus


class NumaBinding(Check):
    """Checks that the engine's arena and CPU pool sit on the compute GPU's node.

    On a multi-socket host first-touch spreads the pinned expert arena over every node,
    and the CPU pool runs everywhere, so about half of the GPU's DMA and of the CPU
    expert reads cross the socket link. On the seed box (2x Xeon E5-2696 v4, GTX 1080 Ti
    on node 1, distances 10/21) binding to node 1 made prompts 37-40% faster even though
    it halved the pool's cores (22 of 44): remote reads cost 2.1x.

    Reads the engine unit (``systemctl show``: NUMAPolicy, NUMAMask, CPUAffinity,
    AllowedCPUs, MainPID), its unit files and drop-ins on disk (what is configured but not
    yet in effect), and the running engine's ``/proc/PID/status`` and ``numa_maps``.
    Recommends ``numactl --preferred=N --cpunodebind=N``, never ``--membind`` (a bound
    allocation fails hard when the node fills); ``--physcpubind=`` with the plan's CPUs when
    the plan leaves isolated CPUs of the node out. The detail counts the CPUs the engine
    starts on without the binding: the running engine's allowed CPUs, its unit's own
    ``CPUAffinity=``, else those systemd gives every service (isolation and
    ``systemd.cpu_affinity=`` narrow them). When the arena does not fit a sub-node
    (SNC/NPS), the socket's nodes are used with preferred-many (Linux 5.15+) or
    interleave. Silence with ``--ignore numa-binding`` or ``numa: off`` in the config.
    ``numa: N`` binds to node N instead, and the findings call it the chosen node.

    When the engine's cgroup (a container's, or the unit's) has a ``cpuset.mems.effective``
    without the target node, or a ``cpuset.cpus.effective`` with none of its CPUs, no binding
    can work: the kernel clips every policy and affinity to the cpuset. cgroup-limits
    reports that as an error with its fix; this check then says so as info and advises no
    numactl line, so the one cause fails the check once.

    When ``strata-doctor probe --save`` has left ``/var/lib/strata-doctor/probe.json`` for
    this CPU model and kernel, the measured local/remote read bandwidth of the GPU's node
    replaces the firmware's distance ratio, and the gain of binding is estimated from it.
    """

    id = "numa-binding"
    title = "Engine NUMA binding"
    findings = ("bound", "configured", "unbound", "wrong-node", "nothing-to-bind", "cgroup-excludes-node")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        return (unit_command(ctx.config.unit), SYSTEMD_VERSION)  # the fix depends on the version

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.config.numa == "off":
            return "numa: off in the config"
        if ctx.placement is None and not ctx.config.numa.isdigit():
            return ctx.compute_gpu[1]  # no compute GPU: no node to bind to, unless `numa: N`
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        plan, state = ctx.binding_plan, ctx.binding_state
        if plan is None or state is None:
            yield self._nothing_to_bind(ctx)
            return
        fenced = self._cgroup_excludes(ctx)
        if fenced is not None:
            yield fenced
            return
        evidence = tuple(Evidence(s, v) for s, v in state.evidence)
        line = numactl_line(plan)
        if state.effective:
            yield self.finding(
                "bound", Severity.OK,
                f"{ctx.config.unit} is bound to node {plan.nodes_text} "
                f"(CPUs {format_cpulist(plan.cpus)})",
                evidence=evidence,
            )
        elif state.configured:
            yield self.finding(
                "configured", Severity.INFO,
                f"binding to node {plan.nodes_text} is configured; takes effect after "
                f"`systemctl daemon-reload` and a restart of {ctx.config.unit}",
                detail="The unit files on disk bind the engine, but the running engine or the "
                "loaded unit does not follow them yet.",
                evidence=evidence,
            )
        else:
            yield self._unbound(ctx, plan, state, line, evidence)

    def _cgroup_excludes(self, ctx: HostContext) -> Optional[Finding]:
        """Info when the engine's cpuset leaves out the target node: no binding can work
        there, and cgroup-limits already reports it as an error (with the fix), so this
        check neither advises numactl nor counts the one cause a second time."""
        node = ctx.target_node
        limits = ctx.engine_limits
        numa_node = ctx.numa.node(node) if node is not None else None
        if node is None or numa_node is None or limits.cgroup is None:
            return None
        reasons: List[str] = []
        evidence: List[Evidence] = []
        mems, cpus = limits.fences(node, numa_node.cpus)  # cgroup-limits' rule, not a copy
        if mems is not None:
            reasons.append(f"cpuset.mems {mems.text} excludes it")
            evidence.append(Evidence(mems.source, mems.text))
        if cpus is not None:
            reasons.append(f"cpuset.cpus {cpus.text} holds none of its CPUs "
                           f"({format_cpulist(numa_node.cpus)})")
            evidence.append(Evidence(cpus.source, cpus.text))
        if not reasons:
            return None
        where = f"this {limits.container} container" if limits.container else "the engine's cgroup"
        return self.finding(
            "cgroup-excludes-node", Severity.INFO,
            f"binding {ctx.config.unit} to {_target_text(ctx, node)} is impossible in {where}: "
            + " and ".join(reasons) + "; cgroup-limits reports it",
            detail="The kernel clips every memory policy and CPU affinity to the cgroup's cpuset: "
            "numactl refuses a node outside it, and NUMAPolicy=, CPUAffinity= or mbind cannot "
            f"reach it, so no binding is advised here. cgroup-limits reports the cpuset as an error, "
            f"with its fix (let {'the container' if limits.container else 'the cgroup'} use node "
            f"{node}); once it does, this check gives the binding. Info here, so that one cause "
            "is counted once.",
            evidence=tuple(evidence),
        )

    def _nothing_to_bind(self, ctx: HostContext) -> Finding:
        numa = ctx.numa
        if len(numa.cpu_nodes) < 2:
            why = "one NUMA node with CPUs: nothing to bind"
        elif ctx.placement is None:
            why = "no GPU found, so no node to bind to"
        else:
            why = "the GPU's node is unknown; set `numa: <node>` in the config to bind"
        severity = Severity.WARNING if "unknown" in why else Severity.OK
        detail = ""
        if severity is Severity.WARNING and ctx.virtualization.virtual:
            detail = (f"This is a virtual machine ({ctx.virtualization.name}): its nodes map to the host's "
                      "sockets only if the hypervisor pins vNUMA, and the passed-through GPU's node is "
                      "the hypervisor's to give; ask for both (virtual-numa).")
        return self.finding("nothing-to-bind", severity, why, detail=detail)

    def _unbound(
        self, ctx: HostContext, plan: BindingPlan, state: BindingState, line: str,
        evidence: tuple[Evidence, ...],
    ) -> Finding:
        saved = ctx.saved_probe  # `strata-doctor probe --save`: measured beats the SLIT table
        measured = _measured(saved, ctx.target_node)
        cost = _remote_cost(_distance_ratio(ctx, plan), measured)
        start = _start_cpus(ctx)
        lead = "Without the plan's binding" if state.wrong else "Without a binding"
        detail = (
            f"{lead}, first-touch {_first_touch(ctx, start.cpus)} and the pool's threads run on "
            f"{start.text}, so reads from the far node cost {cost.penalty}. "
            f"{_binding_keeps(ctx, plan, start.cpus)} Use --preferred, never --membind: a bound "
            "allocation fails hard when the node fills, a preferred one spills."
        )
        if saved:
            detail += _measured_note(saved, measured, ctx.target_node)
            if measured:
                evidence += (Evidence(saved.path, f"node {measured.node}: {measured.local_gbps:.1f} GB/s "
                                      f"local, {measured.remote_gbps:.1f} GB/s remote"),)
        if state.wrong:
            detail = state.wrong.capitalize() + ". " + detail
        return self.finding(
            "wrong-node" if state.wrong else "unbound", Severity.ERROR,
            _unbound_summary(ctx, state, cost, line),
            detail=detail + _plan_notes(ctx, plan, state), evidence=evidence, fix=binding_fix_for(ctx, plan),
        )


class StartCpus(NamedTuple):
    """The CPUs the engine runs on without the plan's binding, and those words."""

    cpus: FrozenSet[int]
    text: str
    """``all 80 CPUs``, ``the 6 of 80 CPUs systemd starts every service on (5-10)``."""


def _start_cpus(ctx: HostContext) -> StartCpus:
    """Where the engine's threads run unbound: the running engine's allowed CPUs, else its
    unit's own affinity, else the CPUs a unit without one starts on (isolated CPUs and
    systemd's CPUAffinity= left out: rules.isolation.service_cpus)."""
    # a tree without cpu/online still lists its nodes' CPUs
    online = ctx.numa.online_cpus or frozenset().union(*(n.cpus for n in ctx.numa.cpu_nodes))
    proc = ctx.engine_process
    own = ctx.engine_cpu_setting
    if proc is not None and proc.cpus_allowed:
        cpus, whose = proc.cpus_allowed & online or proc.cpus_allowed, "it may use"
    elif own is not None:
        own_cpus = parse_cpulist(",".join(own.partition("=")[2].split()))  # systemd: "0 1 4-7"
        cpus, whose = own_cpus & online, f"its unit's {own} names"
    else:
        cpus, whose = service_cpus(ctx.cpu_isolation, online), "systemd starts every service on"
    if not cpus or cpus >= online:
        return StartCpus(frozenset(online), f"all {len(online):,} CPUs")
    return StartCpus(cpus, f"the {len(cpus):,} of {len(online):,} CPUs {whose} ({format_cpulist(cpus)})")


def _first_touch(ctx: HostContext, cpus: FrozenSet[int]) -> str:
    """Where first-touch puts the arena: on the nodes of the CPUs its threads run on."""
    nodes = [n.id for n in ctx.numa.cpu_nodes if n.cpus & cpus]
    if len(nodes) == len(ctx.numa.cpu_nodes):
        return "spreads the arena over every node"
    if len(nodes) == 1:
        return f"puts the arena on node {nodes[0]}"
    return f"spreads the arena over nodes {','.join(map(str, nodes))}"


def _binding_keeps(ctx: HostContext, plan: BindingPlan, start: FrozenSet[int]) -> str:
    """What binding gives the pool, against the CPUs it runs on unbound."""
    cores, planned = ctx.cpu.cores_in(plan.cpus), format_cpulist(plan.cpus)
    if len(plan.cpus) < len(start):
        return (f"Binding keeps {cores:,} of {ctx.cpu.cores_in(start):,} cores ({len(plan.cpus):,} of "
                f"{len(start):,} CPUs: {planned}) and is still faster, because every expert read is local.")
    return (f"Binding runs it on {cores:,} cores ({len(plan.cpus):,} CPUs: {planned}), where every "
            "expert read is local.")


class RemoteCost(NamedTuple):
    """What a read from the far node costs, measured or from the firmware's distances."""

    text: str
    """For the summary: ``remote memory costs 21/10 = 2.1x local``; empty when unknown."""
    penalty: str
    """For the detail: ``2.1x a local read``."""


def _measured(saved: Optional[SavedProbe], node: Optional[int]) -> Optional[Remote]:
    """The saved probe's local and remote reads of ``node``, when it is usable."""
    if saved and saved.usable and node is not None:
        return remote_reads(saved.usable, node)
    return None


def _remote_cost(ratio: Optional[Tuple[int, int]], measured: Optional[Remote]) -> RemoteCost:
    """The measured cost when the probe measured it, else the firmware's distance ratio."""
    if measured:
        slower = measured.ratio >= 1
        text = (f"remote reads {measured.ratio:.1f}x slower (" if slower else
                f"remote reads no slower ({measured.ratio:.1f}x: ")
        text += f"{measured.remote_gbps:.1f} vs {measured.local_gbps:.1f} GB/s, measured)"
        return RemoteCost(text, f"{measured.ratio:.1f}x the time of a local read (measured)")
    if ratio:
        times = f"{ratio[0] / ratio[1]:.1f}x"
        return RemoteCost(f"remote memory costs {ratio[0]}/{ratio[1]} = {times} local",
                          f"{times} a local read")
    return RemoteCost("", "the remote penalty")


def _unbound_summary(ctx: HostContext, state: BindingState, cost: RemoteCost, line: str) -> str:
    unit = ctx.config.unit
    summary = (f"{unit} is bound to the wrong node" if state.wrong else
               f"{unit} is not bound to {_target_text(ctx, ctx.target_node)}")
    return summary + (f": {cost.text}" if cost.text else "") + f"; run it under `{line}`"


def _plan_notes(ctx: HostContext, plan: BindingPlan, state: BindingState) -> str:
    """What the detail adds about the plan's own decisions, SNC, a VM and a stopped engine."""
    notes = ""
    if plan.reasons:
        notes += " " + " ".join(r[0].upper() + r[1:] + "." for r in plan.reasons)
    if len(plan.mem_nodes) > 1 and plan.policy != "preferred":
        notes += (" SNC or NPS splits the socket into these nodes; SNC off or NPS1 in the BIOS makes "
                  "the socket one node (sub-numa-clustering).")
    if ctx.virtualization.virtual:
        notes += (f" This is a virtual machine ({ctx.virtualization.name}): its nodes map to the "
                  "host's sockets only if the hypervisor pins vNUMA; ask for that (virtual-numa).")
    if state.effective is None:
        notes += f" The engine is not running and {ctx.config.unit} is not loaded, so this " \
            "rests on the unit files alone."
    return notes


def _distance_ratio(ctx: HostContext, plan: BindingPlan) -> Optional[Tuple[int, int]]:
    """(far, local) distance of the plan's CPU nodes, the worst of them; None when unknown."""
    numa = ctx.numa
    # Unbound, first touch lands on the nodes the pool's threads run on: CPU nodes
    # only. A memory-only node (CXL, HBM) is not where the spread goes.
    cpu_nodes = frozenset(n.id for n in numa.cpu_nodes)
    ratios = [r for r in (_node_ratio(numa.node(i), plan, cpu_nodes) for i in sorted(plan.cpu_nodes)) if r]
    return max(ratios) if ratios else None


def _node_ratio(
    node: Optional[NumaNode], plan: BindingPlan, cpu_nodes: FrozenSet[int],
) -> Optional[Tuple[int, int]]:
    """(farthest CPU node off the plan, local) distance of one node."""
    if node is None:
        return None
    local = node.distance_to(node.id)
    # 0 (no SLIT) and 255 (unreachable) cost nothing a ratio could say; numa-topology names them
    far = [d for other, d in node.distances
           if other not in plan.mem_nodes and other in cpu_nodes and 0 < d < UNREACHABLE]
    return (max(far), local) if local and far else None


def _target_text(ctx: HostContext, node: Optional[int]) -> str:
    """The node the engine should use, said for what it is: ``the GPU's node 1``, or, with
    ``numa: N`` in the config, ``the chosen node 0 (the GPU is on node 1)``."""
    if not ctx.config.numa.isdigit():
        return f"the GPU's node {node}"
    gpu = ctx.placement.node if ctx.placement is not None else None
    if gpu is None:
        return f"the chosen node {node}"
    if gpu == node:
        return f"the chosen node {node}, the GPU's"
    return f"the chosen node {node} (the GPU is on node {gpu})"


def _measured_note(saved: SavedProbe, measured: Optional[Remote], node: Optional[int]) -> str:
    """What the saved probe result adds to the detail, or why it was not used."""
    if measured is None:
        why = saved.unused or f"it has no cells for node {node}"
        return f" The saved probe result {saved.path} is not used: {why}; the ratio is the firmware's."
    when = saved.result.created if saved.result and saved.result.created else "undated"
    return (
        f" Measured by `strata-doctor probe` ({saved.path}, {when}): node {measured.node}'s CPUs read "
        f"{measured.local_gbps:.1f} GB/s from its own memory and {measured.remote_gbps:.1f} GB/s from "
        "the other nodes'" + ("" if measured.verified else " (placement unverified)") + ". Unbound, "
        f"first-touch leaves about {measured.nodes - 1}/{measured.nodes} of the reads remote, so "
        + (f"binding should make a memory-bound pool {measured.gain_low:.0%} to {measured.gain_high:.0%} "
           "faster (docs/probe.md)." if measured.gain_high > 0.005 else
           "binding gains nothing measurable for memory reads here (docs/probe.md).")
    )
