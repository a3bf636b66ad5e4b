"""arena-fit: does the arena, with its K/V and headroom, fit the node it is bound to?"""

from __future__ import annotations

from typing import FrozenSet, Iterator, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.parse import format_bytes
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.memory import ArenaRoom, engine_held, host_room, node_room, spill_node


class ArenaFit(Check):
    """Compares the engine's pinned memory with the chosen node's memory.

    Need = arena + K/V + headroom (default 4 GiB, ``headroom:`` in the config). On the seed
    box that is 46.84 + 3.09 + 4.00 = 53.93 GiB against node 1's 63.00 GiB: it fits with
    9.07 GiB to spare. Both verdicts are one sentence: the sum, ``fits`` or ``does not
    fit``, the node's MemTotal, and what is to spare or short.
    Reads ``/sys/devices/system/node/nodeN/meminfo`` (MemTotal, MemFree) for the planned
    node(s), or ``/proc/meminfo`` on a host with one node. Memory the running engine
    already holds on the node counts as available to it. When the need exceeds MemTotal the
    excess spills to the next node with a preferred policy; the finding says how much and
    where. Skipped when no arena size is known (``--arena`` or ``arena:``).
    """

    id = "arena-fit"
    title = "Arena fits the node"
    findings = ("fits", "low-free", "does-not-fit", "unknown-memory")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.config.arena_bytes is None:
            return "no arena size (pass --arena or set arena: in the config)"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        config = ctx.config
        pinned = config.pinned_bytes or 0
        need = pinned + config.headroom_bytes
        plan = ctx.binding_plan
        room = node_room(ctx.numa, plan) or host_room(ctx.meminfo)
        nodes, total, where, evidence = room.nodes, room.total, self._where(room), self._evidence(room)
        if total is None:
            yield self.finding("unknown-memory", Severity.WARNING,
                               "cannot read the memory size of the target node")
            return
        held = engine_held(ctx.engine_process, nodes)
        available = (room.free or 0) + held
        # One sentence for both verdicts: the sum, the verdict, the node, the difference.
        arith = (
            f"arena {format_bytes(config.arena_bytes or 0)} + K/V {format_bytes(config.kv_bytes)}"
            f" + headroom {format_bytes(config.headroom_bytes)} = {format_bytes(need)}"
        )
        if need > total:
            short = need - total
            yield self.finding(
                "does-not-fit", Severity.ERROR,
                f"{arith} does not fit {where} ({format_bytes(total)}): {format_bytes(short)} short",
                detail=self._spill(ctx, nodes, short),
                evidence=evidence,
            )
            return
        yield self.finding(
            "fits", Severity.OK,
            f"{arith} fits {where} ({format_bytes(total)}): {format_bytes(total - need)} to spare",
            evidence=evidence,
        )
        if need > available:
            yield self.finding(
                "low-free", Severity.WARNING,
                f"only {format_bytes(available)} of {where} is free for the engine now, "
                f"{format_bytes(need - available)} less than it needs",
                detail=self._low_free_detail(ctx, nodes, held),
                evidence=evidence,
            )

    def _low_free_detail(self, ctx: HostContext, nodes: FrozenSet[int], held: int) -> str:
        pooled = self._pool_bytes(ctx, nodes)
        text = (
            "Free here counts MemFree plus what the running engine already holds there "
            f"({format_bytes(held)}). "
        )
        if pooled:
            text += (
                f"{format_bytes(pooled)} of the node's memory sits in the hugepage pool, which ordinary "
                "allocations cannot use (see the hugepages check). "
            )
        return text + (
            "Until other processes or the page cache release memory, a preferred binding "
            "spills the arena's tail to another node."
        )

    def _pool_bytes(self, ctx: HostContext, nodes: FrozenSet[int]) -> int:
        # Every page size counts (a 1 GiB pool too), as the hugepages check counts them.
        if nodes:
            return sum(p.size * p.total for p in ctx.node_pools if p.node in nodes)
        return ctx.meminfo.get("Hugetlb", 0)

    def _where(self, room: ArenaRoom) -> str:
        if room.host:
            return "this host"
        return ("node " if len(room.counted) == 1 else "nodes ") + room.nodes_text

    def _evidence(self, room: ArenaRoom) -> Tuple[Evidence, ...]:
        if room.host:
            return (Evidence("/proc/meminfo", f"MemTotal={format_bytes(room.total or 0)}"),)
        return tuple(
            Evidence(
                f"/sys/devices/system/node/node{n.id}/meminfo",
                f"MemTotal={format_bytes(n.memory_total or 0)} MemFree={format_bytes(n.memory_free or 0)}",
            )
            for n in room.counted
        )

    def _spill(self, ctx: HostContext, nodes: FrozenSet[int], short: int) -> str:
        if not nodes:
            return "The host does not have the memory; reduce the arena or the K/V cache."
        spill = spill_node(ctx.numa, nodes)
        if spill is None:
            return "No other node has memory to spill to; reduce the arena or the K/V cache."
        distance, node_id = spill
        return (
            f"With a preferred policy the last {format_bytes(short)} spill to node {node_id} "
            f"(distance {distance}): those experts are read remotely. Reduce the arena or the "
            "K/V cache, or bind to more nodes."
        )
