"""cgroup-limits: can the engine's cgroup (or container) hold the arena on the GPU's node?"""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.cgroup import EngineLimits, Limit, NodeSet
from strata_doctor.facts.parse import format_bytes, format_cpulist, format_nodes
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity


class CgroupLimits(Check):
    """Checks the engine's cgroup and container limits against the arena and the GPU's node.

    The engine's cgroup is its unit's ``ControlGroup`` (or ``/proc/PID/cgroup`` of the
    running engine); in a container it is the container's own cgroup, the root of its
    namespace. From that cgroup up to the root, the tightest ``memory.max`` and
    ``memory.high`` below arena + K/V + headroom are errors: the kernel reclaims (or
    OOM-kills) the engine at the limit, whatever the node has free. ``memory.swap.max``
    is stated. ``cpuset.mems.effective`` or ``cpuset.cpus.effective`` that exclude the GPU's
    node are errors: no NUMA policy and no CPU affinity can reach a node outside the
    cpuset. In a container without CAP_SYS_NICE (``CapEff`` bit 23), Docker's and
    Podman's default seccomp profiles refuse ``mbind``/``set_mempolicy``/``move_pages``
    with EPERM, so the engine's memory policy is silently lost. The runtime is named
    when it is evident (``/.dockerenv``, ``/run/.containerenv``, ``container=`` in PID
    1's environment). A unit that does not run is judged by its files (``MemoryMax=``,
    ``MemoryHigh=``, ``AllowedMemoryNodes=``, ``AllowedCPUs=``) and its slices' cgroups.
    """

    id = "cgroup-limits"
    title = "Cgroup and container limits"
    findings = ("memory-max", "memory-high", "cpuset-mems", "cpuset-cpus", "no-cap-sys-nice", "ok")

    def applies(self, ctx: HostContext) -> Optional[str]:
        limits = ctx.engine_limits
        if limits.cgroup is None:
            return (f"no cgroup to read: {ctx.config.unit} is not loaded, the engine does not run, "
                    "and this is not a container")
        cgroup_settings = [k for k, _, _ in limits.unit_settings if k != "LimitMEMLOCK"]
        if not limits.files_read and (limits.running or not cgroup_settings):
            folder = "/sys/fs/cgroup" + (limits.cgroup if limits.cgroup != "/" else "")
            return (f"no memory or cpuset file of the engine's cgroup to read under {folder} "
                    "(a capture without them, or no memory controller)")
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        limits = ctx.engine_limits
        where = self._where(ctx, limits)
        need = self._need(ctx)
        problems = list(self._problems(ctx, limits, need, where))
        yield from problems
        if not problems:
            yield self._ok(limits, need, where)

    def _problems(self, ctx: HostContext, limits: EngineLimits, need: Optional[Tuple[int, str]],
                  where: str) -> Iterator[Finding]:
        for limit, key, name in _short(limits, need[0] if need else None):
            assert need is not None
            yield self._memory(ctx, limits, limit, key, name, need, where)
        node = ctx.target_node
        if node is not None and len(ctx.numa.nodes) > 1:
            yield from self._cpuset(ctx, limits, node, where)
        nice = self._cap_sys_nice(ctx, limits, where)
        if nice is not None:
            yield nice

    def _ok(self, limits: EngineLimits, need: Optional[Tuple[int, str]], where: str) -> Finding:
        parts = [f"{name} {self._text(limit)}" for name, limit in (
            ("memory.max", limits.memory_max), ("memory.high", limits.memory_high),
            ("memory.swap.max", limits.swap_max))]
        if limits.mems is not None:
            parts.append(f"cpuset.mems {limits.mems.text or 'all'}")
        fits = f"; arena + K/V + headroom ({format_bytes(need[0])}) fits" if need else ""
        return self.finding("ok", Severity.OK, f"{where}: " + ", ".join(parts) + fits,
                            evidence=self._evidence(limits))

    # -- the findings -------------------------------------------------------------------
    def _memory(self, ctx: HostContext, limits: EngineLimits, limit: Limit, key: str, name: str,
                need: Tuple[int, str], where: str) -> Finding:
        assert limit.value is not None
        short = need[0] - limit.value
        file_name = "memory.max" if name == "memory-max" else "memory.high"
        what = ("the kernel reclaims the engine's pages at the limit and OOM-kills it when reclaim "
                "cannot keep up" if name == "memory-max" else
                "above memory.high the kernel throttles the engine and reclaims its pages into swap "
                "or the page cache, so loading the arena stalls")
        return self.finding(
            name, Severity.ERROR,
            f"{where}: {file_name} is {format_bytes(limit.value)} ({limit.text}), "
            f"{format_bytes(short)} short of {need[1]} = {format_bytes(need[0])}",
            detail=f"Whatever the node has free, {what}.",
            evidence=(Evidence(limit.source, limit.text),),
            fix=self._raise_memory(ctx, limits, key, need[0]),
        )

    def _cpuset(self, ctx: HostContext, limits: EngineLimits, node: int, where: str) -> Iterator[Finding]:
        numa_node = ctx.numa.node(node)
        node_cpus = numa_node.cpus if numa_node is not None else frozenset()
        gpu = "the GPU's node" if ctx.config.numa == "auto" else "the configured node"
        mems, cpus = limits.fences(node, node_cpus)
        if mems is not None:
            yield self.finding(
                "cpuset-mems", Severity.ERROR,
                f"{where}: cpuset.mems is {mems.text} and excludes node {node}, {gpu}: no "
                "NUMA policy can place the arena there",
                detail="The kernel clips every memory policy (NUMAPolicy=, numactl, mbind) to the "
                f"cgroup's cpuset, so the arena lands on {format_nodes(format_cpulist(mems.ids))} "
                "and every expert read crosses the socket link.",
                evidence=(Evidence(mems.source, mems.text),),
                fix=self._cpuset_fix(ctx, limits, node),
            )
        if cpus is not None:
            yield self.finding(
                "cpuset-cpus", Severity.ERROR,
                f"{where}: cpuset.cpus is {cpus.text} and holds none of node {node}'s CPUs "
                f"({format_cpulist(node_cpus)}), {gpu}: no CPU affinity can run the pool there",
                evidence=(Evidence(cpus.source, cpus.text),),
                fix=self._cpuset_fix(ctx, limits, node),
            )

    def _cap_sys_nice(self, ctx: HostContext, limits: EngineLimits, where: str) -> Optional[Finding]:
        if not limits.container or limits.has_cap_sys_nice is not False or len(ctx.numa.nodes) < 2:
            return None
        runtime = limits.container
        flag = "--cap-add=sys_nice" if runtime == "podman" else "--cap-add SYS_NICE"
        return self.finding(
            "no-cap-sys-nice", Severity.WARNING,
            f"{where}: the container lacks CAP_SYS_NICE (CapEff {limits.cap_eff or 0:016x}, bit 23 clear): "
            "mbind and set_mempolicy fail with EPERM, so the engine's memory policy is silently lost",
            detail=f"{runtime.capitalize()}'s default seccomp profile allows mbind, set_mempolicy and "
            "move_pages only to a container that has CAP_SYS_NICE; the engine then allocates wherever "
            "it faults.",
            evidence=(Evidence(limits.cap_source, f"CapEff {limits.cap_eff or 0:016x}"),
                      Evidence(limits.container_evidence, runtime)),
            fix=Fix(summary=f"start the container with {flag}",
                    manual=(ManualStep(f"Recreate the container with `{runtime} run {flag} ...` "
                                       "(or `cap_add: [SYS_NICE]` in compose)."),),
                    takes_effect="restart"),
        )

    # -- fixes (advice: a limit someone set on purpose is not raised behind their back) --
    def _raise_memory(self, ctx: HostContext, limits: EngineLimits, key: str, need: int) -> Fix:
        gib = -(-need // 1024**3)
        if limits.container:
            option = "--memory" if key == "MemoryMax" else "--memory-reservation"
            return Fix(summary=f"give the container at least {gib}G of memory",
                       manual=(ManualStep(f"Recreate the container with `{limits.container} run "
                                          f"{option}={gib}g ...` (or lower `arena:`/`kv:`)."),),
                       takes_effect="restart")
        unit = ctx.config.unit
        return Fix(summary=f"raise {key}= of {unit} to at least {gib}G",
                   manual=(ManualStep(f"Run `systemctl set-property {unit} {key}={gib}G` (or "
                                      f"`{key}=infinity`), or remove the limit from the file that "
                                      "sets it; a slice above the unit may need the same."),),
                   takes_effect="now")

    def _cpuset_fix(self, ctx: HostContext, limits: EngineLimits, node: int) -> Fix:
        numa_node = ctx.numa.node(node)
        cpus = format_cpulist(numa_node.cpus) if numa_node is not None else ""
        if limits.container:
            return Fix(summary=f"let the container use node {node}",
                       manual=(ManualStep(f"Recreate the container with `{limits.container} run "
                                          f"--cpuset-mems={node} --cpuset-cpus={cpus} ...`."),),
                       takes_effect="restart")
        unit = ctx.config.unit
        return Fix(summary=f"let {unit} use node {node}",
                   manual=(ManualStep(f"Run `systemctl set-property {unit} AllowedMemoryNodes={node} "
                                      f"AllowedCPUs={cpus}` and widen the slice above it if it "
                                      "restricts them too."),),
                   takes_effect="now")

    # -- helpers ------------------------------------------------------------------------
    def _need(self, ctx: HostContext) -> Optional[Tuple[int, str]]:
        c = ctx.config
        if c.pinned_bytes is None:
            return None
        return c.pinned_bytes + c.headroom_bytes, "arena + K/V + headroom"

    def _where(self, ctx: HostContext, limits: EngineLimits) -> str:
        if limits.container:
            return f"{limits.container} container ({limits.container_evidence})"
        state = "" if limits.running else " (not running: its files and its slices' cgroups)"
        unit = ctx.config.unit if limits.cgroup_source.startswith(("ControlGroup", "Slice=")) else \
            f"the engine (pid {ctx.engine_pid})"
        return f"{unit} in {limits.cgroup}{state}"

    def _text(self, limit: Optional[Limit]) -> str:
        if limit is None or limit.value is None:
            return "max"
        return format_bytes(limit.value)

    def _evidence(self, limits: EngineLimits) -> Tuple[Evidence, ...]:
        found: List[Evidence] = [Evidence(limits.cgroup_source or "cgroup", limits.cgroup or "")]
        for limit in (limits.memory_max, limits.memory_high, limits.swap_max):
            if limit is not None:
                found.append(Evidence(limit.source, limit.text))
        for nodes in (limits.mems, limits.cpus):
            if isinstance(nodes, NodeSet):
                found.append(Evidence(nodes.source, nodes.text))
        if limits.container:
            found.append(Evidence(limits.container_evidence, limits.container))
        return tuple(found)


def _short(limits: EngineLimits, need: Optional[int]) -> List[Tuple[Limit, str, str]]:
    """(limit, unit key, finding) of memory.max and memory.high where they hold less than ``need``."""
    if need is None:
        return []
    return [(limit, key, name) for limit, key, name in (
        (limits.memory_max, "MemoryMax", "memory-max"), (limits.memory_high, "MemoryHigh", "memory-high"))
        if limit is not None and limit.value is not None and limit.value < need]
