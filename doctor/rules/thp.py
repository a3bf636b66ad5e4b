"""Whether the arena relies on transparent hugepages, and why (:func:`thp_reliance`), and
what THP's settings mean for it (:func:`thp_case`).
"""

from typing import Callable, NamedTuple, Optional, Tuple

from strata_doctor.facts.hugepages import HugepageFacts
from strata_doctor.facts.thp import ThpFacts
from strata_doctor.rules.pool import PendingPool, PoolAssessment, pool_fix_pending
from strata_doctor.rules.trap import TrapVerdict

THP_MODE = "thp-mode"
"""The engine runs with ``hugepages: thp``."""
HUGETLB_MODE = "hugetlb-mode"
"""The engine maps its arena with MAP_HUGETLB (``hugepages: hugetlb``)."""
FIX_WRITTEN = "fix-written"
"""MAP_HUGETLB fails and the pool's fix (``vm.nr_hugepages = 0``) is written: THP it is."""
FIX_PENDING = "fix-pending"
"""MAP_HUGETLB fails until a configured pool takes effect."""
TRAP = "trap"
"""MAP_HUGETLB fails: the hugepage trap."""
FALLBACK = "fallback"
"""MAP_HUGETLB cannot get the arena's pages: the engine falls back to THP."""
NO_POOL = "no-pool"
"""No hugepage pool: ``hugepages: auto`` uses THP."""
NO_ARENA = "no-arena"
"""No arena size: THP if the pool is short."""
POOL_FITS = "pool-fits"
"""The pool fits: THP only for the rest."""


class ThpReliance(NamedTuple):
    """Why the arena does (or does not) rely on transparent hugepages."""

    reason: str
    """One of this module's reasons (:data:`TRAP`, :data:`POOL_FITS`...)."""
    pending: Optional[PendingPool]
    """The configured pool :data:`FIX_WRITTEN` and :data:`FIX_PENDING` name."""


def thp_reliance(
    facts: HugepageFacts, a: PoolAssessment, trap: Callable[[], Optional[TrapVerdict]],
) -> ThpReliance:
    """The reason, from the hugepages check's own answers (the pool assessment and the trap
    verdict), so that THP's finding names the finding the pool gives, also once its fix is
    written. ``trap`` gives the trap verdict; it is asked only where MAP_HUGETLB fails and no
    fix is pending, since it reads systemd-oomd's facts."""
    if a.mode in ("thp", "hugetlb"):
        return ThpReliance(THP_MODE if a.mode == "thp" else HUGETLB_MODE, None)
    if a.fails and a.mode == "auto":
        return _falls_back(facts, a, trap)
    if not a.uses_pool:
        return ThpReliance(NO_POOL, None)
    return ThpReliance(NO_ARENA if a.need is None else POOL_FITS, None)


def _falls_back(
    facts: HugepageFacts, a: PoolAssessment, trap: Callable[[], Optional[TrapVerdict]],
) -> ThpReliance:
    pending = pool_fix_pending(facts, a)
    if pending is not None:
        return ThpReliance(FIX_WRITTEN if pending.pages == 0 else FIX_PENDING, pending)
    verdict = trap()
    return ThpReliance(TRAP if verdict is not None and verdict.error else FALLBACK, None)


def thp_configured_on(thp: ThpFacts) -> Optional[Tuple[str, str]]:
    """(file, value) of the first boot setting that turns THP on; None when none does."""
    return next(((f, v) for f, v in thp.configured if v in ("always", "madvise")), None)


def thp_case(thp: ThpFacts, relies: bool) -> str:
    """The finding THP's ``enabled`` gives, ``relies`` being whether the arena relies on THP:
    ``off``, ``configured``, ``never``, ``not-needed``, ``always``, ``madvise`` or
    ``enabled``."""
    if thp.enabled == "never":
        if not relies:
            return "off"
        return "configured" if thp_configured_on(thp) is not None else "never"
    if not relies:
        return "not-needed"
    if thp.enabled in ("always", "madvise"):
        return thp.enabled
    return "enabled"
