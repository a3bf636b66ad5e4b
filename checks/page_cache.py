"""page-cache: is the GPU's node short of free memory because page cache fills it?"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.pagecache import ZONE_RECLAIM, NodeCache
from strata_doctor.facts.parse import format_bytes
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity
from strata_doctor.rules import page_cache as cache
from strata_doctor.rules.page_cache import CacheVerdict, assess_cache

DROP_CACHES = "sync; echo 1 > /proc/sys/vm/drop_caches"


class PageCache(Check):
    """Says how much of the GPU's node is page cache when its free memory is short of the arena.

    A preferred binding (``NUMAPolicy=preferred``, ``numactl --preferred``) takes free
    pages of the preferred node and, when there are none, pages of the far node: with
    ``vm.zone_reclaim_mode`` = 0 (the default) the kernel does not reclaim the near
    node's page cache first. A node full of cache (a model file read once, a backup, a
    build) therefore sends the arena across the socket link while the near node holds
    memory nobody needs; llama.cpp users measured +80% generation speed from getting
    this placement right. The check compares ``MemFree`` of the node (of each node of the
    binding when it spans a socket's sub-nodes) with arena + K/V and states
    ``FilePages``, ``Inactive(file)`` and ``Shmem`` (counted in FilePages but not
    dropped) of ``/sys/devices/system/node/nodeN/meminfo``, and ``zone_reclaim_mode``.
    The remedy is advice: drop the cache once before the engine starts
    (``sync; echo 1 > /proc/sys/vm/drop_caches``), or evict the model file from the cache.
    """

    id = "page-cache"
    title = "Page cache on the GPU's node"
    findings = ("cache-fills-node", "short", "fits", "engine-placed")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.target_node is None:
            return "no node to bind the engine to (no GPU node and no `numa: N`)"
        if len(ctx.numa.nodes) < 2:
            return "one NUMA node: there is no far node to spill to"
        if ctx.binding_node_caches is None:
            return f"cannot read FilePages and MemFree of node {ctx.target_node}"
        if ctx.config.pinned_bytes is None:
            hint = ctx.config.arena_hint("set `arena:` or --arena")
            return f"no arena size to compare the node's free memory with ({hint})"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        caches = ctx.binding_node_caches or ()
        v = assess_cache(caches, ctx.config.pinned_bytes or 0, ctx.engine_process)
        where, has = self._where(caches)
        mode = "unreadable" if v.zone_reclaim_mode is None else str(v.zone_reclaim_mode)
        evidence = self._evidence(caches, mode)
        pinned, free = format_bytes(v.pinned), format_bytes(v.free)
        own = f" (with the {format_bytes(v.held)} the running engine holds there)" if v.held else ""
        if v.case == cache.ENGINE_PLACED:
            yield self.finding("engine-placed", Severity.OK,
                               f"the running engine already holds {format_bytes(v.held)} on {where}",
                               evidence=evidence)
        elif v.case == cache.FITS:
            yield self.finding("fits", Severity.OK,
                               f"{where} {has} {free} free{own} for arena + K/V "
                               f"({pinned}); {format_bytes(v.file_pages)} is page cache",
                               evidence=evidence)
        elif v.case == cache.SHORT:
            yield self.finding(
                "short", Severity.OK,
                f"page cache is not what keeps the arena off {where}: {free} free{own} and "
                f"{format_bytes(v.file_pages)} of cache against arena + K/V ({pinned}); "
                "arena-fit says how much is short", evidence=evidence)
        else:
            yield self._cache_fills_node(v, where, has, own, mode, evidence)

    def _cache_fills_node(
        self, v: CacheVerdict, where: str, has: str, own: str, mode: str, evidence: Tuple[Evidence, ...],
    ) -> Finding:
        short = format_bytes(v.short)
        reclaim = ("zone_reclaim_mode=0: the kernel takes the far node's free pages before it reclaims "
                   "this cache" if v.zone_reclaim_mode == 0 else
                   f"zone_reclaim_mode={mode}: the kernel reclaims this node's cache first, at the cost of "
                   "stalls while the arena loads")
        return self.finding(
            "cache-fills-node", Severity.WARNING,
            f"{where} {has} {format_bytes(v.free)} free{own} of {format_bytes(v.mem_total)}, "
            f"{short} short of arena + K/V ({format_bytes(v.pinned)}); "
            f"{format_bytes(v.file_pages)} of it is page cache ({format_bytes(v.inactive_file)} inactive)",
            detail=f"{reclaim}, so a preferred binding puts {short} of the arena on the "
            "far node, where every expert read crosses the socket link.",
            evidence=evidence,
            fix=Fix(
                summary=f"free the page cache of {where} once before the engine starts",
                manual=(
                    ManualStep(f"Before starting the engine, run `{DROP_CACHES}` as root (drops clean "
                               "cache host-wide, once; nothing is lost but later re-reads)."),
                    ManualStep("Or evict only the model file: `dd of=MODEL_FILE oflag=nocache "
                               "conv=notrunc,fdatasync count=0` (or `vmtouch -e MODEL_FILE`)."),
                ),
                takes_effect="restart",
            ),
        )

    def _where(self, caches: Tuple[NodeCache, ...]) -> Tuple[str, str]:
        """(``node 1`` or ``nodes 0,1``, and the verb that agrees with it)."""
        nodes = ",".join(str(c.node) for c in caches)
        return (f"node {nodes}", "has") if len(caches) == 1 else (f"nodes {nodes}", "have")

    def _evidence(self, caches: Tuple[NodeCache, ...], mode: str) -> Tuple[Evidence, ...]:
        rows = [Evidence(c.source, f"MemTotal={format_bytes(c.mem_total)}, MemFree="
                         f"{format_bytes(c.mem_free)}, FilePages={format_bytes(c.file_pages)}, "
                         f"Inactive(file)={format_bytes(c.inactive_file)}, "
                         f"Shmem={format_bytes(c.shmem)}") for c in caches]
        return (*rows, Evidence(ZONE_RECLAIM, mode))
