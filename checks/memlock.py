"""memlock: may the engine lock as much memory as the kernel charges to RLIMIT_MEMLOCK?"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.cgroup import DOCKER_MEMLOCK, Limit, parse_systemd_bytes
from strata_doctor.facts.parse import format_bytes
from strata_doctor.facts.systemd_seen import RUN_DIR
from strata_doctor.fix.limits import memlock_fix
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity
from strata_doctor.rules.limits import LOCKED_NOW, PINNED_NOW, MemlockNeed, memlock_need

SYSTEMD_DEFAULT = 8 * 1024**2
"""systemd's own ``DefaultLimitMEMLOCK`` since version 253 (and the kernel's since 5.16)."""

NOT_CHARGED_DETAIL = (
    "The kernel charges the limit only for mlock() and vfio's pinning (VmLck) and for RDMA "
    "registration (VmPin); {pins} registered host memory without charging it. With "
    "`lock: true` the engine mlocks arena + K/V, and the limit must then hold them.")
"""Why the arena is not charged, with what pins it for the compute GPU's runtime."""


def _not_charged_detail(ctx: HostContext) -> str:
    return NOT_CHARGED_DETAIL.format(pins=ctx.gpu_runtime.pins)


class Memlock(Check):
    """Checks the locked-memory limit against what the kernel charges to it: the arena when
    the engine mlocks it.

    ``RLIMIT_MEMLOCK`` counts two things of a process, each on its own: what it has
    mlock()ed (``VmLck`` in ``/proc/PID/status``; vfio's pinning counts there too) and what
    RDMA memory registration has pinned (``VmPin``). Past the limit that call fails with
    ENOMEM or EPERM. Pinning host memory for the GPU (``cudaHostRegister``, or
    ``hipHostRegister`` on ROCm) is neither: NVIDIA's driver and amdgpu's KFD pin the pages
    without charging the limit, so an arena the engine only
    registers with its GPU never meets it. The limit matters for the arena when the config
    says ``lock: true`` (mlock of arena + K/V), or when the running engine's ``VmLck`` or
    ``VmPin`` already covers arena + K/V; otherwise the finding says so and why, with
    ``VmLck`` and ``VmPin`` against the limit. The limit is the running engine's ``Max
    locked memory`` in ``/proc/PID/limits``; for a stopped engine its unit's
    ``LimitMEMLOCK=``, else systemd's ``DefaultLimitMEMLOCK=`` (8 MiB by default) where the
    tree shows systemd at all (``ctx.systemd_seen``). Docker's default is 8 MiB as well.
    Elsewhere the limit is unknown, and the finding names the files that would show it. The
    fix is ``LimitMEMLOCK=infinity`` in a drop-in of the engine's unit; in a container,
    ``--ulimit memlock=-1:-1``.
    """

    id = "memlock"
    title = "Locked-memory limit"
    findings = ("too-low", "configured", "ok", "not-charged", "unknown-limit")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if ctx.config.lock and ctx.config.pinned_bytes is None:
            hint = ctx.config.arena_hint("set `arena:` or --arena")
            return f"no arena size to compare the limit with ({hint})"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        limits = ctx.engine_limits
        need = memlock_need(ctx.config.lock, ctx.config.pinned_bytes, limits.locked, limits.pinned)
        limit, configured = self._limit(ctx)
        if limit is None:
            yield self._unknown(ctx, need)
            return
        evidence = self._evidence(ctx, limit)
        if not need.arena_charged:
            yield self._not_charged(ctx, limit, evidence)
            return
        pinned = need.need
        verdict = _verdict(limit, configured, pinned)
        if verdict == "ok":
            yield self.finding("ok", Severity.OK,
                               f"the engine may lock {_shown(limit)} ({limit.text}); arena + K/V is "
                               f"{format_bytes(pinned)} ({self._why(ctx, need)})", evidence=evidence)
        elif verdict == "configured":
            assert configured is not None and limit.value is not None
            yield self.finding(
                "configured", Severity.INFO,
                f"configured: {configured.text} in {configured.source}; the running engine still has "
                f"{format_bytes(limit.value)} until {ctx.config.unit} restarts",
                evidence=(*evidence, Evidence(configured.source, configured.text)))
        else:
            yield self._too_low(ctx, need, limit, evidence)

    def _not_charged(self, ctx: HostContext, limit: Limit, evidence: Tuple[Evidence, ...]) -> Finding:
        """The limit does not bind the arena: nothing mlocks it, and GPU pinning is not charged."""
        limits = ctx.engine_limits
        now = (f", and has VmLck {format_bytes(limits.locked)}, VmPin {format_bytes(limits.pinned)} now"
               if ctx.engine_pid is not None else "")
        return self.finding(
            "not-charged", Severity.OK,
            f"the arena is not charged to the limit: no `lock: true` (no mlock), and pinning for a "
            f"GPU ({ctx.gpu_runtime.pin}) is not charged; the engine may lock {_shown(limit)} "
            f"({limit.text}){now}",
            detail=_not_charged_detail(ctx), evidence=evidence)

    def _unknown(self, ctx: HostContext, need: MemlockNeed) -> Finding:
        """No limit to quote: the engine's own limits are not in the tree, and nothing shows
        the systemd whose default it would get."""
        missing = (f"no /proc/{ctx.engine_pid}/limits of the running engine"
                   if ctx.engine_pid is not None else "no /proc/PID/limits of a running engine")
        # "may lock ...", as the summaries with a known limit say it: one shape per finding
        where = (f"the engine may lock an amount the tree does not show: it has no systemd and {missing} "
                 "(that file says it; for an engine started from a login shell, "
                 "/etc/security/limits.conf sets it)")
        evidence = self._evidence(ctx, None)
        if not need.arena_charged:
            return self.finding(  # whatever the limit is, it does not bind the arena
                "not-charged", Severity.OK,
                f"the arena is not charged to the limit: no `lock: true` (no mlock), and pinning for a "
                f"GPU ({ctx.gpu_runtime.pin}) is not charged; {where}",
                detail=_not_charged_detail(ctx), evidence=evidence)
        return self.finding(
            "unknown-limit", Severity.WARNING,
            f"{self._why(ctx, need)}, so the limit must hold arena + K/V ({format_bytes(need.need)}), "
            f"but {where}",
            detail="mlock() past RLIMIT_MEMLOCK fails with ENOMEM (EPERM with a limit of 0): the "
            "engine then stops at load or runs with its arena unlocked.",
            evidence=evidence,
            fix=self._fix(ctx, format_bytes(need.need), "unknown"))

    def _too_low(self, ctx: HostContext, need: MemlockNeed, limit: Limit,
                 evidence: Tuple[Evidence, ...]) -> Finding:
        assert limit.value is not None
        pinned = need.need
        docker = " (Docker's default)" if ctx.engine_limits.container == "docker" and \
            limit.value == DOCKER_MEMLOCK else ""
        return self.finding(
            "too-low", Severity.ERROR,
            f"the engine may lock {format_bytes(limit.value)}{docker} but {self._why(ctx, need)}: "
            f"arena + K/V is {format_bytes(pinned)}, {format_bytes(pinned - limit.value)} more",
            detail="mlock() past RLIMIT_MEMLOCK fails with ENOMEM (EPERM with a limit of 0), as RDMA "
            "registration does past it: the engine then stops at load or runs with its arena "
            "unlocked.",
            evidence=evidence,
            fix=self._fix(ctx, format_bytes(pinned), f"{format_bytes(limit.value)} ({limit.text})"),
        )

    def _evidence(self, ctx: HostContext, limit: Optional[Limit]) -> Tuple[Evidence, ...]:
        limits = ctx.engine_limits
        evidence = [Evidence(limit.source, limit.text)] if limit is not None else [
            Evidence(f"/proc/{ctx.engine_pid}/limits" if ctx.engine_pid is not None else
                     "/proc/PID/limits", "missing"),
            Evidence(RUN_DIR, "missing (no systemctl output, unit file or systemd as PID 1 either)")]
        if ctx.engine_pid is not None:
            locked = f"VmLck {format_bytes(limits.locked)}, VmPin {format_bytes(limits.pinned)}"
            evidence.append(Evidence(f"/proc/{ctx.engine_pid}/status", locked))
        if ctx.config.lock:
            evidence.append(Evidence(ctx.config.source or "command line", "lock: true"))
        return tuple(evidence)

    def _why(self, ctx: HostContext, need: MemlockNeed) -> str:
        limits = ctx.engine_limits
        if need.case == LOCKED_NOW:
            return f"the running engine has mlocked {format_bytes(limits.locked)} (VmLck)"
        if need.case == PINNED_NOW:
            return f"the running engine has {format_bytes(limits.pinned)} pinned against the limit (VmPin)"
        return "the config says `lock: true`"

    def _limit(self, ctx: HostContext) -> Tuple[Optional[Limit], Optional[Limit]]:
        """(the limit in effect, the unit's configured limit when the engine runs under an older
        one); the limit is None when the tree shows neither it nor a systemd to default it."""
        limits = ctx.engine_limits
        configured: Optional[Limit] = None
        setting = limits.setting("LimitMEMLOCK")
        if setting is not None:
            soft = setting[0].split(":")[0].strip()
            value = None if soft == "infinity" else _bytes(soft)
            configured = Limit(value, f"LimitMEMLOCK={setting[0]}", setting[1])
        if limits.memlock is not None:
            return limits.memlock, configured
        if configured is not None:
            return configured, None
        if limits.default_memlock is not None:
            d = limits.default_memlock
            return Limit(d.value, f"DefaultLimitMEMLOCK={d.text}", d.source), None
        if limits.container == "docker":
            return Limit(DOCKER_MEMLOCK, "Docker's default", "docker run"), None
        if not ctx.systemd_seen.seen:
            return None, None
        return Limit(SYSTEMD_DEFAULT, "systemd's default DefaultLimitMEMLOCK=8M",
                     f"{ctx.config.unit} (no LimitMEMLOCK=)"), None

    def _fix(self, ctx: HostContext, needed: str, current: str) -> Fix:
        limits = ctx.engine_limits
        if limits.container or not ctx.systemd.present:
            runtime = limits.container or "docker"
            return Fix(summary="start the engine with an unlimited locked-memory limit",
                       manual=(ManualStep(f"Recreate the container with `{runtime} run --ulimit "
                                          "memlock=-1:-1 ...`, or run `ulimit -l unlimited` in the "
                                          "shell that starts the engine (as root)."),),
                       takes_effect="restart")
        return memlock_fix(ctx.config.unit, needed, current)


def _shown(limit: Limit) -> str:
    return "unlimited" if limit.value is None else format_bytes(limit.value)


def _bytes(text: str) -> Optional[int]:
    parsed = parse_systemd_bytes(text, None)
    return parsed[0] if parsed is not None else None


def _verdict(limit: Limit, configured: Optional[Limit], pinned: int) -> str:
    """``ok`` when the limit in effect holds ``pinned`` bytes, ``configured`` when only the
    unit's files (loaded at the next restart) do, else ``too-low``."""
    if limit.value is None or limit.value >= pinned:
        return "ok"
    if configured is not None and (configured.value is None or configured.value >= pinned):
        return "configured"
    return "too-low"
