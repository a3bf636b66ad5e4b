"""The seed's trap: a hugepage pool the arena cannot use, and whether it is only held-back
memory or the chain to a restart loop (:func:`assess_trap`).
"""

from typing import NamedTuple, Optional

from strata_doctor.config import EngineConfig
from strata_doctor.facts.hugepages import HugepageFacts
from strata_doctor.facts.oomd import OomdFacts
from strata_doctor.rules.memory import MemoryProjection, project_memory
from strata_doctor.rules.oomd import Exposure, restart_looping
from strata_doctor.rules.pool import PoolAssessment

CHAIN = "hugepage trap → THP fallback → memory pressure → oomd kill → restart loop"
"""The seed's failure chain, as findings name it."""


class TrapVerdict(NamedTuple):
    """Whether a pool the arena cannot use (hugepages: auto, MAP_HUGETLB fails) is the
    seed's trap, from the host's own numbers.

    It is when the pool makes the difference: the memory projected after the THP fallback
    falls short of the headroom, and giving the pool back (:attr:`PoolAssessment.held_back`)
    would leave the headroom (:attr:`pool_short`); or systemd-oomd watches the engine and
    the fallback drives it into pressure (:attr:`chain`). On a host too small for the
    engine whatever the pool holds, arena-fit carries the error and the pool is a warning.
    """

    held_back: int
    """Bytes that ``vm.nr_hugepages = 0`` would give back (:attr:`PoolAssessment.held_back`)."""
    projection: Optional[MemoryProjection]
    """Ordinary memory after the start with the pool as it is; None without MemAvailable."""
    watched: bool
    """systemd-oomd is active on cgroup v2 and can pick the engine (watched, not protected)."""
    killed: bool
    """The journal shows oomd kills of the engine and its unit is restart-looping."""

    @property
    def released(self) -> Optional[MemoryProjection]:
        """The projection with the pool given back."""
        p = self.projection
        return p._replace(given_back=self.held_back) if p is not None else None

    @property
    def pool_short(self) -> bool:
        """Short of the headroom because of the pool: short now, not short without it."""
        released = self.released
        return self.projection is not None and released is not None and self.projection.short \
            and not released.short

    @property
    def cured(self) -> bool:
        """Giving the pool back leaves the headroom (or the projection is unknown)."""
        released = self.released
        return released is None or not released.short

    @property
    def chain(self) -> bool:
        """The seed's chain: oomd watches the engine, and the fallback drives it into
        pressure (projected short because of the pool, or oomd has already killed the
        engine into a restart loop) which the pool's memory would relieve."""
        return self.watched and self.held_back > 0 and self.cured and (self.pool_short or self.killed)

    @property
    def error(self) -> bool:
        """The seed's trap: an error. Otherwise the pool only holds memory back."""
        return self.held_back > 0 and (self.pool_short or self.chain)


def assess_trap(
    facts: HugepageFacts, config: EngineConfig, a: PoolAssessment, engine_resident: int,
    oomd: OomdFacts, exposure: Exposure,
) -> Optional[TrapVerdict]:
    """Judge a pool the arena cannot use (:attr:`PoolAssessment.trap`); None otherwise."""
    if not a.trap:
        return None
    watched = oomd.active and oomd.cgroup_v2 is not False and exposure.exposed
    killed = bool(oomd.engine_kills()) and restart_looping(oomd)
    return TrapVerdict(a.held_back, project_memory(facts, config, a, engine_resident), watched, killed)
