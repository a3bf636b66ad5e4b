"""Who holds the hugepage pool's pages: processes, orphaned hugetlbfs files, and pages no
visible process accounts for; and whether the orphans alone make MAP_HUGETLB fail.
"""

from typing import NamedTuple, Optional, Tuple

from strata_doctor.facts.hugepage_pools import PagePool
from strata_doctor.facts.hugepages import SYSCTL_KEY, HugepageFacts
from strata_doctor.facts.hugetlbfs import HugetlbfsFile
from strata_doctor.facts.parse import format_bytes, format_count
from strata_doctor.facts.sysctl import SysctlConfig, SysctlSetting
from strata_doctor.rules.pool import PoolAssessment


def orphan_pages(facts: HugepageFacts, size: int) -> int:
    """Pages of one size that orphaned hugetlbfs files hold."""
    pages = 0
    for mount in facts.mounts:
        if (mount.page_size or facts.page_size) != size:
            continue
        pages += sum(-(-f.size // size) for f in mount.files if f.orphan and f.size)
    return pages


def file_pages(facts: HugepageFacts, f: HugetlbfsFile) -> Optional[int]:
    """Pages one hugetlbfs file holds, in its mount's page size; None when its size is
    unknown or zero."""
    if not f.size:
        return None
    page = next((m.page_size for m in facts.mounts if f in m.files and m.page_size), None) \
        or facts.page_size
    return -(-f.size // page)


def orphan_words(facts: HugepageFacts, f: HugetlbfsFile, path: bool = True) -> str:
    """``/dev/hugepages/x (16.06 GiB, 8,221 pages, owner alice)``; without the path when
    ``path`` is false."""
    size = format_bytes(f.size) if f.size is not None else "size unknown"
    pages = file_pages(facts, f)
    text = f"{size}{'' if pages is None else f', {format_count(pages)} pages'}, {f.owner_text}"
    return f"{f.path} ({text})" if path else text


class PoolTaker(NamedTuple):
    """A process that holds pages of the pool."""

    name: str
    """Its command name."""
    pid: int
    """Its process id."""
    pages: int
    """Pages of the pool it holds."""


class PoolTakers(NamedTuple):
    """Where the pool's taken pages are."""

    processes: Tuple[PoolTaker, ...]
    """The first four processes that hold pages."""
    orphaned: int
    """Pages orphaned hugetlbfs files hold."""
    unseen: int
    """Taken pages none of the above accounts for (SysV segments, another PID namespace,
    maps that need root to read); 0 when every page is accounted for."""
    more: Tuple[int, int] = (0, 0)
    """(processes, pages) of the holders after the first four: seen, only not named."""

    @property
    def text(self) -> str:
        """The account, each holder with its pages: ``engine pid 4242: 8,221; orphaned
        hugetlbfs files: 100``."""
        parts = [f"{p.name} pid {p.pid}: {format_count(p.pages)}" for p in self.processes]
        if self.more[0]:
            parts.append(f"{self.more[0]} more process{'' if self.more[0] == 1 else 'es'}: "
                         f"{format_count(self.more[1])}")
        if self.orphaned:
            parts.append(f"orphaned hugetlbfs files: {format_count(self.orphaned)}")
        if self.unseen:
            parts.append(f"{format_count(self.unseen)} by no visible process (SysV SHM_HUGETLB segments, "
                         "another PID namespace, or maps that need root to read)")
        return "; ".join(parts) if parts else "holders unknown"


def pool_takers(facts: HugepageFacts, pool: PagePool, taken: int) -> PoolTakers:
    """Account for ``taken`` pages of ``pool``."""
    processes = tuple(PoolTaker(h.name, h.pid, h.bytes // pool.size) for h in facts.holders[:4])
    rest = facts.holders[4:]
    more = (len(rest), sum(h.bytes // pool.size for h in rest))
    orphaned = orphan_pages(facts, pool.size)
    unseen = taken - sum(p.pages for p in processes) - more[1] - orphaned
    return PoolTakers(processes, orphaned, max(0, unseen), more)


class OrphanBlock(NamedTuple):
    """hugetlb mode fails only because orphaned hugetlbfs files hold pages: deleting them
    is the fix."""

    pages: int
    """Pages the orphaned files hold."""
    available: int
    """Pages free for the arena once they are deleted."""


def orphans_block(facts: HugepageFacts, a: PoolAssessment) -> Optional[OrphanBlock]:
    """The orphans that alone keep hugetlb mode's arena out of the pool; None otherwise."""
    if not (a.fails and a.mode == "hugetlb" and a.pool is not None and a.need is not None):
        return None
    pages = orphan_pages(facts, a.pool.size)
    if a.available + pages < a.need.pages:
        return None
    return OrphanBlock(pages, a.available + pages)


class ShadowedSetting(NamedTuple):
    """Earlier settings of the pool that a later file overrides."""

    earlier: Tuple[SysctlSetting, ...]
    """The overridden settings, in the order sysctl applies them."""
    last: SysctlSetting
    """The setting that wins."""

    @property
    def text(self) -> str:
        """Which settings lose to which, and why the last one wins."""
        lost = "; ".join(f"{s.key} = {s.value} in {s.path}" for s in self.earlier)
        last = self.last
        return (f"{lost} is overridden by {last.key} = {last.value} in {last.path}, which is "
                "applied later (sysctl.d applies files in name order, /etc/sysctl.conf last; "
                "the last wins).")


def shadowed_pool_setting(sysctl: SysctlConfig) -> Optional[ShadowedSetting]:
    """Earlier ``vm.nr_hugepages`` values a later file overrides; None when none differ."""
    setters = sysctl.setters(SYSCTL_KEY)
    if len(setters) < 2:
        return None
    last = setters[-1]
    earlier = tuple(s for s in setters[:-1] if s.value.strip() != last.value.strip())
    return ShadowedSetting(earlier, last) if earlier else None
