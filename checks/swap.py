"""swap: can the arena's pages be swapped out?"""

from __future__ import annotations

from typing import Iterator, List, Optional

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.parse import format_bytes
from strata_doctor.fix.limits import swap_fix
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity


class Swap(Check):
    """Checks whether the engine's arena can be swapped out, and what follows if it is.

    With swap on and no ``MemorySwapMax=0`` on the engine's unit, the kernel may swap out
    arena pages under memory pressure. That shows first as latency spikes (an expert read
    waits for a swap-in) and then, where systemd-oomd watches swap (``ManagedOOMSwap=kill``
    on a cgroup above the engine), as oomd's swap kill: oomd kills the cgroup using the
    most swap once swap is 90% full. Info, or a warning when oomd watches swap. An arena
    the engine locks (``VmLck`` covering it) cannot be swapped. Reads ``SwapTotal``/
    ``SwapFree`` in ``/proc/meminfo``, ``/proc/swaps``, ``memory.swap.max`` of the engine's
    cgroup and ``MemorySwapMax=`` in its unit's files. The fix is ``MemorySwapMax=0`` in a
    drop-in of the engine's unit (cgroup v2 only; v1 has no per-cgroup swap limit of its own).
    """

    id = "swap"
    title = "Swap and the arena"
    findings = ("swappable", "configured", "swap-max-0", "locked", "off")

    def applies(self, ctx: HostContext) -> Optional[str]:
        limits = ctx.engine_limits
        if limits.swap_total is None:
            return "cannot read SwapTotal in /proc/meminfo"
        if limits.cgroup is None and not ctx.unit.loaded and ctx.engine_pid is None:
            return f"no engine here: {ctx.config.unit} is not loaded and no engine process runs"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        limits = ctx.engine_limits
        total = limits.swap_total or 0
        used = total - (limits.swap_free or 0)
        on = (f"{format_bytes(total)} of swap ({', '.join(limits.swap_devices) or 'no device listed'}), "
              f"{format_bytes(used)} used")
        evidence: List[Evidence] = [Evidence("/proc/meminfo", f"SwapTotal={format_bytes(total)}, "
                                             f"SwapFree={format_bytes(limits.swap_free or 0)}")]
        swap_max = limits.swap_max
        if swap_max is not None:
            evidence.append(Evidence(swap_max.source, swap_max.text))
        if not total:
            yield self.finding("off", Severity.OK, "no swap: the arena stays in RAM", evidence=evidence)
            return
        pinned = ctx.config.pinned_bytes
        if swap_max is not None and swap_max.value == 0:
            yield self.finding("swap-max-0", Severity.OK,
                               f"{on}; the engine's cgroup may not swap ({swap_max.text})", evidence=evidence)
            return
        setting = limits.setting("MemorySwapMax")
        if setting is not None and setting[0].strip() in ("0", "0B", "0K", "0M", "0G"):
            yield self.finding(
                "configured", Severity.INFO,
                f"configured: MemorySwapMax={setting[0]} in {setting[1]}; takes effect when "
                f"{ctx.config.unit} restarts ({on})", evidence=tuple(evidence))
            return
        if pinned and limits.locked >= pinned:
            yield self.finding("locked", Severity.OK,
                               f"{on}; the engine locks {format_bytes(limits.locked)}, its whole arena and "
                               "K/V, which cannot be swapped", evidence=evidence)
            return
        watched = [w for w in ctx.oomd.watched() if w.kind == "swap"] if ctx.oomd.active else []
        allowed = "memory.swap.max is max" if swap_max is None or swap_max.value is None else \
            f"memory.swap.max is {format_bytes(swap_max.value)}"
        if limits.cgroup is None:
            allowed = "no cgroup limit known"
        summary = f"{on} and the engine may use it ({allowed}): arena pages can be swapped out"
        detail = ("Under memory pressure the kernel swaps out cold arena pages; an expert read that "
                  "hits one waits for the swap-in, which shows as latency spikes first.")
        severity = Severity.INFO
        if watched:
            severity = Severity.WARNING
            paths = ", ".join(w.path or "/" for w in watched)
            limit = ctx.oomd.dump.swap_used_limit if ctx.oomd.dump and ctx.oomd.dump.swap_used_limit else \
                ctx.oomd.settings.swap_used_limit
            summary += f"; systemd-oomd watches swap on {paths} and kills the cgroup using the most " \
                f"swap once swap is {limit:g}% full"
            evidence += [Evidence(w.source or "oomctl dump", f"ManagedOOMSwap=kill on {w.path or '/'}")
                         for w in watched]
        yield self.finding("swappable", severity, summary, detail=detail, evidence=evidence,
                           fix=self._fix(ctx))

    def _fix(self, ctx: HostContext) -> Optional[Fix]:
        limits = ctx.engine_limits
        if limits.container:
            runtime = limits.container
            return Fix(summary="give the container no swap",
                       manual=(ManualStep(f"Recreate the container with `{runtime} run --memory=N "
                                          "--memory-swap=N ...` (the same N: no swap beyond memory)."),),
                       takes_effect="restart")
        if not ctx.systemd.present or not ctx.unit.loaded:
            return Fix(summary="keep the engine out of swap",
                       manual=(ManualStep("Run the engine in a systemd unit with MemorySwapMax=0, or set "
                                          "`lock: true` and LimitMEMLOCK=infinity so the arena is locked."),),
                       takes_effect="restart")
        if not ctx.systemd.cgroup_v2:
            return Fix(summary="keep the engine out of swap (cgroup v1 has no MemorySwapMax=)",
                       manual=(ManualStep("Boot with systemd.unified_cgroup_hierarchy=1 for MemorySwapMax=, "
                                          "or lock the arena (`lock: true`, LimitMEMLOCK=infinity)."),),
                       takes_effect="reboot")
        return swap_fix(ctx.config.unit)
