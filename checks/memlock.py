"""memlock: may the engine lock as much memory as its arena, when it locks it?"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.cgroup import DOCKER_MEMLOCK, Limit, parse_systemd_bytes
from strata_doctor.facts.parse import format_bytes
from strata_doctor.fix.limits import memlock_fix
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity

SYSTEMD_DEFAULT = 8 * 1024**2
"""systemd's own ``DefaultLimitMEMLOCK`` since version 253 (and the kernel's since 5.16)."""


class Memlock(Check):
    """Checks the locked-memory limit against the arena when the engine locks or pins it.

    An engine that locks its arena (``mlock``) or pins it for the GPU (pinned host
    memory) counts every locked byte against ``RLIMIT_MEMLOCK``; past the limit the call
    fails with ENOMEM or EPERM and the engine either stops or runs unlocked. The check
    applies when the running engine shows ``VmLck`` or ``VmPin`` above zero in
    ``/proc/PID/status``, or the config says ``lock: true``. The limit is the running
    engine's ``Max locked memory`` in ``/proc/PID/limits``; for a stopped engine its
    unit's ``LimitMEMLOCK=``, else systemd's ``DefaultLimitMEMLOCK=`` (8 MiB by
    default). Docker's default is 8 MiB as well. The fix is ``LimitMEMLOCK=infinity`` in
    a drop-in of the engine's unit; in a container, ``--ulimit memlock=-1:-1``.
    """

    id = "memlock"
    title = "Locked-memory limit"
    findings = ("too-low", "configured", "ok")

    def applies(self, ctx: HostContext) -> Optional[str]:
        limits = ctx.engine_limits
        if not (limits.locked or limits.pinned or ctx.config.lock):
            running = "the engine shows VmLck 0 and VmPin 0" if ctx.engine_pid else "the engine does not run"
            return f"the engine does not lock its memory ({running} and the config has no `lock: true`)"
        if ctx.config.pinned_bytes is None:
            return "no arena size to compare the limit with (set `arena:` or --arena)"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        pinned = ctx.config.pinned_bytes or 0
        limit, configured = self._limit(ctx)
        evidence = self._evidence(ctx, limit)
        verdict = _verdict(limit, configured, pinned)
        if verdict == "ok":
            shown = "unlimited" if limit.value is None else format_bytes(limit.value)
            yield self.finding("ok", Severity.OK,
                               f"the engine may lock {shown} ({limit.text}); arena + K/V is "
                               f"{format_bytes(pinned)} ({self._why(ctx)})", evidence=evidence)
        elif verdict == "configured":
            assert configured is not None and limit.value is not None
            yield self.finding(
                "configured", Severity.INFO,
                f"configured: {configured.text} in {configured.source}; the running engine still has "
                f"{format_bytes(limit.value)} until {ctx.config.unit} restarts",
                evidence=(*evidence, Evidence(configured.source, configured.text)))
        else:
            yield self._too_low(ctx, limit, pinned, evidence)

    def _too_low(self, ctx: HostContext, limit: Limit, pinned: int,
                 evidence: Tuple[Evidence, ...]) -> Finding:
        assert limit.value is not None
        docker = " (Docker's default)" if ctx.engine_limits.container == "docker" and \
            limit.value == DOCKER_MEMLOCK else ""
        return self.finding(
            "too-low", Severity.ERROR,
            f"the engine may lock {format_bytes(limit.value)}{docker} but {self._why(ctx)}: arena + K/V is "
            f"{format_bytes(pinned)}, {format_bytes(pinned - limit.value)} more",
            detail="mlock() and pinned host memory past RLIMIT_MEMLOCK fail with ENOMEM or EPERM: the "
            "engine then stops at load or runs with its arena unlocked, where the kernel may swap or "
            "migrate it.",
            evidence=evidence,
            fix=self._fix(ctx, format_bytes(pinned), f"{format_bytes(limit.value)} ({limit.text})"),
        )

    def _evidence(self, ctx: HostContext, limit: Limit) -> Tuple[Evidence, ...]:
        limits = ctx.engine_limits
        evidence = [Evidence(limit.source, limit.text)]
        if limits.locked or limits.pinned:
            locked = f"VmLck {format_bytes(limits.locked)}, VmPin {format_bytes(limits.pinned)}"
            evidence.append(Evidence(f"/proc/{ctx.engine_pid}/status", locked))
        if ctx.config.lock:
            evidence.append(Evidence(ctx.config.source or "command line", "lock: true"))
        return tuple(evidence)

    def _why(self, ctx: HostContext) -> str:
        limits = ctx.engine_limits
        if limits.locked or limits.pinned:
            return f"the running engine locks memory (VmLck {format_bytes(limits.locked)}, " \
                f"VmPin {format_bytes(limits.pinned)})"
        return "the config says `lock: true`"

    def _limit(self, ctx: HostContext) -> Tuple[Limit, Optional[Limit]]:
        """(the limit in effect, the unit's configured limit when the engine runs under an older one)."""
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
