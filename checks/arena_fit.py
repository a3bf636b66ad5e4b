"""arena-fit: does the arena, with its K/V and headroom, fit the node it is bound to?"""

from __future__ import annotations

from typing import FrozenSet, Iterator, List, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.numa import NumaNode
from strata_doctor.facts.parse import format_bytes
from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.rules.memory import ArenaRoom, engine_held, host_room, node_room, spill_node

NODE_DIR = "/sys/devices/system/node"


class ArenaFit(Check):
    """Compares the engine's pinned memory with the chosen node's memory.

    Need = arena + K/V + headroom (default 4 GiB, ``headroom:`` in the config). On the seed
    box that is 46.84 + 3.09 + 4.00 = 53.93 GiB against node 1's 63.00 GiB: it fits with
    9.07 GiB to spare. Both verdicts are one sentence: the sum, ``fits`` or ``does not
    fit``, the node's MemTotal, and what is to spare or short.
    Reads ``/sys/devices/system/node/nodeN/meminfo`` (MemTotal, MemFree) for each planned
    node. With no planned node (no compute GPU, one node, or ``numa: off``) the whole
    host counts: ``/proc/meminfo``'s MemTotal, or, in a capture without it, the sum of every
    node's MemTotal; on two or more nodes the finding names the node with the most MemFree,
    where the engine's memory would best go. Memory the running engine already holds on the
    node counts as available to it. When the need exceeds MemTotal the excess spills to the
    next node with a preferred policy; the finding says how much and where. When it fits
    MemTotal but not what is free now (MemFree plus what the engine holds there), that one
    warning replaces ``fits``: one row per run. A size the tree does not show is unknown,
    naming the file. Skipped when no arena size is known
    (``--arena`` or ``arena:``).
    """

    id = "arena-fit"
    title = "Arena fits the node"
    findings = ("fits", "low-free", "does-not-fit", "unknown-memory")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.config.arena_bytes is None:
            return f"no arena size ({ctx.config.arena_hint('pass --arena or set arena: in the config')})"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        config = ctx.config
        pinned = config.pinned_bytes or 0
        need = pinned + config.headroom_bytes
        room = node_room(ctx.numa, ctx.binding_plan) or host_room(ctx.meminfo, ctx.numa)
        nodes, total, where, evidence = room.nodes, room.total, self._where(room), self._evidence(room)
        if total is None:
            yield self._unknown(ctx, room)
            return
        held = engine_held(ctx.engine_process, nodes)
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
                detail=_sentences(self._counted(ctx, room), self._spill(ctx, nodes, short),
                                  self._preferred(room)),
                evidence=evidence,
            )
            return
        # MemFree that no meminfo gives is unknown: no claim about it either way.
        available = None if room.free is None else room.free + held
        fits = f"{arith} fits {where} ({format_bytes(total)})"
        if available is not None and need > available:
            # One row: it fits the node's size, but not what is free of it now.
            yield self.finding(
                "low-free", Severity.WARNING,
                f"{fits}, but only {format_bytes(available)} of it is free for the engine now: "
                f"{format_bytes(need - available)} less than it needs",
                detail=_sentences(
                    f"Its MemTotal leaves {format_bytes(total - need)} to spare.",
                    self._low_free_detail(ctx, nodes, held), self._counted(ctx, room),
                    self._preferred(room)),
                evidence=evidence,
            )
            return
        yield self.finding(
            "fits", Severity.OK,
            f"{fits}: {format_bytes(total - need)} to spare",
            detail=_sentences(self._counted(ctx, room), self._preferred(room)),
            evidence=evidence,
        )

    def _unknown(self, ctx: HostContext, room: ArenaRoom) -> Finding:
        """The size is not in the tree: which node or host, and which files say nothing."""
        ids = room.unread or tuple(sorted(room.nodes))
        named = ("node " if len(ids) == 1 else "nodes ") + ",".join(map(str, ids))
        what = "this host" if room.host else named
        files: List[Tuple[str, str]] = []
        if room.host:
            files.append(("/proc/meminfo", self._why(ctx, "/proc/meminfo")))
            if not ctx.numa.nodes:
                files.append((NODE_DIR, "lists no node"))
        files.extend((f"{NODE_DIR}/node{n}/meminfo", self._why(ctx, f"{NODE_DIR}/node{n}/meminfo"))
                     for n in room.unread)
        reasons = "; ".join(f"{path} {why}" for path, why in files)
        return self.finding(
            "unknown-memory", Severity.WARNING,
            f"cannot read the memory size of {what}: {reasons}",
            detail="Without MemTotal the tool cannot tell whether the arena fits; it does not guess.",
            evidence=tuple(Evidence(path, why) for path, why in files),
        )

    def _why(self, ctx: HostContext, path: str) -> str:
        why = ctx.why_unread(path)
        if why is None:
            return "gives no MemTotal"
        return "is missing" if why == "missing" else f"is unreadable ({why})"

    def _counted(self, ctx: HostContext, room: ArenaRoom) -> str:
        """Which memory was counted, when it is not the planned nodes' (whose evidence says)."""
        if room.host and room.source == "nodes":
            why = self._why(ctx, "/proc/meminfo")
            count = len(room.counted)
            whose = "its one node's MemTotal" if count == 1 else f"its {count} nodes' MemTotal, summed"
            return f"The host's size is {whose}: /proc/meminfo {why}."
        return ""

    def _preferred(self, room: ArenaRoom) -> str:
        node = room.preferred
        if node is None:
            return ""
        return (
            f"No node is planned; the one with the most free memory, where the engine's memory "
            f"would best go, is node {node.id} (MemFree {format_bytes(node.memory_free or 0)} of "
            f"MemTotal {format_bytes(node.memory_total or 0)})."
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
        if room.source == "/proc/meminfo":
            found = [Evidence("/proc/meminfo", f"MemTotal={format_bytes(room.total or 0)}")]
            if room.preferred is not None:
                found.append(_node_evidence(room.preferred))
            return tuple(found)
        return tuple(_node_evidence(n) for n in room.counted)

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


def _sentences(*parts: str) -> str:
    """The detail's sentences, each ending with its own full stop, one space apart."""
    return " ".join(part.strip() for part in parts if part.strip())


def _node_evidence(node: NumaNode) -> Evidence:
    """A node's meminfo as read; a value the file does not give is said to be unknown."""
    free = "unknown" if node.memory_free is None else format_bytes(node.memory_free)
    return Evidence(
        f"{NODE_DIR}/node{node.id}/meminfo",
        f"MemTotal={format_bytes(node.memory_total or 0)} MemFree={free}",
    )
