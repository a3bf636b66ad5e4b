"""The engine's exposure to systemd-oomd, and whether it is in a restart loop."""

from typing import NamedTuple, Optional, Tuple

from strata_doctor.config import DEFAULT_CONFIG, EngineConfig
from strata_doctor.facts.hugepages import HugepageFacts
from strata_doctor.facts.oomd import OomdFacts
from strata_doctor.facts.oomd_dump import Watched
from strata_doctor.rules.pool_users import OPT_IN, PoolUsers, other_pool_users, pool_held


# -- systemd-oomd ------------------------------------------------------------------------
class Exposure(NamedTuple):
    """Whether systemd-oomd can kill the engine, and what protects it."""

    watched: Tuple[Watched, ...]
    """Watched cgroups on the engine's path (itself or an ancestor)."""
    preference: str
    """The engine unit's loaded ManagedOOMPreference (``none`` when unset)."""
    honoured: bool
    """Whether oomd honours a preference for the engine's cgroup (root-owned: a system
    service, not a unit or scope under ``user@UID.service``)."""
    configured: Optional[Tuple[str, str]]
    """(value, file) of ManagedOOMPreference in the engine unit's files on disk."""
    swap_usable: bool
    """Whether the host has swap (ManagedOOMSwap cannot fire without it)."""

    @property
    def effective_watch(self) -> Tuple[Watched, ...]:
        """The watches that can fire: pressure always, swap only with swap."""
        return tuple(w for w in self.watched if w.kind == "memory-pressure" or self.swap_usable)

    @property
    def protected(self) -> bool:
        """``avoid`` or ``omit`` is loaded and honoured."""
        return self.honoured and self.preference in ("avoid", "omit")

    @property
    def pending(self) -> bool:
        """``avoid``/``omit`` is written in a unit file but not loaded yet."""
        return (self.honoured and not self.protected and self.configured is not None
                and self.configured[0] in ("avoid", "omit"))

    @property
    def exposed(self) -> bool:
        """oomd can pick the engine as its victim."""
        return bool(self.effective_watch) and not self.protected


def assess_exposure(facts: OomdFacts) -> Exposure:
    """How exposed the engine is to systemd-oomd (whatever oomd's state)."""
    engine = facts.engine_settings
    preference = (engine.preference if engine and engine.shown else "") or "none"
    configured = engine.on_disk("ManagedOOMPreference") if engine else None
    honoured = facts.engine_cgroup is not None and facts.user_uid is None
    swap = bool(facts.swap_total)
    return Exposure(facts.watched(), preference, honoured, configured, swap)


# -- the seed's trap, from the numbers ------------------------------------------------------
def restart_looping(facts: OomdFacts) -> bool:
    """The engine's unit restarts after failures (NRestarts, Result=oom-kill, auto-restart)."""
    return bool(facts.n_restarts) or facts.result == "oom-kill" or "auto-restart" in facts.active_state \
        or facts.active_state.startswith(("failed", "activating"))


# -- how the chain's first link breaks ------------------------------------------------------
class ChainBreak(NamedTuple):
    """How the trap chain's first link breaks: ``vm.nr_hugepages = 0``, the fix of
    hugepages/trap, unless the pool's other users may need it and the config does not opt
    in, where that fix leaves the pool alone (the hugepages check's own decision)."""

    users: PoolUsers
    """Everything but the engine that may use the default pool (rules.pool_users)."""
    opted_in: bool
    """The config says ``release_pool: true``."""
    config: str
    """The config file the opt-in goes in."""

    @property
    def by_hand(self) -> bool:
        """Whether the pool's fix leaves it alone, so only the operator can break the link."""
        return pool_held(self.users, self.opted_in)

    @property
    def text(self) -> str:
        """The detail's last step, as the hugepages fix will act."""
        if not self.by_hand:
            return "Break the first link: vm.nr_hugepages = 0 (the fix of hugepages/trap) ends the chain"
        return ("Break the first link by hand: the fix of hugepages/trap leaves the pool alone, "
                f"as other programs may need it: {self.users.text}. Move them off the pool or "
                "shrink it to what they need, or, once sure none needs it, add "
                f"`{OPT_IN}` to {self.config} and run `strata-doctor fix` again, which then sets "
                "vm.nr_hugepages = 0 and ends the chain")


def chain_break(facts: HugepageFacts, config: EngineConfig, engine_pid: Optional[int]) -> ChainBreak:
    """How the chain's first link breaks: the default pool's other users and the opt-in, as
    the hugepages check weighs them before its fix gives the pool away."""
    users = other_pool_users(facts, facts.page_size, engine_pid, config.unit)
    return ChainBreak(users, config.release_pool, config.source or DEFAULT_CONFIG)
