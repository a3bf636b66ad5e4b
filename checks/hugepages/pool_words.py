"""How the hugepages check words each case of the default pool, and the evidence and
fixes those findings share (the decisions are rules: rules/pool_verdict.py)."""

from typing import Callable, Dict, Iterator, List, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.checks.hugepages.release import PoolRelease, pool_release
from strata_doctor.context import HostContext
from strata_doctor.facts.hugepage_pools import PagePool
from strata_doctor.facts.hugepages import SYSCTL_KEY, HugepageFacts, format_page_size
from strata_doctor.facts.parse import format_bytes, format_count
from strata_doctor.fix.memory import node_pool_fix, sysctl_fix
from strata_doctor.model import Evidence, Finding, Fix, Severity
from strata_doctor.rules import pool_verdict as case
from strata_doctor.rules.node_pools import grow_per_node
from strata_doctor.rules.pool import HugepageNeed, PoolAssessment, other_sizes, pool_words
from strata_doctor.rules.pool_holders import (
    pool_takers,
    shadowed_pool_setting,
)
from strata_doctor.rules.pool_verdict import PoolVerdict
from strata_doctor.rules.trap import CHAIN, TrapVerdict

GIB = 1024**3

Words = Callable[[HostContext, PoolVerdict, Tuple[Evidence, ...]], Finding]
"""How one case of the default pool is worded."""


class DefaultPoolWords(Check):
    """The default pool's findings, one method per case of :func:`judge_pool`; the
    check inherits them with the helpers its other findings use too."""

    # -- the default pool -----------------------------------------------------------------
    def _default_pool(self, ctx: HostContext, verdict: PoolVerdict) -> Iterator[Finding]:
        if verdict.case == case.ORPHANS:  # the orphans finding carries the failure and its fix
            return
        words: Dict[str, Words] = {
            case.HUGETLB_NO_ARENA: self._hugetlb_no_arena, case.HUGETLB_NO_POOL: self._hugetlb_no_pool,
            case.TRAP_AT_BOOT: self._trap_at_boot, case.NO_POOL: self._no_pool,
            case.CONFIGURED: self._configured, case.TRAP: self._trap,
            case.HELD_BY_OTHERS: self._held_by_others, case.UNUSABLE: self._unusable,
            case.TOO_SMALL: self._too_small, case.UNUSED_THP: self._unused_thp,
            case.UNUSED_NO_ARENA: self._unused_no_arena, case.IN_USE: self._in_use, case.FITS: self._fits,
        }
        yield words[verdict.case](ctx, verdict, self._pool_evidence(ctx.hugepages))

    def _hugetlb_no_arena(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        return self.finding("too-small", Severity.ERROR,
                            "no hugepage pool, and the engine runs with hugepages: hugetlb "
                            f"({ctx.config.arena_hint('pass --arena to size one')})", evidence=evidence)

    def _hugetlb_no_pool(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        need = self._need(ctx)
        return self.finding(
            "too-small", Severity.ERROR,
            f"no hugepage pool, but the engine runs with hugepages: hugetlb and needs "
            f"{need.arithmetic}: MAP_HUGETLB will fail and the engine will not start",
            detail="hugetlb mode has no fallback. Reserve the pool on the GPU's node, or "
            "switch the engine to `hugepages: auto` or `thp`.",
            evidence=evidence, fix=self._grow_fix(ctx, need.pages),
        )

    def _trap_at_boot(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        facts, pending, need = ctx.hugepages, v.pending, self._need(ctx)
        assert pending is not None
        return self.finding(
            "trap-at-boot", Severity.WARNING,
            f"no pool now, but {pending.path} sets {SYSCTL_KEY} = {format_count(pending.pages)}: after "
            f"{pending.after} MAP_HUGETLB needs {need.arithmetic} and will fail, and the pool "
            f"will hold {format_bytes(pending.pages * facts.page_size)} the THP fallback cannot use"
            f"{self._release(ctx).tail}",
            detail=self._release(ctx).detail,
            evidence=evidence,
            fix=self._zero_fix(ctx, "hugepages/trap-at-boot", "the engine runs on THP"),
        )

    def _no_pool(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        a = ctx.pool_assessment
        how = "MAP_HUGETLB" if a.mode == "hugetlb" or v.overcommit == "enough" else "THP"
        overcommit = ""
        if v.overcommit and a.need is not None:
            overcommit = (f"; overcommit allows {format_count(a.available)} surplus pages on demand, "
                          + (f"fewer than the arena's {format_count(a.need.pages)}, so MAP_HUGETLB fails "
                             "and the engine falls back to THP" if v.overcommit == "short" else
                             f"enough for the arena's {format_count(a.need.pages)}"))
        return self.finding(
            "no-pool", Severity.OK,
            f"no hugepage pool{self._held_in_other_sizes(ctx.hugepages)}, and the arena uses {how} "
            f"(hugepages: {a.mode}){overcommit}",
            evidence=evidence,
        )

    def _held_in_other_sizes(self, facts: HugepageFacts) -> str:
        """``: no memory is held back``, or what pools of other sizes hold back."""
        others = other_sizes(facts)
        if not others.bytes:
            return ": no memory is held back"
        return (f" of the default size ({format_page_size(facts.page_size)}): pools of other sizes "
                f"hold back {format_bytes(others.bytes)} ({others.text})")

    def _configured(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        pool, pending = ctx.pool_assessment.pool, v.pending
        assert pending is not None
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

    def _trap(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        facts, (a, pool, need), trap = ctx.hugepages, self._arena(ctx), self._trap_verdict(ctx)
        pool_bytes = pool.total * pool.size
        summary = (
            f"MAP_HUGETLB will fail: pool {format_count(pool.total)}, free {format_count(pool.free)}, needed "
            f"{format_count(need.pages)} ({need.arithmetic}); the engine falls back to THP and needs "
            f"{format_bytes(need.arena)} more while the pool keeps {format_bytes(pool_bytes)}"
        )
        parts = [
            self._trap_pool(facts, a, pool, need.pages, need.arithmetic),
            "With hugepages: auto the engine then falls back to transparent hugepages: it needs the "
            f"arena again, {format_bytes(need.arena)} of ordinary pages, while the pool keeps "
            f"{format_bytes(pool_bytes)} that nothing else can use (free and top count it as used).",
            *self._trap_projection(a, trap),
            "What follows: loading the arena drives reclaim and compaction (memory pressure); where "
            "systemd-oomd watches the engine's cgroup it kills the unit, and systemd restarts it into "
            "the same trap: a restart loop.",
        ]
        if trap.chain:
            parts.append(f"systemd-oomd watches the engine here, so this is the first link of one "
                         f"failure chain ({CHAIN}), reported in order by oomd/trap-chain.")
        parts.append(
            f"Set {SYSCTL_KEY} = 0 to run on THP (what fixed the seed box)"
            + (f", or free the {format_count(a.taken)} taken pages so that the arena fits."
               if a.taken >= a.missing else ".")
        )
        fix = None if facts.container else self._zero_fix(
            ctx, "hugepages/trap", "MAP_HUGETLB cannot get the arena; the engine runs on THP")
        release = self._release(ctx)
        return self.finding("trap", Severity.ERROR, summary + release.tail,
                            detail=" ".join(parts + self._host_words(facts) + [release.detail]).strip(),
                            evidence=evidence + self._config_evidence(ctx), fix=fix)

    def _trap_pool(self, facts: HugepageFacts, a: PoolAssessment, pool: PagePool, pages: int,
                   arithmetic: str) -> str:
        """What the pool sets aside, who took it, and how far short of the arena it is."""
        taken = a.taken
        held = (f"{format_count(taken)} of its pages are taken ({self._takers(facts, pool, taken)}), so "
                f"{format_count(pool.free)} are free") if taken else \
            f"No page of it is taken: all {format_count(pool.free)} are free"
        return (
            f"{SYSCTL_KEY} = {format_count(pool.total)} sets aside "
            f"{format_bytes(pool.total * pool.size)} for MAP_HUGETLB. {held}"
            + (f" and {format_count(pool.reserved)} of those are reserved" if pool.reserved else "")
            + f": {format_count(a.missing)} short of the {format_count(pages)} the arena needs "
            f"({arithmetic})."
        )

    def _trap_projection(self, a: PoolAssessment, trap: TrapVerdict) -> List[str]:
        """The memory projected after the start, and what giving the pool back would leave."""
        projection, released = trap.projection, trap.released
        if projection is None:
            return []
        parts = [f"Projected after the start: {projection.arithmetic}."]
        if trap.pool_short and released is not None:
            parts.append(f"That is short of the headroom because of the pool: giving back its "
                         f"{self._given_back(a, trap)}) would leave {format_bytes(released.left)}.")
        return parts

    def _held_by_others(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        """Every page is someone else's: nothing to give back."""
        facts, (a, pool, need) = ctx.hugepages, self._arena(ctx)
        return self.finding(
            "in-use", Severity.INFO,
            f"pool of {pool_words(pool)}, {format_count(pool.used)} in use "
            f"({self._takers(facts, pool, a.taken)}), none free for the arena ({need.arithmetic}): "
            "the engine runs on THP, and the pool holds nothing back from it",
            evidence=evidence + self._config_evidence(ctx),
        )

    def _unusable(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        """MAP_HUGETLB fails and the pool holds memory back, but the numbers make no trap."""
        facts, (a, pool, need), trap = ctx.hugepages, self._arena(ctx), self._trap_verdict(ctx)
        taken = a.taken
        tail, projected = self._unusable_projection(trap)
        summary = (
            f"pool of {pool_words(pool)} that the arena cannot use: free {format_count(pool.free)}, "
            f"needed {format_count(need.pages)} ({need.arithmetic}), so the engine runs on THP "
            f"while the pool holds back {format_bytes(trap.held_back)}{tail}"
        )
        parts = [
            f"{SYSCTL_KEY} = {format_count(pool.total)} sets aside {format_bytes(pool.total * pool.size)} "
            f"for MAP_HUGETLB"
            + (f"; {format_count(taken)} of its pages are taken ({self._takers(facts, pool, taken)})"
               if taken else "")
            + f", so MAP_HUGETLB of the arena fails and hugepages: auto falls back to transparent "
            f"hugepages. {SYSCTL_KEY} = 0 would give back {self._given_back(a, trap)}).",
            *projected,
            f"Set {SYSCTL_KEY} = 0 unless another program maps the pool.",
        ]
        fix = None if facts.container else self._zero_fix(
            ctx, "hugepages/unusable-pool", "the arena cannot use the pool; the engine runs on THP")
        release = self._release(ctx)
        return self.finding("unusable-pool", Severity.WARNING, summary + release.tail,
                            detail=" ".join(parts + self._host_words(facts) + [release.detail]).strip(),
                            evidence=evidence + self._config_evidence(ctx), fix=fix)

    def _unusable_projection(self, trap: TrapVerdict) -> Tuple[str, List[str]]:
        """(summary tail, sentences): what is left after the start, with the pool and without."""
        projection, released = trap.projection, trap.released
        if projection is None or released is None:
            return "", ["Without MemAvailable the memory left after the start cannot be projected."]
        arithmetic = f"Projected after the start: {projection.arithmetic}."
        headroom = format_bytes(projection.headroom)
        if not projection.short:
            return (f"; {format_bytes(projection.left)} is projected left after the start "
                    f"(headroom {headroom})"), [
                arithmetic,
                "That leaves the headroom, so the fallback does not run the host short: the pool "
                "only wastes memory (free and top count it as used).",
            ]
        short = format_bytes(released.headroom - released.left)
        return (f"; the start runs short of the {headroom} headroom even without the pool "
                f"(by {short}), so the pool is not what runs it short"), [
            arithmetic,
            f"Giving the pool back would still leave the start {short} short of the {headroom} "
            "headroom: the engine does not fit this host's memory whatever the pool holds (a host "
            "smaller than the engine is arena-fit's error), so the pool only adds to a shortfall it "
            "does not cause.",
        ]

    def _too_small(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        facts, (a, pool, need) = ctx.hugepages, self._arena(ctx)
        return self.finding(
            "too-small", Severity.ERROR,
            f"pool too small for hugepages: hugetlb: pool {format_count(pool.total)}, free "
            f"{format_count(pool.free)}, needed {format_count(need.pages)} ({need.arithmetic}): "
            "MAP_HUGETLB will fail and the engine will not start",
            detail=f"{format_count(a.taken)} pages are taken ({self._takers(facts, pool, a.taken)}). "
            f"hugetlb mode has no fallback: grow the pool by {format_count(a.missing)} pages, free the "
            "taken ones, or switch the engine to `hugepages: auto`.",
            evidence=evidence + self._config_evidence(ctx),
            fix=self._grow_fix(ctx, a.grow_to),
        )

    def _unused_thp(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        facts, pool = ctx.hugepages, ctx.pool_assessment.pool
        assert pool is not None
        return self.finding(
            "unused-pool", Severity.WARNING,
            f"pool of {pool_words(pool)} that nobody uses: free {format_count(pool.free)} of "
            f"{format_count(pool.total)}, no process holds any, and the engine runs on THP"
            f"{self._release(ctx).tail}",
            detail=("The pool is taken out of ordinary memory at once and stays out: no "
                    "other allocation can use it, and free and top count it as used. "
                    + self._release(ctx).detail).strip(),
            evidence=evidence,
            fix=None if facts.container else self._zero_fix(
                ctx, "hugepages/unused-pool", "nothing uses the pool; the engine runs on THP"),
        )

    def _unused_no_arena(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        pool = ctx.pool_assessment.pool
        assert pool is not None
        hint = ctx.config.arena_hint("pass --arena to check it fits the engine")
        return self.finding(
            "unused-pool", Severity.WARNING,
            f"pool of {pool_words(pool)} that nobody uses now (free {format_count(pool.free)} of "
            f"{format_count(pool.total)}); {hint}",
            detail="If the pool is for the engine (hugepages: auto or hugetlb), give its arena "
            "size so that the fit can be checked; otherwise it holds memory hostage.",
            evidence=evidence,
        )

    def _in_use(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        facts, a = ctx.hugepages, ctx.pool_assessment
        assert a.pool is not None
        users = ", ".join(f"{h.name} (pid {h.pid}, {format_bytes(h.bytes)})" for h in facts.holders[:5])
        why = ("the engine runs on THP" if a.mode == "thp"
               else f"no arena size to compare with ({ctx.config.arena_hint('--arena')})")
        return self.finding(
            "in-use", Severity.INFO,
            f"pool of {pool_words(a.pool)}, {format_count(a.pool.used)} in use"
            + (f" by {users}" if users else "") + f"; {why}",
            evidence=evidence,
        )

    def _fits(self, ctx: HostContext, v: PoolVerdict, evidence: Tuple[Evidence, ...]) -> Finding:
        a, pool, need = self._arena(ctx)
        spare = a.spare
        extra = f"; {format_count(spare)} pages ({format_bytes(spare * pool.size)}) beyond that stay idle" \
            if spare * pool.size >= GIB else ""
        held = f" ({format_count(a.engine_pages)} held by the running engine)" if a.engine_pages else ""
        return self.finding(
            "fits", Severity.OK,
            f"pool {format_count(pool.total)}, free {format_count(pool.free)}{held}: the arena's "
            f"{need.arithmetic} fit MAP_HUGETLB{extra}",
            evidence=evidence,
        )

    # -- helpers ----------------------------------------------------------------------------
    def _arena(self, ctx: HostContext) -> Tuple[PoolAssessment, PagePool, HugepageNeed]:
        """The assessment with its pool and the arena's need, for the cases that have both."""
        return self._pool_and_need(ctx.pool_assessment)

    def _pool_and_need(self, a: PoolAssessment) -> Tuple[PoolAssessment, PagePool, HugepageNeed]:
        assert a.pool is not None and a.need is not None
        return a, a.pool, a.need

    def _need(self, ctx: HostContext) -> HugepageNeed:
        need = ctx.pool_assessment.need
        assert need is not None
        return need

    def _trap_verdict(self, ctx: HostContext) -> TrapVerdict:
        trap = ctx.trap_verdict
        assert trap is not None
        return trap

    def _takers(self, facts: HugepageFacts, pool: PagePool, taken: int) -> str:
        return pool_takers(facts, pool, taken).text

    def _given_back(self, a: PoolAssessment, trap: TrapVerdict) -> str:
        """``46.88 GiB (its free pages and the running engine's`` (the caller closes it)."""
        engine = " and the running engine's" if a.engine_pages else ""
        return f"{format_bytes(trap.held_back)} (its free pages{engine}"

    def _host_words(self, facts: HugepageFacts) -> List[str]:
        """Overridden settings of the pool, and a container's pool that is the host's."""
        shadowed = shadowed_pool_setting(facts.sysctl)
        words = [] if shadowed is None else [shadowed.text]
        if facts.container:
            words.append(f"This is a container ({facts.container}): the pool belongs to the host; "
                         f"change {SYSCTL_KEY} there.")
        return words

    def _pool_evidence(self, facts: HugepageFacts) -> Tuple[Evidence, ...]:
        keys = ("HugePages_Total", "HugePages_Free", "HugePages_Rsvd", "HugePages_Surp")
        values = [f"{k}={facts.mem(k)}" for k in keys if facts.mem(k) is not None]
        if facts.default_size:
            values.append(f"Hugepagesize={facts.default_size // 1024} kB")
        if facts.mem("Hugetlb") is not None:
            values.append(f"Hugetlb={format_bytes(facts.mem('Hugetlb') or 0)}")
        evidence = [Evidence("/proc/meminfo", " ".join(values))] if values else []
        if facts.nr_hugepages is not None:
            evidence.append(Evidence("/proc/sys/vm/nr_hugepages", str(facts.nr_hugepages)))
        evidence += [Evidence(s.path, f"{s.key} = {s.value}") for s in facts.sysctl.setters(SYSCTL_KEY)]
        evidence += [Evidence(f"/proc/{h.pid}/status", f"Name={h.name} HugetlbPages={format_bytes(h.bytes)}")
                     for h in facts.holders[:5]]
        return tuple(evidence)

    def _config_evidence(self, ctx: HostContext) -> Tuple[Evidence, ...]:
        c = ctx.config
        source = c.source or "command line"
        model = c.sizes.model if c.sizes is not None and c.sizes.arena_how else None
        if model is not None:  # the arena is the model's, the mode the config's
            return (Evidence(source, f"hugepages={c.hugepages}"),
                    Evidence(model, f"arena={format_bytes(c.arena_bytes or 0)} (its routed experts)"))
        return (Evidence(source, f"arena={format_bytes(c.arena_bytes or 0)} hugepages={c.hugepages}"),)

    def _release(self, ctx: HostContext) -> PoolRelease:
        """Who else may use the default pool, before a fix gives it away."""
        return pool_release(ctx, ctx.hugepages.page_size)

    def _zero_fix(self, ctx: HostContext, finding: str, reason: str) -> Fix:
        """``vm.nr_hugepages = 0``, where nothing else may need the pool."""
        fix = sysctl_fix(((SYSCTL_KEY, "0", reason),), finding, ctx.hugepages.sysctl)
        return self._release(ctx).fix(fix)

    def _grow_fix(self, ctx: HostContext, pages: int) -> Optional[Fix]:
        facts = ctx.hugepages
        if facts.container:
            return None
        per_node = grow_per_node(facts, ctx.target_node)
        if per_node is not None:
            return node_pool_fix(per_node[0], pages, facts.page_size, per_node[1],
                                 overriding=facts.sysctl.setters(SYSCTL_KEY))
        return sysctl_fix(((SYSCTL_KEY, str(pages), "the engine maps its arena with MAP_HUGETLB"),),
                          "hugepages/too-small", facts.sysctl)
