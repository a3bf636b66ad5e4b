"""Fix builders: turn a check's decision into :class:`~strata_doctor.model.Fix` data.

Checks call these; only the applier writes anything. The builders are version-aware:
``NUMAPolicy=`` needs systemd 243+, ``AllowedCPUs=`` needs 244+ and cgroup v2; an older
systemd gets the numactl wrapper instead, and the fix's summary says why. Every CPU a
fix lists is online: systemd silently drops a CPU list that names an offline CPU.
"""

from typing import TYPE_CHECKING, FrozenSet, List, Optional, Sequence, Tuple

from strata_doctor.config import DEFAULT_UNIT
from strata_doctor.facts.engine import ALLOWED_CPUS_SINCE, NUMA_POLICY_SINCE, SystemdSupport
from strata_doctor.facts.parse import format_cpulist, format_nodes
from strata_doctor.facts.units import RESERVED_UNITS
from strata_doctor.model import FileChange, Fix, ManualStep, RuntimeAction, context_pairs
from strata_doctor.rules.binding import BindingPlan, node_list

if TYPE_CHECKING:
    from strata_doctor.context import HostContext

SYSTEMD_DIR = "/etc/systemd/system"
NUMA_DROPIN = "60-strata-doctor-numa.conf"
SLICE_DROPIN = "60-strata-doctor-slice.conf"
RESERVE_DROPIN = "60-strata-doctor-reserve.conf"
PREFLIGHT_DROPIN = "60-strata-doctor-preflight.conf"
ENGINE_SLICE = "strata.slice"
WRAPPER = "/usr/local/bin/strata-numa"
PREFLIGHT_ARGS = "check --quiet --fail-on error"


def exec_word(word: str) -> str:
    """One word of an ``ExecStartPre=`` line as systemd reads it back: ``%`` and ``$`` doubled
    (systemd expands both), quoted when it holds a space, a quote or a backslash."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and not any(c.isspace() or c in "\"'\\" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_policy(policy: str, mem_nodes: FrozenSet[int]) -> str:
    """The ``NUMAPolicy=`` for a plan's policy.

    systemd has no preferred-many, and MPOL_PREFERRED keeps only the first node of a
    mask, so a binding over several nodes interleaves.
    """
    if policy == "preferred" and len(mem_nodes) == 1:
        return "preferred"
    return "interleave"


def wrapper_file(
    mem_nodes: FrozenSet[int], cpu_nodes: FrozenSet[int], policy: str,
    physcpus: FrozenSet[int] = frozenset(),
) -> FileChange:
    """``/usr/local/bin/strata-numa``: ``exec numactl --preferred=N --cpunodebind=N -- "$@"``;
    ``--physcpubind=`` with ``physcpus`` instead, when the plan leaves isolated CPUs of the
    nodes out (numactl would otherwise place the engine on any of the node's CPUs)."""
    mem_option = policy if policy in ("preferred", "preferred-many", "interleave") else "preferred"
    if mem_option == "preferred" and len(mem_nodes) > 1:
        mem_option = "interleave"  # numactl --preferred takes one node
    return FileChange(
        path=WRAPPER,
        template="strata-numa.j2",
        context=context_pairs(
            path=WRAPPER, mem_option=mem_option, mem_nodes=node_list(mem_nodes),
            cpu_nodes=node_list(cpu_nodes), physcpus=format_cpulist(physcpus),
        ),
        mode=0o755,
    )


def restart_action(unit: str) -> RuntimeAction:
    """The restart every unit change needs. The plan takes it once per unit with ``--restart``,
    and otherwise lists one "Restart UNIT when convenient" step for all the fixes that need it."""
    return RuntimeAction("restart-unit", unit)


def binding_fix(
    unit: str, mem_nodes: FrozenSet[int], cpu_nodes: FrozenSet[int], cpus: FrozenSet[int],
    policy: str, support: Optional[SystemdSupport] = None, exec_start: Optional[str] = None,
    pin_cpus: bool = False,
) -> Fix:
    """Bind the engine to the given nodes: a unit drop-in and the numactl wrapper.

    Without ``support`` the host's systemd is taken to be 243+ on cgroup v1 (no
    ``AllowedCPUs=``); :func:`binding_fix_for` reads the real support from the host.
    ``pin_cpus``: the wrapper binds to ``cpus`` rather than to the nodes (the plan left
    isolated CPUs of the nodes out).
    """
    support = support or SystemdSupport(NUMA_POLICY_SINCE, False, True, "assumed")
    wrapper = wrapper_file(mem_nodes, cpu_nodes, policy, cpus if pin_cpus else frozenset())
    cpu_text = format_cpulist(cpus)
    nodes = node_list(mem_nodes)
    restart = restart_action(unit)
    reload = RuntimeAction("daemon-reload", "systemd")
    if not support.present:
        return Fix(
            summary=f"start the engine under {WRAPPER} (numactl, {format_nodes(nodes)}): this host has no "
            "systemd to bind a unit",
            files=(wrapper,),
            manual=(ManualStep(f"Start the engine as `{WRAPPER} <engine command>`."),),
        )
    if support.numa_policy:
        numa_policy = systemd_policy(policy, mem_nodes)
        dropin = FileChange(
            path=f"{SYSTEMD_DIR}/{unit}.d/{NUMA_DROPIN}",
            template="numa-dropin.conf.j2",
            context=context_pairs(
                unit=unit, numa_policy=numa_policy, numa_mask=nodes, cpus=cpu_text,
                allowed_cpus=support.allowed_cpus,
            ),
        )
        affinity = (f"CPUAffinity, AllowedCPUs={cpu_text}" if support.allowed_cpus else
                    f"CPUAffinity={cpu_text} (no AllowedCPUs=: it needs systemd 244+ and cgroup v2)")
        return Fix(
            summary=f"bind {unit} to {format_nodes(nodes)}: NUMAPolicy={numa_policy} NUMAMask={nodes}, "
            f"{affinity} [{support.described}]; {WRAPPER} for engines started by hand",
            files=(dropin, wrapper),
            actions=(reload, restart),
        )
    return _wrapper_binding(unit, nodes, cpu_text, support, wrapper, exec_start, restart, reload)


def _wrapper_binding(
    unit: str, nodes: str, cpu_text: str, support: SystemdSupport, wrapper: FileChange,
    exec_start: Optional[str], restart: RuntimeAction, reload: RuntimeAction,
) -> Fix:
    why = f"NUMAPolicy= needs systemd {NUMA_POLICY_SINCE}+ and this host has {support.described}"
    summary = f"bind {unit} to {format_nodes(nodes)} through {WRAPPER}: {why}"
    if exec_start is None:
        return Fix(
            summary=summary,
            files=(wrapper,),
            manual=(ManualStep(f"Prefix ExecStart= of {unit} with {WRAPPER} (its unit file was not "
                               "found under the root), then restart it."),),
        )
    command = exec_start.lstrip("@-:+!")
    # ExecStart's prefix characters (ignore failure, full privileges...) stay in front.
    flags = exec_start[: len(exec_start) - len(command)]
    dropin = FileChange(
        path=f"{SYSTEMD_DIR}/{unit}.d/{NUMA_DROPIN}",
        template="numactl-exec-dropin.conf.j2",
        context=context_pairs(unit=unit, why=why, cpus=cpu_text, wrapper=flags + WRAPPER,
                              exec_start=command),
    )
    return Fix(summary=summary, files=(dropin, wrapper), actions=(reload, restart))


def binding_fix_for(ctx: "HostContext", plan: BindingPlan) -> Fix:
    """:func:`binding_fix` with this host's systemd support, online CPUs and ExecStart."""
    support = ctx.systemd
    cpus = plan.cpus & ctx.numa.online_cpus if ctx.numa.online_cpus else plan.cpus
    exec_start = None if support.numa_policy else ctx.engine_exec_start
    return binding_fix(ctx.config.unit, plan.mem_nodes, plan.cpu_nodes, cpus, plan.policy, support,
                       exec_start, plan.pins_cpus)


def reserve_node_fix(ctx: "HostContext", plan: BindingPlan, finding: str) -> Tuple[Optional[Fix], str]:
    """``--reserve-node``: the engine in ``strata.slice`` on its node, everyone else elsewhere.

    cgroup v2 cpusets nest, so fencing ``system.slice`` would also fence an engine that
    lives there: the engine gets its own slice first. Returns (None, why) when it cannot.
    """
    support = ctx.systemd
    if not support.allowed_cpus:
        return None, f"--reserve-node needs AllowedCPUs= (systemd {ALLOWED_CPUS_SINCE}+ on cgroup v2); " \
            f"this host has {support.described}"
    online = ctx.numa.online_cpus
    reserved = plan.cpus & online if online else plan.cpus
    others = (online or frozenset().union(*(n.cpus for n in ctx.numa.nodes))) - reserved
    if not reserved or not others:
        return None, "--reserve-node needs CPUs on the engine's node and on at least one other node"
    unit = ctx.config.unit
    reserved_text, others_text = format_cpulist(reserved), format_cpulist(others)
    files: List[FileChange] = [
        FileChange(f"{SYSTEMD_DIR}/{ENGINE_SLICE}", "strata.slice.j2",
                   context_pairs(unit=unit, nodes=plan.nodes_text, cpus=reserved_text, finding=finding)),
        FileChange(f"{SYSTEMD_DIR}/{unit}.d/{SLICE_DROPIN}", "slice-dropin.conf.j2",
                   context_pairs(unit=unit, finding=finding)),
    ]
    for name, section in RESERVED_UNITS:
        files.append(FileChange(
            f"{SYSTEMD_DIR}/{name}.d/{RESERVE_DROPIN}", "reserve-dropin.conf.j2",
            context_pairs(unit=name, section=section, cpus=others_text, reserved=reserved_text,
                          finding=finding),
        ))
    total = len(reserved) + len(others)
    summary = (
        f"reserve {format_nodes(plan.nodes_text)} for {unit}: {ENGINE_SLICE} gets CPUs {reserved_text}; "
        f"system.slice, user.slice and init.scope keep {len(others):,} of {total:,} CPUs ({others_text}). "
        f"Cost: every other service and login session shares those {len(others):,} CPUs, and "
        f"{len(reserved):,} CPUs idle whenever the engine is stopped"
    )
    return Fix(
        summary=summary,
        files=tuple(files),
        actions=(RuntimeAction("daemon-reload", "systemd"), restart_action(unit)),
        takes_effect="restart",
    ), ""


def preflight_fix(unit: str, finding: str, script: str, check_args: Sequence[str] = ()) -> Fix:
    """``--preflight``: the engine unit refuses to start while the check finds an error.

    ``script`` is the absolute path of the console script: systemd searches no virtual
    environment, so a bare ``strata-doctor`` would keep the unit from starting.
    ``check_args`` (the config file, the setting flags) make the start check the sizes the
    operator saw.
    """
    command = f"{exec_word(script)} {PREFLIGHT_ARGS}"
    if unit != DEFAULT_UNIT:
        command += f" --unit {unit}"
    if check_args:
        command += " " + " ".join(exec_word(word) for word in check_args)
    return Fix(
        summary=f"run `{command}` before every start of {unit}",
        files=(FileChange(f"{SYSTEMD_DIR}/{unit}.d/{PREFLIGHT_DROPIN}", "preflight-dropin.conf.j2",
                          context_pairs(unit=unit, command=command, finding=finding,
                                        given=" ".join(check_args))),),
        actions=(RuntimeAction("daemon-reload", "systemd"), restart_action(unit)),
        takes_effect="restart",
    )
