"""hugepages: does the hugepage pool fit the engine, or trap it?"""

from typing import Iterator, Optional, Sequence, Tuple

from strata_doctor.check import Command
from strata_doctor.checks.hugepages.pool_words import DefaultPoolWords
from strata_doctor.checks.hugepages.release import pool_release
from strata_doctor.context import HostContext
from strata_doctor.facts.hugepage_pools import size_dir_name
from strata_doctor.facts.hugepages import SYSCTL_KEY, HugepageFacts, format_page_size
from strata_doctor.facts.numa import NODE_DIR
from strata_doctor.facts.oomd import oomd_commands
from strata_doctor.facts.parse import format_bytes, format_count
from strata_doctor.fix.memory import node_pool_fix, size_pool_fix
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity
from strata_doctor.rules.node_pools import NodeShortfall, boot_pools, node_shortfall
from strata_doctor.rules.pool import PoolAssessment, pool_words
from strata_doctor.rules.pool_holders import (
    OrphanBlock,
    orphan_words,
    orphans_block,
)
from strata_doctor.rules.pool_verdict import judge_pool


class Hugepages(DefaultPoolWords):
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
        block = orphans_block(facts, a)
        yield from self._default_pool(ctx, judge_pool(facts, a, lambda: ctx.trap_verdict, block is not None))
        shortfall = node_shortfall(facts, a, ctx.target_node, ctx.engine_pid)
        if shortfall is not None:
            yield self._wrong_node(facts, shortfall)
        yield from self._other_sizes(ctx)
        yield from self._orphans(facts, a, block)
        yield from self._surplus(facts)
        if facts.unreadable:
            yield self.finding(
                "unreadable", Severity.INFO,
                "could not read: " + "; ".join(f"{p} ({why})" for p, why in facts.unreadable),
                detail="Holders and orphaned hugetlbfs files may be missing from these findings. "
                "Run as root to see every process's maps and every hugetlbfs file.",
            )

    # -- nodes, other sizes, orphans, surplus -----------------------------------------------
    def _wrong_node(self, facts: HugepageFacts, s: NodeShortfall) -> Finding:
        counts = s.counts
        evidence = tuple(
            Evidence(f"/sys/devices/system/node/node{n.node}/hugepages/hugepages-{n.size // 1024}kB",
                     f"nr_hugepages={n.total} free_hugepages={n.free}")
            for n in s.nodes
        )
        if s.configured is not None:
            return self.finding(
                "configured", Severity.INFO,
                f"configured: hugepages={s.target}:{format_count(s.configured[0])} in {s.configured[1]}; "
                f"takes effect after a reboot (pool now {counts})", evidence=evidence)
        fix = None if facts.container or facts.sys_readonly else node_pool_fix(
            s.target, s.grow_to, facts.page_size, s.others,
            overriding=facts.sysctl.setters(SYSCTL_KEY), boot_config=boot_pools(facts))
        if s.engine is not None:
            evidence += (Evidence(f"/proc/{s.engine.pid}/numa_maps",
                                  f"the engine's hugetlb pages: {s.engine_where}"),)
        return self.finding(
            "wrong-node", Severity.WARNING,
            f"hugepage pool not on the GPU's node {s.target}: {counts}; {format_count(s.elsewhere)} of the "
            f"arena's {format_count(s.need)} pages would come from other nodes",
            detail="MAP_HUGETLB takes pages from the node the memory policy prefers and then from "
            "any node with free pages, so the arena lands away from the GPU and every expert read "
            "crosses the socket link. vm.nr_hugepages spreads the pool over all nodes; per-node "
            "pools are set through /sys/devices/system/node/N/hugepages/ or the kernel command "
            "line (hugepages=<node>:<count>).",
            evidence=evidence, fix=fix,
        )

    def _other_sizes(self, ctx: HostContext) -> Iterator[Finding]:
        facts = ctx.hugepages
        for pool in facts.pools:
            if pool.size == facts.page_size or pool.total == 0:
                continue
            ev: Tuple[Evidence, ...] = (
                Evidence(pool.source, f"nr_hugepages={pool.total} free_hugepages={pool.free}"),)
            ev += tuple(Evidence(f"{NODE_DIR}/node{n.node}/hugepages/{size_dir_name(n.size)}",
                                 f"nr_hugepages={n.total} free_hugepages={n.free}")
                        for n in facts.nodes_of(pool.size) if n.total)
            if pool.used:
                yield self.finding("in-use", Severity.INFO,
                                   f"pool of {pool_words(pool)}, {format_count(pool.used)} in use",
                                   evidence=ev)
                continue
            release = pool_release(ctx, pool.size)
            fix = None if facts.container or facts.sys_readonly else release.fix(
                size_pool_fix(pool.size, "hugepages/unused-pool"))
            yield self.finding(
                "unused-pool", Severity.WARNING,
                f"pool of {pool_words(pool)} that nobody uses (not the default size, so MAP_HUGETLB "
                f"without a size flag never draws on it){release.tail}",
                detail=release.detail, evidence=ev, fix=fix,
            )

    def _orphans(
        self, facts: HugepageFacts, a: PoolAssessment, block: Optional[OrphanBlock],
    ) -> Iterator[Finding]:
        orphans = facts.orphans
        if not orphans:
            return
        total = sum(f.size or 0 for f in orphans)
        listing = "; ".join(orphan_words(facts, f) for f in orphans[:5])
        more = f" and {len(orphans) - 5} more" if len(orphans) > 5 else ""
        one = len(orphans) == 1
        summary = (f"{len(orphans):,} hugetlbfs file{'' if one else 's'} that no process maps "
                   f"hold{'s' if one else ''} {format_bytes(total)}")
        detail = ("A file in hugetlbfs keeps its pages until it is deleted, even when no process "
                  "has it open: a crashed or killed program leaves them behind, and the pool looks taken "
                  "for no visible reason. Delete them once sure nothing will reopen them.")
        severity = Severity.WARNING
        if block is not None:
            severity = Severity.ERROR
            summary, detail = self._orphans_blocking(a, block, summary, detail)
        yield self.finding(
            "orphans", severity,
            f"{summary}: {listing}{more}",
            detail=detail,
            evidence=tuple(Evidence(f.path, orphan_words(facts, f, path=False)) for f in orphans[:20]),
            fix=self._orphans_fix(facts),
        )

    def _orphans_fix(self, facts: HugepageFacts) -> Fix:
        return Fix(
            summary="delete the orphaned hugetlbfs files (by hand: they may be someone's data)",
            manual=tuple(ManualStep(f"rm -- {f.path}  # {orphan_words(facts, f)}") for f in facts.orphans),
            takes_effect="now",
        )

    def _orphans_blocking(
        self, a: PoolAssessment, block: OrphanBlock, summary: str, detail: str,
    ) -> Tuple[str, str]:
        """(summary, detail) of orphans that alone make hugetlb mode's MAP_HUGETLB fail."""
        _, pool, need = self._pool_and_need(a)
        return (
            f"MAP_HUGETLB will fail: pool {format_count(pool.total)}, free {format_count(pool.free)}, "
            f"needed {format_count(need.pages)} ({need.arithmetic}), because {summary} "
            f"({format_count(block.pages)} pages); delete them and the pool suffices",
            f"The engine runs with hugepages: hugetlb and has no fallback, so it will not "
            f"start. {detail} Without them {format_count(block.available)} pages are free "
            f"for the arena's {format_count(need.pages)}.",
        )

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
