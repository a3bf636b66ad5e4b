"""hugepages: does the hugepage pool fit the engine, or trap it?"""

from typing import Iterator, List, Optional, Sequence, Tuple

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.hugepage_pools import PagePool
from strata_doctor.facts.hugepages import SYSCTL_KEY, HugepageFacts, format_page_size
from strata_doctor.facts.hugetlbfs import HugetlbfsFile
from strata_doctor.facts.oomd import oomd_commands
from strata_doctor.facts.parse import format_bytes, format_count
from strata_doctor.fix.memory import node_pool_fix, size_pool_fix, sysctl_fix
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity
from strata_doctor.rules.pool import PendingPool, PoolAssessment, pending_pool, pool_fix_pending
from strata_doctor.rules.trap import CHAIN, TrapVerdict

GIB = 1024**3


def orphan_pages(facts: HugepageFacts, size: int) -> int:
    """Pages of one size that orphaned hugetlbfs files hold."""
    pages = 0
    for mount in facts.mounts:
        if (mount.page_size or facts.page_size) != size:
            continue
        pages += sum(-(-f.size // size) for f in mount.files if f.orphan and f.size)
    return pages


def pool_words(pool: PagePool) -> str:
    """``24,000 2 MiB pages (46.88 GiB)``."""
    return (f"{format_count(pool.total)} {format_page_size(pool.size)} pages "
            f"({format_bytes(pool.total * pool.size)})")


class Hugepages(Check):
    """Finds hugepage pools that trap the engine or hold memory nobody uses.

    A pool set aside with ``vm.nr_hugepages`` is invisible to ordinary allocations, and
    ``free`` and ``top`` show it only as used memory. On the seed box the pool was 24,000
    pages (46.88 GiB); the engine needed 46.84 GiB / 2 MiB → 23,983 pages, but 8,221 were
    already taken, so only 15,779 were free: MAP_HUGETLB failed at every start, the
    engine fell back to transparent hugepages and needed the arena again in ordinary
    pages while the pool kept its 46.88 GiB, and the load tripped systemd-oomd, which
    killed the unit, which systemd restarted into the same trap. ``vm.nr_hugepages = 0``
    ended it.

    Reads ``/proc/meminfo``, ``/proc/sys/vm/nr_hugepages`` and
    ``nr_overcommit_hugepages``, every size under ``/sys/kernel/mm/hugepages/``, the
    per-node pools, the hugetlbfs mounts and their files, ``HugetlbPages:`` of every
    process, and ``/proc/PID/maps`` (to find files nobody maps). The configured pool comes
    from the sysctl.d(5) files in their order, ``/etc/sysctl.conf`` and the kernel command
    line, so a fix that is written but not applied shows as configured and pending. The
    engine's mode (``hugepages: auto|hugetlb|thp``, default ``auto``: try MAP_HUGETLB,
    fall back to THP) and arena come from the config or ``--arena``.
    """

    id = "hugepages"
    title = "Hugepage pool"
    findings = ("trap", "unusable-pool", "too-small", "configured", "trap-at-boot", "unused-pool",
                "in-use", "wrong-node", "orphans", "surplus", "fits", "no-pool", "unreadable")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        return oomd_commands(ctx.config.unit)

    def applies(self, ctx: HostContext) -> Optional[str]:
        facts = ctx.hugepages
        if facts.mem("MemTotal") is None and not facts.pools:
            why = dict(facts.unreadable).get("/proc/meminfo", "missing")
            return f"cannot read /proc/meminfo ({why}) nor /sys/kernel/mm/hugepages"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        facts = ctx.hugepages
        a = ctx.pool_assessment
        blocking = self._orphans_block(facts, a)
        yield from self._default_pool(ctx, facts, a, blocking)
        yield from self._nodes(ctx, facts, a)
        yield from self._other_sizes(facts)
        yield from self._orphans(facts, a if blocking else None)
        yield from self._surplus(facts)
        if facts.unreadable:
            yield self.finding(
                "unreadable", Severity.INFO,
                "could not read: " + "; ".join(f"{p} ({why})" for p, why in facts.unreadable),
                detail="Holders and orphaned hugetlbfs files may be missing from these findings. "
                "Run as root to see every process's maps and every hugetlbfs file.",
            )

    # -- the default pool -----------------------------------------------------------------
    def _orphans_block(self, facts: HugepageFacts, a: PoolAssessment) -> bool:
        """hugetlb mode fails only because of orphaned files: deleting them is the fix."""
        if not (a.fails and a.mode == "hugetlb" and a.pool is not None and a.need is not None):
            return False
        return a.available + orphan_pages(facts, a.pool.size) >= a.need.pages

    def _default_pool(
        self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment, blocking: bool = False,
    ) -> Iterator[Finding]:
        pool = a.pool
        evidence = self._pool_evidence(ctx, facts)
        total = pool.total if pool else 0
        pending = pending_pool(facts, total)
        # An empty pool holds nothing back, whatever overcommit allows on demand: only
        # hugepages: hugetlb, which has no fallback, makes it a finding.
        if pool is None or (pool.total == 0 and (a.mode != "hugetlb" or
                                                 (pool.surplus == 0 and pool.overcommit == 0))):
            yield from self._no_pool(ctx, facts, a, pending, evidence)
            return
        if a.fails:
            verdict = ctx.trap_verdict
            resolving = pool_fix_pending(facts, a)
            if resolving is not None:
                yield self._configured(pool, resolving, evidence)
            elif verdict is not None and verdict.error:
                yield self._trap(ctx, facts, a, verdict, evidence)
            elif verdict is not None:
                yield self._unusable(ctx, facts, a, verdict, evidence)
            elif not blocking:  # else the orphans finding carries the failure and its fix
                yield self._too_small(ctx, facts, a, evidence)
            return
        if a.mode == "thp" or a.need is None:
            yield self._not_for_engine(ctx, facts, a, pending, evidence)
            return
        assert a.need is not None
        spare = pool.total - a.need.pages - (pool.used - a.engine_pages)
        extra = f"; {format_count(spare)} pages ({format_bytes(spare * pool.size)}) beyond that stay idle" \
            if spare * pool.size >= GIB else ""
        held = f" ({format_count(a.engine_pages)} held by the running engine)" if a.engine_pages else ""
        yield self.finding(
            "fits", Severity.OK,
            f"pool {format_count(pool.total)}, free {format_count(pool.free)}{held}: the arena's "
            f"{a.need.arithmetic} "
            f"fit MAP_HUGETLB{extra}",
            evidence=evidence,
        )

    def _no_pool(
        self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment, pending: Optional[PendingPool],
        evidence: Tuple[Evidence, ...],
    ) -> Iterator[Finding]:
        need = a.need
        if a.mode == "hugetlb":
            if need is None:
                yield self.finding("too-small", Severity.ERROR,
                                   "no hugepage pool, and the engine runs with hugepages: hugetlb "
                                   "(pass --arena to size one)", evidence=evidence)
                return
            if pending and pending.pages >= need.pages:
                yield self._configured(a.pool, pending, evidence)
                return
            yield self.finding(
                "too-small", Severity.ERROR,
                f"no hugepage pool, but the engine runs with hugepages: hugetlb and needs "
                f"{need.arithmetic}: MAP_HUGETLB will fail and the engine will not start",
                detail="hugetlb mode has no fallback. Reserve the pool on the GPU's node, or "
                "switch the engine to `hugepages: auto` or `thp`.",
                evidence=evidence, fix=self._grow_fix(ctx, facts, a, need.pages),
            )
            return
        if pending and pending.pages > 0 and need is not None and pending.pages < need.pages \
                and a.mode == "auto":
            yield self.finding(
                "trap-at-boot", Severity.WARNING,
                f"no pool now, but {pending.path} sets {SYSCTL_KEY} = {format_count(pending.pages)}: after "
                f"{pending.after} MAP_HUGETLB needs {need.arithmetic} and will fail, and the pool "
                f"will hold {format_bytes(pending.pages * facts.page_size)} the THP fallback cannot use",
                evidence=evidence,
                fix=self._zero_fix(facts, "hugepages/trap-at-boot", "the engine runs on THP"),
            )
            return
        how = "THP" if a.mode != "hugetlb" else "MAP_HUGETLB"
        overcommit = ""
        if a.pool is not None and a.pool.overcommit and a.mode == "auto":
            if a.fails and need is not None:
                overcommit = (f"; overcommit allows {format_count(a.available)} surplus pages on demand, "
                              f"fewer than the arena's {format_count(need.pages)}, so MAP_HUGETLB fails "
                              "and the engine falls back to THP")
            elif need is not None:
                how = "MAP_HUGETLB"
                overcommit = (f"; overcommit allows {format_count(a.available)} surplus pages on demand, "
                              f"enough for the arena's {format_count(need.pages)}")
        yield self.finding(
            "no-pool", Severity.OK,
            f"no hugepage pool: no memory is held back, and the arena uses {how} "
            f"(hugepages: {a.mode}){overcommit}",
            evidence=evidence,
        )

    def _configured(
        self, pool: Optional[PagePool], pending: PendingPool, evidence: Tuple[Evidence, ...],
    ) -> Finding:
        now = format_count(pool.total) if pool else "0"
        return self.finding(
            "configured", Severity.INFO,
            f"configured: {SYSCTL_KEY} = {format_count(pending.pages)} in {pending.path} (the pool is "
            f"{now} now); takes effect after {pending.after}",
            detail="The fix is written but not in effect yet. Pages that are taken stay taken "
            "until their holders release them (or the files holding them are deleted); the "
            "engine needs a restart to pick up the change.",
            evidence=evidence,
        )

    def _trap(
        self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment, verdict: TrapVerdict,
        evidence: Tuple[Evidence, ...],
    ) -> Finding:
        pool, need = a.pool, a.need
        assert pool is not None and need is not None
        taken = pool.total - pool.free
        pool_bytes = pool.total * pool.size
        summary = (
            f"MAP_HUGETLB will fail: pool {format_count(pool.total)}, free {format_count(pool.free)}, needed "
            f"{format_count(need.pages)} ({need.arithmetic}); the engine falls back to THP and needs "
            f"{format_bytes(need.arena)} more while the pool keeps {format_bytes(pool_bytes)}"
        )
        held = (f"{format_count(taken)} of its pages are taken ({self._takers(facts, pool, taken)}), so "
                f"{format_count(pool.free)} are free") if taken else \
            f"None of its pages are taken: all {format_count(pool.free)} are free"
        parts = [
            f"{SYSCTL_KEY} = {format_count(pool.total)} sets aside {format_bytes(pool_bytes)} for "
            f"MAP_HUGETLB. {held}"
            + (f" and {format_count(pool.reserved)} of those are reserved" if pool.reserved else "")
            + f": {format_count(a.missing)} short of the {format_count(need.pages)} the arena needs "
            f"({need.arithmetic}).",
            "With hugepages: auto the engine then falls back to transparent hugepages: it needs the "
            f"arena again, {format_bytes(need.arena)} of ordinary pages, while the pool keeps "
            f"{format_bytes(pool_bytes)} that nothing else can use (free and top count it as used).",
        ]
        projection, released = verdict.projection, verdict.released
        if projection is not None:
            parts.append(f"Projected after the start: {projection.arithmetic}.")
        if verdict.pool_short and projection is not None and released is not None:
            parts.append(
                f"That is short of the headroom because of the pool: giving back its "
                f"{format_bytes(verdict.held_back)} (its free pages"
                + (" and the running engine's" if a.engine_pages else "")
                + f") would leave {format_bytes(released.left)}."
            )
        parts.append(
            "What follows: loading the arena drives reclaim and compaction (memory pressure); where "
            "systemd-oomd watches the engine's cgroup it kills the unit, and systemd restarts it into "
            "the same trap: a restart loop."
        )
        if verdict.chain:
            parts.append(f"systemd-oomd watches the engine here, so this is the first link of one "
                         f"failure chain ({CHAIN}), reported in order by oomd/trap-chain.")
        parts.append(
            f"Set {SYSCTL_KEY} = 0 to run on THP (what fixed the seed box)"
            + (f", or free the {format_count(taken)} taken pages so that the arena fits."
               if taken >= a.missing else ".")
        )
        shadowed = self._shadowed(facts)
        if shadowed:
            parts.append(shadowed)
        fix = None if facts.container else self._zero_fix(
            facts, "hugepages/trap", "MAP_HUGETLB cannot get the arena; the engine runs on THP")
        if facts.container:
            parts.append(f"This is a container ({facts.container}): the pool belongs to the host; "
                         f"change {SYSCTL_KEY} there.")
        return self.finding("trap", Severity.ERROR, summary, detail=" ".join(parts),
                            evidence=evidence + self._config_evidence(ctx), fix=fix)

    def _unusable(
        self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment, verdict: TrapVerdict,
        evidence: Tuple[Evidence, ...],
    ) -> Finding:
        """MAP_HUGETLB fails and the pool holds memory back, but the numbers make no trap."""
        pool, need = a.pool, a.need
        assert pool is not None and need is not None
        taken = pool.total - pool.free
        if verdict.held_back == 0:  # every page is someone else's: nothing to give back
            return self.finding(
                "in-use", Severity.INFO,
                f"pool of {pool_words(pool)}, {format_count(pool.used)} in use "
                f"({self._takers(facts, pool, taken)}), none free for the arena ({need.arithmetic}): "
                "the engine runs on THP, and the pool holds nothing back from it",
                evidence=evidence + self._config_evidence(ctx),
            )
        held = format_bytes(verdict.held_back)
        projection, released = verdict.projection, verdict.released
        summary = (
            f"pool of {pool_words(pool)} that the arena cannot use: free {format_count(pool.free)}, "
            f"needed {format_count(need.pages)} ({need.arithmetic}), so the engine runs on THP "
            f"while the pool holds back {held}"
        )
        parts = [
            f"{SYSCTL_KEY} = {format_count(pool.total)} sets aside {format_bytes(pool.total * pool.size)} "
            f"for MAP_HUGETLB"
            + (f"; {format_count(taken)} of its pages are taken ({self._takers(facts, pool, taken)})"
               if taken else "")
            + f", so MAP_HUGETLB of the arena fails and hugepages: auto falls back to transparent "
            f"hugepages. {SYSCTL_KEY} = 0 would give back {held} (its free pages"
            + (" and the running engine's" if a.engine_pages else "") + ")."
        ]
        if projection is not None and released is not None:
            parts.append(f"Projected after the start: {projection.arithmetic}.")
            if projection.short:
                short = format_bytes(released.headroom - released.left)
                summary += (f"; the start runs short of the {format_bytes(projection.headroom)} headroom "
                            f"even without the pool (by {short}), so the pool is not what runs it short")
                parts.append(
                    f"Giving the pool back would still leave the start {short} short of the "
                    f"{format_bytes(projection.headroom)} headroom: the engine does not fit this host's "
                    "memory whatever the pool holds (a host smaller than the engine is arena-fit's "
                    "error), so the pool only adds to a shortfall it does not cause."
                )
            else:
                summary += (f"; {format_bytes(projection.left)} is projected left after the start "
                            f"(headroom {format_bytes(projection.headroom)})")
                parts.append(
                    "That leaves the headroom, so the fallback does not run the host short: the pool "
                    "only wastes memory (free and top count it as used)."
                )
        else:
            parts.append("Without MemAvailable the memory left after the start cannot be projected.")
        parts.append(f"Set {SYSCTL_KEY} = 0 unless another program maps the pool.")
        shadowed = self._shadowed(facts)
        if shadowed:
            parts.append(shadowed)
        if facts.container:
            parts.append(f"This is a container ({facts.container}): the pool belongs to the host; "
                         f"change {SYSCTL_KEY} there.")
        fix = None if facts.container else self._zero_fix(
            facts, "hugepages/unusable-pool", "the arena cannot use the pool; the engine runs on THP")
        return self.finding("unusable-pool", Severity.WARNING, summary, detail=" ".join(parts),
                            evidence=evidence + self._config_evidence(ctx), fix=fix)

    def _too_small(
        self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment, evidence: Tuple[Evidence, ...],
    ) -> Finding:
        pool, need = a.pool, a.need
        assert pool is not None and need is not None
        taken = pool.total - pool.free
        return self.finding(
            "too-small", Severity.ERROR,
            f"pool too small for hugepages: hugetlb: pool {format_count(pool.total)}, free "
            f"{format_count(pool.free)}, "
            f"needed {format_count(need.pages)} ({need.arithmetic}): MAP_HUGETLB will fail and the engine "
            "will not start",
            detail=f"{format_count(taken)} pages are taken ({self._takers(facts, pool, taken)}). hugetlb "
                   f"mode "
            f"has no fallback: grow the pool by {format_count(a.missing)} pages, free the taken ones, or "
            "switch the engine to `hugepages: auto`.",
            evidence=evidence + self._config_evidence(ctx),
            fix=self._grow_fix(ctx, facts, a, need.pages + max(0, taken - a.engine_pages)),
        )

    def _not_for_engine(
        self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment, pending: Optional[PendingPool],
        evidence: Tuple[Evidence, ...],
    ) -> Finding:
        pool = a.pool
        assert pool is not None
        pool_text = pool_words(pool)
        if pool.used == 0 and not facts.holders:
            if pending and pending.pages == 0:
                return self._configured(pool, pending, evidence)
            if a.mode == "thp":
                return self.finding(
                    "unused-pool", Severity.WARNING,
                    f"pool of {pool_text} that nobody uses: free {format_count(pool.free)} of "
                    f"{format_count(pool.total)}, no process holds any, and the engine runs on THP",
                    detail="The pool is taken out of ordinary memory at once and stays out: no "
                    "other allocation can use it, and free and top count it as used.",
                    evidence=evidence,
                    fix=None if facts.container else self._zero_fix(
                        facts, "hugepages/unused-pool", "nothing uses the pool; the engine runs on THP"),
                )
            return self.finding(
                "unused-pool", Severity.WARNING,
                f"pool of {pool_text} that nobody uses now (free {format_count(pool.free)} of "
                f"{format_count(pool.total)}); pass --arena to check it fits the engine",
                detail="If the pool is for the engine (hugepages: auto or hugetlb), give its arena "
                "size so that the fit can be checked; otherwise it holds memory hostage.",
                evidence=evidence,
            )
        users = ", ".join(f"{h.name} (pid {h.pid}, {format_bytes(h.bytes)})" for h in facts.holders[:5])
        why = "the engine runs on THP" if a.mode == "thp" else "no arena size to compare with (--arena)"
        return self.finding(
            "in-use", Severity.INFO,
            f"pool of {pool_text}, {format_count(pool.used)} in use"
            + (f" by {users}" if users else "") + f"; {why}",
            evidence=evidence,
        )

    # -- nodes, other sizes, orphans, surplus -----------------------------------------------
    def _nodes(self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment) -> Iterator[Finding]:
        nodes = facts.nodes_of(facts.page_size)
        target = ctx.target_node
        if target is None or len(nodes) < 2 or not a.uses_pool or a.fails or a.need is None:
            return
        on_target = next((n for n in nodes if n.node == target), None)
        engine = facts.holder(ctx.engine_pid)
        # At its restart the engine gives its pages back to their nodes and takes them again,
        # the preferred node first: only its pages already on the target count there.
        engine_here = engine.pages_on(target, facts.page_size) if engine and engine.nodes else a.engine_pages
        have = (on_target.free if on_target else 0) + engine_here
        if have >= a.need.pages:
            return
        counts = ", ".join(f"node {n.node}: {format_count(n.total)} (free {format_count(n.free)})"
                           for n in nodes)
        configured = self._configured_node(facts, target)
        evidence = tuple(
            Evidence(f"/sys/devices/system/node/node{n.node}/hugepages/hugepages-{n.size // 1024}kB",
                     f"nr_hugepages={n.total} free_hugepages={n.free}")
            for n in nodes
        )
        if configured and configured[0] >= a.need.pages:
            yield self.finding(
                "configured", Severity.INFO,
                f"configured: hugepages={target}:{format_count(configured[0])} in {configured[1]}; takes "
                f"effect after a reboot (pool now {counts})", evidence=evidence)
            return
        elsewhere = a.need.pages - have
        others = {n.node: n.total for n in nodes if n.node != target}
        used_on_target = (on_target.total - on_target.free) if on_target else 0
        fix = None if facts.container or facts.sys_readonly else node_pool_fix(
            target, a.need.pages + max(0, used_on_target - engine_here), facts.page_size, others,
            overriding=facts.sysctl.setters(SYSCTL_KEY), boot_config=self._boot_pools(facts))
        if engine and engine.nodes:
            where = ", ".join(f"node {n}: {format_count(b // facts.page_size)}" for n, b in engine.nodes)
            evidence += (Evidence(f"/proc/{engine.pid}/numa_maps", f"the engine's hugetlb pages: {where}"),)
        yield self.finding(
            "wrong-node", Severity.WARNING,
            f"hugepage pool not on the GPU's node {target}: {counts}; {format_count(elsewhere)} of the "
            f"arena's {format_count(a.need.pages)} pages would come from other nodes",
            detail="MAP_HUGETLB takes pages from the node the memory policy prefers and then from "
            "any node with free pages, so the arena lands away from the GPU and every expert read "
            "crosses the socket link. vm.nr_hugepages spreads the pool over all nodes; per-node "
            "pools are set through /sys/devices/system/node/N/hugepages/ or the kernel command "
            "line (hugepages=<node>:<count>).",
            evidence=evidence, fix=fix,
        )

    def _other_sizes(self, facts: HugepageFacts) -> Iterator[Finding]:
        for pool in facts.pools:
            if pool.size == facts.page_size or pool.total == 0:
                continue
            text = pool_words(pool)
            ev = (Evidence(pool.source, f"nr_hugepages={pool.total} free_hugepages={pool.free}"),)
            if pool.used == 0:
                yield self.finding(
                    "unused-pool", Severity.WARNING,
                    f"pool of {text} that nobody uses (not the default size, so MAP_HUGETLB without "
                    "a size flag never draws on it)",
                    evidence=ev,
                    fix=None if facts.container or facts.sys_readonly else size_pool_fix(
                        pool.size, "hugepages/unused-pool"),
                )
            else:
                yield self.finding("in-use", Severity.INFO, f"pool of {text}, {format_count(pool.used)} "
                                                            f"in use",
                                   evidence=ev)

    def _orphans(self, facts: HugepageFacts, blocked: Optional[PoolAssessment] = None) -> Iterator[Finding]:
        orphans = facts.orphans
        if not orphans:
            return
        total = sum(f.size or 0 for f in orphans)
        listing = "; ".join(self._orphan_text(facts, f) for f in orphans[:5])
        more = f" and {len(orphans) - 5} more" if len(orphans) > 5 else ""
        summary = (f"{len(orphans)} hugetlbfs file{'s' if len(orphans) != 1 else ''} that no process maps "
                   f"hold{'s' if len(orphans) == 1 else ''} {format_bytes(total)}")
        detail = ("A file in hugetlbfs keeps its pages until it is deleted, even when no process "
                  "has it open: a crashed or killed program leaves them behind, and the pool looks taken "
                  "for no visible reason. Delete them once sure nothing will reopen them.")
        severity = Severity.WARNING
        if blocked is not None and blocked.pool is not None and blocked.need is not None:
            pool, need = blocked.pool, blocked.need
            pages = orphan_pages(facts, pool.size)
            severity = Severity.ERROR
            summary = (f"MAP_HUGETLB will fail: pool {format_count(pool.total)}, free "
                       f"{format_count(pool.free)}, needed "
                       f"{format_count(need.pages)} ({need.arithmetic}), because {summary} "
                       f"({format_count(pages)} pages); "
                       "delete them and the pool suffices")
            detail = (f"The engine runs with hugepages: hugetlb and has no fallback, so it will not "
                      f"start. {detail} Without them {format_count(blocked.available + pages)} pages are "
                      f"free "
                      f"for the arena's {format_count(need.pages)}.")
        yield self.finding(
            "orphans", severity,
            f"{summary}: {listing}{more}",
            detail=detail,
            evidence=tuple(Evidence(f.path, self._orphan_text(facts, f, path=False)) for f in orphans[:20]),
            fix=Fix(
                summary="delete the orphaned hugetlbfs files (by hand: they may be someone's data)",
                manual=tuple(
                    ManualStep(f"rm -- {f.path}  # {self._orphan_text(facts, f)}")
                    for f in orphans
                ),
                takes_effect="now",
            ),
        )

    def _orphan_text(self, facts: HugepageFacts, f: HugetlbfsFile, path: bool = True) -> str:
        size = format_bytes(f.size) if f.size is not None else "size unknown"
        pages = ""
        if f.size:
            page = next((m.page_size for m in facts.mounts if f in m.files and m.page_size), None) \
                or facts.page_size
            pages = f", {format_count(-(-f.size // page))} pages"
        text = f"{size}{pages}, {f.owner_text}"
        return f"{f.path} ({text})" if path else text

    def _surplus(self, facts: HugepageFacts) -> Iterator[Finding]:
        pool = facts.default_pool
        if pool is None or (pool.surplus == 0 and pool.overcommit == 0):
            return
        yield self.finding(
            "surplus", Severity.INFO,
            f"overcommit: up to {format_count(pool.overcommit)} surplus {format_page_size(pool.size)} pages "
            f"on demand, {format_count(pool.surplus)} in use now",
            detail="Surplus pages are made when a mapping needs them and the kernel can find free "
            "2 MiB blocks, and given back when freed; they are not held in advance, so they hold no "
            "memory hostage, but they can fail under fragmentation.",
            evidence=(Evidence("/proc/sys/vm/nr_overcommit_hugepages", str(facts.nr_overcommit or 0)),
                      Evidence("/proc/meminfo", f"HugePages_Surp: {pool.surplus}")),
        )

    # -- helpers ----------------------------------------------------------------------------
    def _takers(self, facts: HugepageFacts, pool: PagePool, taken: int) -> str:
        parts: List[str] = []
        held = 0
        for h in facts.holders[:4]:
            pages = h.bytes // pool.size
            held += pages
            parts.append(f"{h.name} pid {h.pid}: {format_count(pages)}")
        orphaned = orphan_pages(facts, pool.size)
        if orphaned:
            parts.append(f"orphaned hugetlbfs files: {format_count(orphaned)}")
        rest = taken - held - orphaned
        if rest > 0:
            parts.append(f"{format_count(rest)} by no visible process (SysV SHM_HUGETLB segments, another "
                         "PID namespace, or maps that need root to read)")
        return "; ".join(parts) if parts else "holders unknown"

    def _shadowed(self, facts: HugepageFacts) -> str:
        """Say so when an earlier file's value is overridden by a later one."""
        setters = facts.sysctl.setters(SYSCTL_KEY)
        if len(setters) < 2:
            return ""
        last = setters[-1]
        earlier = [s for s in setters[:-1] if s.value.strip() != last.value.strip()]
        if not earlier:
            return ""
        lost = "; ".join(f"{s.key} = {s.value} in {s.path}" for s in earlier)
        return (f"{lost} is overridden by {last.key} = {last.value} in {last.path}, which is applied "
                "later (sysctl.d applies files in name order, /etc/sysctl.conf last; the last wins).")

    def _pool_evidence(self, ctx: HostContext, facts: HugepageFacts) -> Tuple[Evidence, ...]:
        keys = ("HugePages_Total", "HugePages_Free", "HugePages_Rsvd", "HugePages_Surp")
        values = [f"{k}={facts.mem(k)}" for k in keys if facts.mem(k) is not None]
        if facts.default_size:
            values.append(f"Hugepagesize={facts.default_size // 1024} kB")
        if facts.mem("Hugetlb") is not None:
            values.append(f"Hugetlb={format_bytes(facts.mem('Hugetlb') or 0)}")
        evidence = [Evidence("/proc/meminfo", " ".join(values))] if values else []
        if facts.nr_hugepages is not None:
            evidence.append(Evidence("/proc/sys/vm/nr_hugepages", str(facts.nr_hugepages)))
        for setting in facts.sysctl.setters(SYSCTL_KEY):
            evidence.append(Evidence(setting.path, f"{setting.key} = {setting.value}"))
        for h in facts.holders[:5]:
            evidence.append(Evidence(f"/proc/{h.pid}/status",
                                     f"Name={h.name} HugetlbPages={format_bytes(h.bytes)}"))
        return tuple(evidence)

    def _config_evidence(self, ctx: HostContext) -> Tuple[Evidence, ...]:
        c = ctx.config
        source = c.source or "command line"
        return (Evidence(source, f"arena={format_bytes(c.arena_bytes or 0)} hugepages={c.hugepages}"),)

    def _zero_fix(self, facts: HugepageFacts, finding: str, reason: str) -> Fix:
        return sysctl_fix(((SYSCTL_KEY, "0", reason),), finding, facts.sysctl)

    def _grow_fix(
        self, ctx: HostContext, facts: HugepageFacts, a: PoolAssessment, pages: int,
    ) -> Optional[Fix]:
        if facts.container:
            return None
        target = ctx.target_node
        nodes = facts.nodes_of(facts.page_size)
        if target is not None and len(nodes) > 1 and not facts.sys_readonly:
            others = {n.node: n.total for n in nodes if n.node != target}
            return node_pool_fix(target, pages, facts.page_size, others,
                                 overriding=facts.sysctl.setters(SYSCTL_KEY))
        return sysctl_fix(((SYSCTL_KEY, str(pages), "the engine maps its arena with MAP_HUGETLB"),),
                          "hugepages/too-small", facts.sysctl)

    def _boot_pools(self, facts: HugepageFacts) -> Tuple[Tuple[str, str], ...]:
        """(file, words) of ``hugepages=`` settings on the configured boot command lines."""
        return tuple((path, " ".join(c.words)) for path, c in facts.configured_cmdline if c.words)

    def _configured_node(self, facts: HugepageFacts, node: int) -> Optional[Tuple[int, str]]:
        for path, cmdline in facts.configured_cmdline:
            counts = cmdline.node_counts(facts.page_size, facts.page_size)
            if node in counts and counts[node] != self._node_total(facts, node):
                return counts[node], path
        return None

    def _node_total(self, facts: HugepageFacts, node: int) -> int:
        return next((n.total for n in facts.nodes_of(facts.page_size) if n.node == node), 0)

