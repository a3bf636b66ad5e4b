"""A small, stable Python API for launchers: where should the engine run on this host?

This is what the engine's ``--numa auto|off|<node>`` option needs::

    from strata_doctor.api import plan_binding

    plan = plan_binding(arena_bytes=46.84 * 2**30, kv_bytes=3.09 * 2**30)
    argv = [*plan.numactl, "python", "serve/server.py"]

Documented in docs/api.md. Reads the host through :class:`~strata_doctor.root.Root` only,
runs no command on a captured root, and never changes anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from strata_doctor.config import DEFAULT_UNIT, EngineConfig, apply_settings
from strata_doctor.context import HostContext
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.root import Root

Size = Union[int, float, str, None]


@dataclass(frozen=True)
class NumaPlan:
    """Where the engine should run: nodes, CPUs, memory policy, and the numactl prefix."""

    node: Optional[int]
    """The single memory node, or None when the plan binds several nodes or none."""
    nodes: Tuple[int, ...]
    """Memory nodes for the arena (``--preferred``/``NUMAMask``); empty when not binding."""
    cpu_nodes: Tuple[int, ...]
    """Nodes whose CPUs run the expert pool; empty when not binding."""
    cpus: Tuple[int, ...]
    """The online CPUs of ``cpu_nodes`` the pool runs on, sorted (less the isolated ones
    when the nodes have others); empty when not binding."""
    policy: str
    """``preferred``, ``preferred-many``, ``interleave``, or ``none`` (no binding)."""
    numactl: Tuple[str, ...]
    """The launcher prefix as words, e.g. ``("numactl", "--preferred=1", "--cpunodebind=1")``,
    or ``--physcpubind=`` with ``cpus`` when the plan leaves isolated CPUs of the nodes out;
    empty for ``numa="off"``, single-node hosts and hosts without a known GPU node."""
    reasons: Tuple[str, ...]
    """One line per decision, for logs."""
    gpu: Optional[str] = None
    """The compute GPU's PCI address, when the host has one."""
    gpu_node: Optional[int] = None
    """The compute GPU's NUMA node, when known."""

    @property
    def cpulist(self) -> str:
        """``cpus`` as a kernel cpulist, e.g. ``22-43,66-87``."""
        return format_cpulist(self.cpus)

    @property
    def binds(self) -> bool:
        """Whether the plan binds the engine at all."""
        return bool(self.numactl)


class PlanError(ValueError):
    """An argument the host cannot satisfy, e.g. ``numa=7`` on a two-node host."""


def plan_binding(
    root: Union[str, os.PathLike[str]] = "/",
    arena_bytes: Size = None,
    gpu: Optional[str] = None,
    numa: Union[str, int] = "auto",
    kv_bytes: Size = None,
    unit: str = DEFAULT_UNIT,
    model: Optional[str] = None,
) -> NumaPlan:
    """Plan the engine's NUMA binding on the host at ``root`` (``/`` is this host).

    ``arena_bytes`` and ``kv_bytes`` take bytes or sizes such as ``"46.84GiB"``; when the
    arena and K/V do not fit the GPU's node and that node shares its socket with others
    (SNC/NPS), the plan spans the socket's nodes. ``gpu`` picks the compute GPU by PCI
    address. ``numa`` is ``"auto"`` (the GPU's node), ``"off"`` or a node id. Sizes not
    given come from the engine's model as for ``strata-doctor check`` (``model`` names it,
    else the engine's command line does; none: no arena, K/V 0). Raises
    :class:`PlanError` for a bad argument (an unknown GPU or node, a size that is not one).
    """
    settings = {"arena": _size(arena_bytes), "kv": _size(kv_bytes), "gpu": gpu,
                "numa": str(numa), "unit": unit, "model": model}
    from strata_doctor.config import ConfigError
    from strata_doctor.rules.gpu import GpuChoiceError

    try:
        config = apply_settings(EngineConfig(), settings, "plan_binding")
        ctx = HostContext(Root(root), config)
        return plan_for_context(ctx, choose="pass numa=<node>")
    except (ConfigError, GpuChoiceError) as exc:
        raise PlanError(str(exc)) from None


def _size(value: Size) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{round(value)}B"  # bytes: a size without a unit is refused
    return str(value)


def plan_for_context(ctx: HostContext, choose: str = "set `numa: <node>` in the config") -> NumaPlan:
    """The plan for an already opened host (what ``strata-doctor numa-plan`` and ``map``
    print). ``choose`` says how this caller picks a node where there is no target: the
    config's ``numa:`` for the commands, ``numa=`` for :func:`plan_binding`."""
    from strata_doctor.rules.binding import numactl_line

    placement = ctx.placement
    gpu = placement.gpu.address if placement else None
    gpu_node = placement.node if placement else None
    numa = ctx.config.numa
    if numa.isdigit() and ctx.numa.node(int(numa)) is None:
        known = ",".join(str(n.id) for n in ctx.numa.nodes) or "none"
        raise PlanError(f"numa={numa}: no such NUMA node on this host (nodes: {known})")
    reasons = [_target_reason(ctx, gpu, gpu_node)]
    plan = ctx.binding_plan if numa != "off" else None
    if plan is None:
        reasons.append("no binding: " + _why_none(ctx, choose))
        return NumaPlan(None, (), (), (), "none", (), tuple(reasons), gpu, gpu_node)
    reasons.extend(plan.reasons)
    reasons.append(
        f"memory policy {plan.policy}, never membind: a bound allocation fails when the node "
        "fills, a preferred one spills"
    )
    nodes = tuple(sorted(plan.mem_nodes))
    return NumaPlan(
        node=nodes[0] if len(nodes) == 1 else None,
        nodes=nodes,
        cpu_nodes=tuple(sorted(plan.cpu_nodes)),
        cpus=tuple(sorted(plan.cpus)),
        policy=plan.policy,
        numactl=tuple(numactl_line(plan).split()),
        reasons=tuple(reasons),
        gpu=gpu,
        gpu_node=gpu_node,
    )


def _target_reason(ctx: HostContext, gpu: Optional[str], gpu_node: Optional[int]) -> str:
    numa = ctx.config.numa
    if numa == "off":
        return "numa=off: the engine is not bound"
    if numa.isdigit():
        return f"numa={numa}: node {numa} was asked for"
    if gpu is None:  # no GPU at all, or not known: the words check uses; else a BMC's display
        return "no compute GPU found" if ctx.gpus else ctx.compute_gpu[1]
    if gpu_node is None:
        return f"the compute GPU {gpu} has no known NUMA node"
    source = ctx.placement.node_source if ctx.placement else "none"
    return f"the compute GPU {gpu} is on node {gpu_node} (from {source})"


def _why_none(ctx: HostContext, choose: str) -> str:
    if ctx.config.numa == "off":
        return "asked for with numa=off"
    if len(ctx.numa.cpu_nodes) < 2:
        return "this host has one NUMA node with CPUs, so there is nothing to bind"
    return f"no target node (no GPU, or its node is unknown); {choose} to choose one"
