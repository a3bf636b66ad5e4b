"""Giving a pool away only where nothing else may need it: the words and the fix of every
hugepages finding that would release a pool (rules/pool_users.py decides who else may)."""

from typing import NamedTuple

from strata_doctor.context import HostContext
from strata_doctor.facts.hugepages import format_page_size
from strata_doctor.model import Fix, ManualStep
from strata_doctor.rules.pool_users import OPT_IN, PoolUsers, other_pool_users, pool_held


class PoolRelease(NamedTuple):
    """Whether a pool of one size may be released, and who else may use it."""

    users: PoolUsers
    """Everything but the engine that may use the pool."""
    opted_in: bool
    """The config says ``release_pool: true``."""
    config: str
    """The config file to write it in."""
    size: int
    """The pool's page size."""

    @property
    def held(self) -> bool:
        """Whether the fix leaves the pool alone."""
        return pool_held(self.users, self.opted_in)

    @property
    def tail(self) -> str:
        """The summary's last clause: empty where nothing else may use the pool."""
        if not self.users.any:
            return ""
        if self.opted_in:
            return f"; other users may need it, but {OPT_IN} lets the fix release it: {self.users.text}"
        return f"; other users may need it, so the fix leaves it alone: {self.users.text}"

    @property
    def detail(self) -> str:
        """The sentence the detail ends with; empty where nothing else may use the pool."""
        if not self.users.any:
            return ""
        return (f"Before giving the pool away, ask its other possible users: {self.users.text}. They "
                "take their pages when they start, so a pool released while they are stopped makes "
                f"their next start fail. Once sure none needs it, add `{OPT_IN}` to {self.config} "
                "and run `strata-doctor fix` again.")

    def fix(self, fix: Fix) -> Fix:
        """``fix`` where the pool may go; otherwise only the step to take once sure."""
        if not self.held:
            return fix
        size = format_page_size(self.size)
        return Fix(
            summary=f"leave the {size} pool alone: other programs may use it ({OPT_IN} in "
            f"{self.config} lets fix release it)",
            manual=(ManualStep(
                f"Once sure that none of these needs the {size} pool ({self.users.text}), add "
                f"`{OPT_IN}` to {self.config} and run `strata-doctor fix` again, which will then "
                f"{fix.summary}."),),
            takes_effect="now",
        )


def pool_release(ctx: HostContext, size: int) -> PoolRelease:
    """What releasing the pool of ``size`` bytes would take from others."""
    users = other_pool_users(ctx.hugepages, size, ctx.engine_pid, ctx.config.unit)
    config = ctx.config.source or "/etc/strata-doctor.yaml"
    return PoolRelease(users, ctx.config.release_pool, config, size)
