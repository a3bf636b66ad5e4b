"""The picture of one host as data: what ``strata-doctor map`` and the report draw.

:func:`build_map` gathers it from a :class:`~strata_doctor.context.HostContext` (its facts,
the binding plan and whether the engine follows it); ``doctor/output/map.py`` draws it as
text, Mermaid or JSON without reading anything else. Nothing here renders a fix's files:
what a fix would change is the planned binding, set against the binding in effect now.
"""

from __future__ import annotations

from typing import FrozenSet, List, Mapping, NamedTuple, Optional, Tuple

from strata_doctor.api import NumaPlan, plan_for_context
from strata_doctor.context import HostContext
from strata_doctor.facts.engine import EngineProcess, UnitState
from strata_doctor.facts.gpu import Gpu, normalize_address
from strata_doctor.facts.parse import format_bytes, format_cpulist, format_nodes, parse_cpulist
from strata_doctor.rules.gpu import compute_candidates, place_gpu
from strata_doctor.rules.memory import host_room

FIX_COMMAND = "strata-doctor fix --only numa-binding"


class MapNode(NamedTuple):
    """One NUMA node with its CPUs, memory and distances, and what the engine does there."""

    id: int
    """Node id (ids can be sparse)."""
    socket: Optional[int]
    """The package (socket) that owns every CPU of the node; None for a memory-only node
    or when the CPU topology is unknown."""
    cpus: FrozenSet[int]
    """Online CPUs."""
    cores: Optional[int]
    """Physical cores among them; None when the tree shows no core."""
    memory_total: Optional[int]
    """MemTotal in bytes; None when the node has no meminfo."""
    memory_free: Optional[int]
    """MemFree in bytes; None when the node has no meminfo."""
    memory_only: bool
    """Memory and no CPUs (CXL, HBM, GPU memory)."""
    distances: Tuple[Tuple[int, Optional[int]], ...]
    """(other node id, distance) for every node, in node order; None when not reported."""
    engine_cpus: FrozenSet[int]
    """CPUs of this node the engine may run on now (empty when it is not running or not
    allowed here)."""
    engine_bytes: Optional[int]
    """Bytes of the running engine on this node (numa_maps); None when it is not running."""
    arena: bool
    """The plan puts the arena here (``--preferred`` / ``NUMAMask``)."""
    pool: bool
    """The plan runs the expert pool on this node's CPUs (``--cpunodebind``)."""


class MapGpu(NamedTuple):
    """One display-class PCI function."""

    address: str
    """PCI address, ``0000:84:00.0``."""
    model: str
    """Marketing name from nvidia-smi, else the vendor and PCI ids."""
    ids: str
    """``vendor:device``."""
    node: Optional[int]
    """The node it is placed on; None when unknown."""
    node_source: str
    """``numa_node``, ``local_cpulist``, ``single-node`` or ``none``."""
    link: Optional[str]
    """PCIe link now, and its maximum when lower (``2.5 GT/s x16 (max 8.0 GT/s x16)``)."""
    compute: bool
    """Whether the engine computes on it."""
    boot_display: bool
    """The firmware's boot display (``boot_vga``)."""
    management: Optional[str] = None
    """What it is when it is a BMC's or a hypervisor's display, or an integrated GPU, set
    aside as no compute GPU (:func:`~strata_doctor.rules.gpu.compute_candidates`, as gpu-placement decides):
    ``a BMC's ASPEED VGA``; None for a GPU that may compute, or one ``--gpu`` names."""

    @property
    def may_compute(self) -> bool:
        """Whether it counts as a GPU: the compute GPU, or any not set aside as a display."""
        return self.compute or self.management is None


class EngineNow(NamedTuple):
    """Where the engine runs now, from its process, its loaded unit, or neither."""

    unit: str
    """The engine unit."""
    state: str
    """``running (pid N)``, or ``not running: `` and the unit's state (``unit inactive/dead``)."""
    pid: Optional[int]
    """The running engine's PID."""
    source: str
    """Where ``cpus`` and ``memory`` come from: ``/proc/PID``, ``systemctl show UNIT`` or ``none``."""
    cpus: Optional[FrozenSet[int]]
    """CPUs it may run on; None when nothing limits it or nothing is known."""
    memory: str
    """Its memory: the policy and bytes per node, or the unit's NUMAPolicy, or ``unknown``."""
    memory_by_node: Tuple[Tuple[int, int], ...]
    """(node, bytes) of the running engine."""
    follows_plan: Optional[bool]
    """The running engine or loaded unit follows the plan; None when unknown or no plan."""
    configured: Optional[bool]
    """The unit files on disk bind it as planned; None without a plan."""


class ArenaPlace(NamedTuple):
    """Where the arena would sit and what is left there (the arena-fit check's numbers)."""

    arena_bytes: int
    """The pinned expert arena."""
    kv_bytes: int
    """The pinned K/V cache."""
    pinned_bytes: int
    """Arena plus K/V."""
    headroom_bytes: int
    """Memory kept free beside them."""
    nodes: str
    """The planned node(s) as a comma list, or ``all`` without a plan."""
    total_bytes: Optional[int]
    """MemTotal of those nodes (or of the host); None when the tree does not show it."""
    spare_bytes: Optional[int]
    """What is left once arena, K/V and headroom are taken; negative when it does not fit;
    None with ``total_bytes``."""


class FixChange(NamedTuple):
    """One thing a binding fix changes: what it is now, and after."""

    what: str
    """``CPUs`` or ``memory``."""
    now: str
    """As it is."""
    after: str
    """As the fix leaves it (at the engine's next start)."""


class HostMap(NamedTuple):
    """Everything ``strata-doctor map`` draws."""

    nodes: Tuple[MapNode, ...]
    """NUMA nodes in id order; empty when the kernel exposes none."""
    sockets: int
    """Physical packages (0 when unknown)."""
    cpus: int
    """Online CPUs."""
    memory_total: Optional[int]
    """All RAM (MemTotal of /proc/meminfo, else the nodes' sum), as arena-fit counts it;
    None when the tree shows neither whole."""
    gpus: Tuple[MapGpu, ...]
    """Every GPU, the compute GPU first."""
    engine: EngineNow
    """Where the engine runs now."""
    plan: NumaPlan
    """Where it should run (``strata-doctor numa-plan``)."""
    arena: Optional[ArenaPlace]
    """Where the arena would sit; None without an arena size."""
    fix: str
    """One line: what the binding fix does here, or why nothing."""
    changes: Tuple[FixChange, ...]
    """What the binding fix changes; empty when it changes nothing."""
    pci_functions: int = 0
    """PCI functions the tree lists; 0 means its GPUs are unknown, not absent."""
    arena_hint: str = "set arena: in the config, or --arena"
    """What :attr:`arena` None asks for, or why the engine's model gave no arena."""


def build_map(ctx: HostContext) -> HostMap:
    """The picture of the host in ``ctx``. GPUs are named as nvidia-smi names them
    (:func:`gpu_models`), others by vendor and PCI ids.

    Raises :class:`~strata_doctor.api.PlanError` for a ``numa:`` node the host lacks."""
    plan = plan_for_context(ctx)
    numa, cpu = ctx.numa, ctx.cpu
    state = ctx.binding_state
    nodes = map_nodes(ctx, plan)
    online = numa.online_cpus or frozenset().union(*(n.cpus for n in numa.nodes))
    total = host_room(ctx.meminfo, numa).total  # the size arena-fit counts, never a partial sum
    engine = engine_now(ctx)
    engine = engine._replace(
        follows_plan=state.effective if state else None,
        configured=state.configured if state else None,
    )
    fix, changes = fix_changes(ctx, plan, engine)
    return HostMap(
        nodes=tuple(nodes),
        sockets=cpu.sockets,
        cpus=len(online),
        memory_total=total,
        gpus=gpu_list(ctx, gpu_models(ctx)),
        engine=engine,
        plan=plan,
        arena=arena_place(ctx),
        fix=fix,
        changes=changes,
        pci_functions=len(ctx.pci_addresses),
        arena_hint=ctx.config.arena_hint("set arena: in the config, or --arena"),
    )


def map_nodes(ctx: HostContext, plan: NumaPlan) -> List[MapNode]:
    """Every NUMA node with its socket, memory, distances, the engine there now and the plan."""
    numa, cpu = ctx.numa, ctx.cpu
    proc = ctx.engine_process
    by_node = dict(proc.memory_by_node) if proc else {}
    ids = [n.id for n in numa.nodes]
    nodes = []
    for node in numa.nodes:
        packages = cpu.packages_in(node.all_cpus)
        nodes.append(MapNode(
            id=node.id,
            socket=next(iter(packages)) if len(packages) == 1 else None,
            cpus=node.cpus,
            cores=cpu.core_count(node.cpus) if node.cpus else 0,
            memory_total=node.memory_total,
            memory_free=node.memory_free,
            memory_only=node.memory_only,
            distances=tuple((other, node.distance_to(other)) for other in ids),
            engine_cpus=(proc.cpus_allowed & node.cpus) if proc else frozenset(),
            engine_bytes=by_node.get(node.id, 0) if proc else None,
            arena=node.id in plan.nodes,
            pool=node.id in plan.cpu_nodes,
        ))
    return nodes


def gpu_models(ctx: HostContext) -> Mapping[str, str]:
    """GPUs' names (``ctx.gpu_names``): nvidia-smi's GPU query or rocm-smi's product name
    (replayed under a captured root), asked only when the host has such a GPU, else the
    model table's."""
    return ctx.gpu_names


def gpu_list(ctx: HostContext, models: Mapping[str, str]) -> Tuple[MapGpu, ...]:
    """Every GPU, the compute GPU first, then by address."""
    placement = ctx.placement
    compute = placement.gpu.address if placement else None
    known = {normalize_address(address): name for address, name in models.items()}
    aside = {g.address for g in compute_candidates(ctx.gpus).left_out}
    gpus = []
    for gpu in ctx.gpus:
        node, source, _ = place_gpu(gpu, ctx.numa)
        gpus.append(MapGpu(
            address=gpu.address,
            model=printable(known.get(normalize_address(gpu.address)) or _pci_name(gpu)),
            ids=gpu.ids,
            node=node,
            node_source=source,
            link=gpu.link.text,  # facts.PcieLink.text: the one way a link is written
            compute=gpu.address == compute,
            boot_display=bool(gpu.boot_vga),
            management=gpu.set_aside if gpu.address in aside and gpu.address != compute else None,
        ))
    gpus.sort(key=lambda g: (not g.compute, g.address))
    return tuple(gpus)


def _pci_name(gpu: Gpu) -> str:
    if gpu.vendor is None:
        return "unknown model (no PCI ids)"
    return f"{gpu.vendor_name} {gpu.ids}"


def printable(text: str) -> str:
    """Host text without control characters (a captured nvidia-smi output is host input)."""
    return "".join(char if char.isprintable() else "?" for char in text)


def engine_now(ctx: HostContext) -> EngineNow:
    """The engine's binding in effect: the running process, else the loaded unit."""
    unit = ctx.unit
    name = ctx.config.unit
    proc = ctx.engine_process
    if proc is not None:
        return EngineNow(
            unit=name, state=f"running (pid {proc.pid}" + (")" if unit.main_pid else f", outside {name})"),
            pid=proc.pid, source=f"/proc/{proc.pid}", cpus=proc.cpus_allowed or None,
            memory=_process_memory(ctx, proc),
            memory_by_node=proc.memory_by_node, follows_plan=None, configured=None,
        )
    state = f"not running: {_unit_state(unit)}"
    if unit.loaded:
        policy = unit.get("NUMAPolicy")
        mask = unit.get("NUMAMask")
        cpus = parse_cpulist(",".join((unit.get("CPUAffinity") or unit.get("AllowedCPUs")).split()))
        bound = policy not in ("", "n/a", "default")
        memory = f"NUMAPolicy={policy} NUMAMask={mask}" if bound else "by first touch, no NUMAPolicy"
        return EngineNow(
            unit=name, state=state, pid=None, source=f"systemctl show {name}",
            cpus=cpus or None, memory=memory, memory_by_node=(), follows_plan=None, configured=None,
        )
    return EngineNow(unit=name, state=state, pid=None, source="none", cpus=None,
                     memory="unknown", memory_by_node=(), follows_plan=None, configured=None)


def _unit_state(unit: UnitState) -> str:
    """The engine unit's state as the map says it (``unit inactive/dead``)."""
    if unit.loaded:
        return f"unit {unit.get('ActiveState') or '?'}/{unit.get('SubState') or '?'}"
    if unit.available:
        return f"unit LoadState={unit.get('LoadState') or '?'}"
    return unit.reason.rstrip(".") or "unit state unknown"


def _process_memory(ctx: HostContext, proc: EngineProcess) -> str:
    """The running engine's memory: its main policy and bytes per node, or why unknown."""
    policies = sorted(proc.policies, key=lambda pair: (-pair[1], pair[0]))
    spread = ", ".join(f"node {n} {format_bytes(size)}" for n, size in proc.memory_by_node if size)
    unread = ctx.why_unread(f"/proc/{proc.pid}/numa_maps")
    if unread:
        return f"unknown (numa_maps: {unread})"
    if policies and spread:
        return f"policy {policies[0][0]}: {spread}"
    return "no pages yet"


def arena_place(ctx: HostContext) -> Optional[ArenaPlace]:
    """The arena-fit numbers: the planned node(s), their memory and what is left; None only
    without an arena size. A memory size the tree does not show leaves total and spare None."""
    config = ctx.config
    pinned = config.pinned_bytes
    if pinned is None:
        return None
    found = ctx.arena_headroom
    arena = pinned - config.kv_bytes
    if found is None:  # an arena, but no size to set it against
        plan = ctx.binding_plan if ctx.numa.nodes else None
        nodes = plan.nodes_text if plan is not None else "all"
        return ArenaPlace(arena, config.kv_bytes, pinned, config.headroom_bytes, nodes, None, None)
    nodes, spare = found
    need = pinned + config.headroom_bytes
    return ArenaPlace(arena, config.kv_bytes, pinned, config.headroom_bytes, nodes, spare + need, spare)


def fix_changes(ctx: HostContext, plan: NumaPlan, engine: EngineNow) -> Tuple[str, Tuple[FixChange, ...]]:
    """What ``fix`` does to the binding here, as one line and as now/after pairs."""
    if not plan.binds:
        return "nothing to bind: " + plan.reasons[-1].replace("no binding: ", ""), ()
    nodes = format_nodes(plan.nodes)
    if engine.follows_plan:
        return f"nothing to change: {engine.unit} already follows the plan", ()
    if engine.configured:
        return (f"nothing to write: the unit files already bind {engine.unit} to {nodes}; it "
                f"takes effect after `systemctl daemon-reload` and a restart of {engine.unit}"), ()
    everywhere = format_cpulist(ctx.numa.online_cpus) if ctx.numa.online_cpus else "every CPU"
    if engine.source == "none":
        cpus_now, memory_now = "not running", "not running"
    else:
        cpus_now = format_cpulist(engine.cpus) if engine.cpus else f"{everywhere} (no limit)"
        memory_now = engine.memory
    changes = (
        FixChange("CPUs", cpus_now, plan.cpulist),
        FixChange("memory", memory_now, f"policy {plan.policy}, {nodes}"),
    )
    return f"`{FIX_COMMAND}` binds {engine.unit} to {nodes} at its next start", changes
