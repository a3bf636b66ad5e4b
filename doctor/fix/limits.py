"""Fix builders for the engine's limits: locked memory and swap (unit drop-ins).

Pure: checks call these and return the :class:`~strata_doctor.model.Fix`; the applier
writes the drop-ins and journals what was there, so ``fix --revert`` removes them.
"""

from strata_doctor.model import FileChange, Fix, RuntimeAction, context_pairs

SYSTEMD_DIR = "/etc/systemd/system"
MEMLOCK_DROPIN = "60-strata-doctor-memlock.conf"
SWAP_DROPIN = "60-strata-doctor-swap.conf"


def memlock_fix(unit: str, needed: str, current: str) -> Fix:
    """``LimitMEMLOCK=infinity`` in the engine unit's drop-in."""
    change = FileChange(
        path=f"{SYSTEMD_DIR}/{unit}.d/{MEMLOCK_DROPIN}",
        template="memlock-dropin.conf.j2",
        context=context_pairs(unit=unit, needed=needed, current=current),
    )
    return Fix(
        summary=f"let {unit} lock {needed}: LimitMEMLOCK=infinity in a drop-in",
        files=(change,),
        actions=(RuntimeAction("daemon-reload", "systemd"), RuntimeAction("restart-unit", unit)),
        takes_effect="restart",
    )


def swap_fix(unit: str) -> Fix:
    """``MemorySwapMax=0`` in the engine unit's drop-in (cgroup v2 only)."""
    change = FileChange(
        path=f"{SYSTEMD_DIR}/{unit}.d/{SWAP_DROPIN}",
        template="swap-dropin.conf.j2",
        context=context_pairs(unit=unit),
    )
    return Fix(
        summary=f"keep {unit} out of swap: MemorySwapMax=0 in a drop-in (the rest of the host keeps "
        "its swap)",
        files=(change,),
        actions=(RuntimeAction("daemon-reload", "systemd"), RuntimeAction("restart-unit", unit)),
        takes_effect="restart",
    )
