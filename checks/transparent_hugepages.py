"""transparent-hugepages: will the arena get huge pages when it relies on THP?"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.hugepage_pools import size_dir_name
from strata_doctor.facts.hugepages import SYSCTL_KEY, HugepageFacts, format_page_size
from strata_doctor.facts.numa import NODE_DIR
from strata_doctor.facts.parse import format_bytes, format_count
from strata_doctor.facts.thp import THP_DIR, ThpFacts
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, RuntimeAction, Severity
from strata_doctor.rules import thp as thp_rules
from strata_doctor.rules.pool import OtherSizes, PoolAssessment, other_sizes
from strata_doctor.rules.thp import thp_case, thp_configured_on, thp_reliance

STALLING_DEFRAG = ("always",)

WHY_THP = {
    thp_rules.THP_MODE: "the engine runs with hugepages: thp",
    thp_rules.HUGETLB_MODE: "the engine maps its arena with MAP_HUGETLB",
    thp_rules.TRAP: "MAP_HUGETLB will fail (hugepages/trap), so the engine falls back to THP",
    thp_rules.FALLBACK: "MAP_HUGETLB cannot get the arena's pages, so the engine falls back to THP",
    thp_rules.NO_POOL: "there is no hugepage pool, so the engine (hugepages: auto) uses THP",
    thp_rules.NO_ARENA: "the engine (hugepages: auto) falls back to THP if the pool is short",
    thp_rules.POOL_FITS: "the pool fits, so the engine (hugepages: auto) uses MAP_HUGETLB and THP only for "
    "the rest",
}
"""Why the arena does or does not rely on THP, for each reason without a pending pool."""


class TransparentHugepages(Check):
    """Checks that transparent hugepages are on when the engine's arena relies on them.

    With ``hugepages: thp``, or ``auto`` without a hugepage pool that fits, the arena is
    backed by transparent hugepages. On the seed box that is what the engine ran on once
    ``vm.nr_hugepages = 0`` removed the trap: 46.84 GiB in 2 MiB pages instead of 12.3
    million 4 KiB pages and their TLB misses. ``enabled`` = ``never`` then is a warning.
    ``always`` gives every large anonymous mapping huge pages; ``madvise`` only those that
    ask with madvise(MADV_HUGEPAGE), as the engine's arena does, and spares the rest of
    the host the memory bloat and khugepaged work. ``defrag`` = ``always`` makes every
    THP fault compact memory synchronously when no free 2 MiB block is left: loading the
    arena then stalls, and stalls are memory pressure, which is what systemd-oomd acts on.

    Reads ``/sys/kernel/mm/transparent_hugepage/enabled``, ``defrag``, ``shmem_enabled``
    and ``khugepaged/defrag``, ``AnonHugePages`` in ``/proc/meminfo``, and
    ``transparent_hugepage=`` on the next boot's kernel command line (GRUB or
    ``/etc/kernel/cmdline``) for a change that is configured but not in effect.
    """

    id = "transparent-hugepages"
    title = "Transparent hugepages"
    findings = ("never", "configured", "madvise", "always", "enabled", "not-needed", "off", "defrag-stalls")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if not ctx.thp.available:
            why = ctx.why_unread(f"{THP_DIR}/enabled") or "missing"
            return (f"cannot read {THP_DIR}/enabled ({why}): a kernel without THP, or a container "
                    "that hides it")
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        thp = ctx.thp
        a = ctx.pool_assessment
        evidence = tuple(Evidence(path, text) for path, text in thp.raw)
        if thp.anon_huge_bytes is not None:
            evidence += (Evidence("/proc/meminfo", f"AnonHugePages={format_bytes(thp.anon_huge_bytes)}"),)
        why, pools = self._why_thp(ctx, a)
        yield self._enabled(ctx, thp, a, why, evidence + pools)
        defrag = self._defrag(thp, a)
        if defrag is not None:
            yield defrag

    def _enabled(
        self, ctx: HostContext, thp: ThpFacts, a: PoolAssessment, why: str,
        evidence: Tuple[Evidence, ...],
    ) -> Finding:
        found = thp_case(thp, a.relies_on_thp)
        if found == "never":
            return self._never(ctx, thp, why, evidence)
        if found == "off":
            return self.finding("off", Severity.OK,
                                "THP is off (enabled=never); the engine maps its arena with "
                                "MAP_HUGETLB and does not need it", evidence=evidence)
        if found == "configured":
            pending = thp_configured_on(thp)
            assert pending is not None
            return self.finding(
                "configured", Severity.INFO,
                f"configured: transparent_hugepage={pending[1]} in {pending[0]}; takes effect "
                "after a reboot (THP is off until then)", evidence=evidence)
        if found == "not-needed":
            return self.finding(
                "not-needed", Severity.OK,
                f"THP enabled={thp.enabled}; the arena does not need it ({why})", evidence=evidence)
        if found == "always":
            return self.finding(
                "always", Severity.OK,
                f"THP enabled=always: the arena gets huge pages ({why})",
                detail="always gives every large anonymous mapping of every process huge pages, "
                "which can bloat memory and keep khugepaged busy; madvise gives them only to "
                "regions that ask, as the engine's arena does, and is enough for the engine.",
                evidence=evidence,
            )
        return self.finding(
            found, Severity.OK,
            f"THP enabled={thp.enabled}: the arena gets huge pages when it asks with "
            f"madvise(MADV_HUGEPAGE) ({why})",
            evidence=evidence,
        )

    def _never(self, ctx: HostContext, thp: ThpFacts, why: str, evidence: Tuple[Evidence, ...]) -> Finding:
        """THP is off, and the arena relies on it."""
        arena = ctx.config.arena_bytes
        pages = f" ({-(-arena // 4096):,} 4 KiB pages instead of {-(-arena // 2**21):,} 2 MiB ones)" \
            if arena else ""
        return self.finding(
            "never", Severity.WARNING,
            f"THP is off (enabled=never) but {why}: the arena will sit in 4 KiB pages{pages}",
            detail="Every expert read then walks page tables through far more TLB misses. "
            "Set enabled to madvise (the arena asks for huge pages; the rest of the host is "
            "unaffected) or always.",
            evidence=evidence,
            fix=None if ctx.hugepages.container or ctx.hugepages.sys_readonly else Fix(
                summary="set transparent_hugepage/enabled to madvise now and at boot",
                actions=(RuntimeAction("write-sysfs", f"{THP_DIR}/enabled", "madvise"),),
                manual=(ManualStep("Add `transparent_hugepage=madvise` to the kernel command line "
                                   "so that it survives a reboot."),),
                takes_effect="now",
            ),
        )

    def _defrag(self, thp: ThpFacts, a: PoolAssessment) -> Optional[Finding]:
        if thp.enabled == "never" or thp.defrag not in STALLING_DEFRAG:
            return None
        return self.finding(
            "defrag-stalls", Severity.INFO,
            f"THP defrag={thp.defrag}: a THP fault with no free 2 MiB block compacts memory "
            "synchronously, so loading the arena can stall",
            detail="Those stalls count as memory pressure (/proc/pressure/memory), which is what "
            "systemd-oomd acts on. defer+madvise stalls only regions that asked for huge pages; "
            "defer never stalls and lets kcompactd work in the background."
            + (" The engine relies on THP here, so its load pays this." if a.relies_on_thp else ""),
            evidence=(Evidence(f"{THP_DIR}/defrag", thp.defrag or ""),),
        )

    def _why_thp(self, ctx: HostContext, a: PoolAssessment) -> Tuple[str, Tuple[Evidence, ...]]:
        """Why the arena does or does not rely on THP, and the pools the words name."""
        reliance = thp_reliance(ctx.hugepages, a, lambda: ctx.trap_verdict)
        pending = reliance.pending
        if pending is not None and reliance.reason == thp_rules.FIX_WRITTEN:
            return (f"the pool's fix is written: {SYSCTL_KEY} = 0 in {pending.path}, so the "
                    "engine runs on THP"), ()
        if pending is not None:
            return (f"MAP_HUGETLB cannot get the arena's pages until {SYSCTL_KEY} = "
                    f"{format_count(pending.pages)} in {pending.path} takes effect; the engine "
                    "falls back to THP until then"), ()
        others = other_sizes(ctx.hugepages)
        if reliance.reason == thp_rules.NO_POOL and others.bytes:
            # The hugepages check counts these pools too: "no hugepage pool" beside them is false.
            return (f"there is no pool of the default hugepage size, "
                    f"{format_page_size(ctx.hugepages.page_size)}, so the engine (hugepages: auto) "
                    "uses THP; MAP_HUGETLB without a size flag never draws on pools of other sizes "
                    f"({others.text})"), _pool_evidence(ctx.hugepages, others)
        return WHY_THP[reliance.reason], ()


def _pool_evidence(facts: HugepageFacts, others: OtherSizes) -> Tuple[Evidence, ...]:
    """The sysfs files behind the other sizes' counts, as the hugepages check shows them."""
    evidence = tuple(Evidence(p.source, f"nr_hugepages={p.total} free_hugepages={p.free}")
                     for p in others.pools)
    return evidence + tuple(
        Evidence(f"{NODE_DIR}/node{n.node}/hugepages/{size_dir_name(n.size)}",
                 f"nr_hugepages={n.total} free_hugepages={n.free}") for n in others.nodes)
