"""Transparent hugepages: /sys/kernel/mm/transparent_hugepage and the configured boot setting
(``AnonHugePages`` comes parsed from ``HostContext.meminfo``)."""

from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

from strata_doctor.facts.cmdline import read_configured_cmdline
from strata_doctor.facts.parse import (
    parse_bracketed_choice,
    parse_int,
)
from strata_doctor.root import Root

THP_DIR = "/sys/kernel/mm/transparent_hugepage"


# -- transparent hugepages ----------------------------------------------------------------
class ThpFacts(NamedTuple):
    """Transparent hugepage settings, from ``/sys/kernel/mm/transparent_hugepage/``."""

    enabled: Optional[str]
    """``enabled``: always, madvise or never (the bracketed choice)."""
    defrag: Optional[str]
    """``defrag``: always, defer, defer+madvise, madvise or never."""
    shmem_enabled: Optional[str]
    """``shmem_enabled``: always, within_size, advise, never, deny or force."""
    khugepaged_defrag: Optional[int]
    """``khugepaged/defrag``: 1 when khugepaged may compact memory to collapse pages."""
    anon_huge_bytes: Optional[int]
    """``AnonHugePages:`` in ``/proc/meminfo``: anonymous memory in THP now."""
    configured: Tuple[Tuple[str, str], ...] = ()
    """(file, ``transparent_hugepage=`` value) for the next boot's command line."""
    raw: Tuple[Tuple[str, str], ...] = ()
    """(file, its text) as read, for evidence."""

    @property
    def available(self) -> bool:
        """Whether the kernel exposes THP at all."""
        return self.enabled is not None


def read_thp(root: Root, meminfo: Mapping[str, int]) -> ThpFacts:
    """Read the THP settings through ``root``; ``meminfo`` is ``/proc/meminfo`` as
    ``read_meminfo`` parsed it."""
    raw: List[Tuple[str, str]] = []

    def choice(name: str) -> Optional[str]:
        text = root.read(f"{THP_DIR}/{name}")
        if text is None:
            return None
        raw.append((f"{THP_DIR}/{name}", text.strip()))
        return parse_bracketed_choice(text)

    enabled, defrag, shmem = choice("enabled"), choice("defrag"), choice("shmem_enabled")
    khugepaged = parse_int(root.read(f"{THP_DIR}/khugepaged/defrag"))
    configured = [(path, cmdline.thp) for path, cmdline in read_configured_cmdline(root) if cmdline.thp]
    return ThpFacts(enabled, defrag, shmem, khugepaged, meminfo.get("AnonHugePages"),
                    tuple(configured), tuple(raw))


def thp_data(facts: ThpFacts) -> Dict[str, object]:
    """``facts.thp`` in the JSON output."""
    return {
        "enabled": facts.enabled,
        "defrag": facts.defrag,
        "shmem_enabled": facts.shmem_enabled,
        "khugepaged_defrag": facts.khugepaged_defrag,
        "anon_huge_bytes": facts.anon_huge_bytes,
        "configured": [{"file": f, "transparent_hugepage": v} for f, v in facts.configured],
    }
