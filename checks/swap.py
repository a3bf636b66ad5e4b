"""swap: can the arena's pages be swapped out?"""

from __future__ import annotations

from typing import Iterator, List, Optional

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.cgroup import parse_systemd_bytes
from strata_doctor.facts.oomd_dump import Watched
from strata_doctor.facts.parse import format_bytes
from strata_doctor.fix.limits import swap_fix
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity
from strata_doctor.rules.memory import GpuPinned, gpu_pinned


class Swap(Check):
    """Checks whether the engine's arena can be swapped out, and what follows if it is.

    With swap on and no ``MemorySwapMax=0`` on the engine's unit, the kernel may swap out
    arena pages under memory pressure. That shows first as latency spikes (an expert read
    waits for a swap-in) and then, where systemd-oomd watches swap (``ManagedOOMSwap=kill``
    on a cgroup above the engine), as oomd's swap kill: oomd kills the cgroup using the
    most swap once swap is 90% full. Info, or a warning when oomd watches swap. An arena
    the engine locks (``VmLck`` covering it) cannot be swapped, nor can one it registers
    with its compute GPU (``cudaHostRegister``, ROCm's ``hipHostRegister``, pins arena +
    K/V): reclaim leaves pinned pages in RAM, so with a compute GPU only the engine's other
    memory can swap. Reads ``SwapTotal``/
    ``SwapFree`` in ``/proc/meminfo``, ``/proc/swaps``, ``memory.swap.max`` of the engine's
    cgroup and ``MemorySwapMax=`` in its unit's files. The fix is ``MemorySwapMax=0`` in a
    drop-in of the engine's unit (cgroup v2 only; v1 has no per-cgroup swap limit of its own).
    """

    id = "swap"
    title = "Swap and the arena"
    findings = ("swappable", "configured", "swap-max-0", "locked", "gpu-pinned", "off")

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
        evidence: List[Evidence] = [Evidence("/proc/meminfo", f"SwapTotal={format_bytes(total)}, "
                                             f"SwapFree={format_bytes(limits.swap_free or 0)}")]
        if limits.swap_max is not None:
            evidence.append(Evidence(limits.swap_max.source, limits.swap_max.text))
        verdict = self._verdict(ctx)
        if verdict == "off":
            yield self.finding("off", Severity.OK, "no swap: the arena stays in RAM", evidence=evidence)
        elif verdict == "swap-max-0":
            swap_max = limits.swap_max
            assert swap_max is not None
            yield self.finding("swap-max-0", Severity.OK,
                               f"{self._on(ctx)}; the engine's cgroup may not swap ({swap_max.text})",
                               evidence=evidence)
        elif verdict == "configured":
            value, path = limits.setting("MemorySwapMax") or ("", "")
            yield self.finding(
                "configured", Severity.INFO,
                f"configured: MemorySwapMax={value} in {path}; takes effect when "
                f"{ctx.config.unit} restarts ({self._on(ctx)})", evidence=tuple(evidence))
        elif verdict == "locked":
            yield self.finding("locked", Severity.OK,
                               f"{self._on(ctx)}; the engine locks {format_bytes(limits.locked)}, its whole "
                               "arena and K/V, which cannot be swapped", evidence=evidence)
        elif verdict == "gpu-pinned":
            yield self._gpu_pinned(ctx, evidence)
        else:
            yield self._swappable(ctx, evidence)

    def _verdict(self, ctx: HostContext) -> str:
        """The finding this host gets: whether there is swap and what keeps the arena out of it."""
        limits = ctx.engine_limits
        pinned = ctx.config.pinned_bytes
        setting = limits.setting("MemorySwapMax")
        if not limits.swap_total:
            return "off"
        if limits.swap_max is not None and limits.swap_max.value == 0:
            return "swap-max-0"
        if setting is not None and _is_zero(setting[0], ctx.meminfo.get("MemTotal")):
            return "configured"
        if pinned and limits.locked >= pinned:
            return "locked"
        if self._pinned(ctx) is not None:
            return "gpu-pinned"
        return "swappable"

    def _pinned(self, ctx: HostContext) -> Optional[GpuPinned]:
        gpu, _ = ctx.compute_gpu
        return gpu_pinned(ctx.config, gpu.address if gpu is not None else None)

    def _gpu_pinned(self, ctx: HostContext, evidence: List[Evidence]) -> Finding:
        """Swap is on, but the compute GPU pins the arena: only the engine's other memory can swap."""
        pinned = self._pinned(ctx)
        assert pinned is not None
        size = f" ({format_bytes(pinned.size)})" if pinned.size is not None else ""
        watched = self._swap_watches(ctx)
        oomd = (" systemd-oomd watches swap on " + ", ".join(w.path or "/" for w in watched)
                + ": its swap kill picks the cgroup using the most swap, to which the pinned arena "
                "adds nothing." if watched else "")
        return self.finding(
            "gpu-pinned", Severity.OK,
            f"{self._on(ctx)}; arena + K/V{size} are pinned for the GPU {pinned.gpu} "
            f"({ctx.gpu_runtime.pin}), which keeps them in RAM",
            detail="Reclaim cannot free a page pinned for DMA, so the arena stays in RAM while the "
            f"engine runs; only the engine's other memory (its runtime, heap and {ctx.gpu_runtime.stack} "
            "context) can go "
            "to swap." + oomd,
            evidence=[*evidence, Evidence(f"/sys/bus/pci/devices/{pinned.gpu}", "the compute GPU")])

    def _on(self, ctx: HostContext) -> str:
        limits = ctx.engine_limits
        total = limits.swap_total or 0
        used = total - (limits.swap_free or 0)
        return (f"{format_bytes(total)} of swap ({', '.join(limits.swap_devices) or 'no device listed'}), "
                f"{format_bytes(used)} used")

    def _swappable(self, ctx: HostContext, evidence: List[Evidence]) -> Finding:
        summary = (f"{self._on(ctx)} and the engine may use it ({self._allowed(ctx)}): arena pages can be "
                   "swapped out")
        detail = ("Under memory pressure the kernel swaps out cold arena pages; an expert read that "
                  "hits one waits for the swap-in, which shows as latency spikes first.")
        watched = self._swap_watches(ctx)
        if watched:
            summary += self._oomd_kill(ctx, watched)
            evidence += [Evidence(w.source or "oomctl dump", f"ManagedOOMSwap=kill on {w.path or '/'}")
                         for w in watched]
        severity = Severity.WARNING if watched else Severity.INFO
        return self.finding("swappable", severity, summary, detail=detail, evidence=evidence,
                            fix=self._fix(ctx))

    def _swap_watches(self, ctx: HostContext) -> List[Watched]:
        """The cgroups above the engine where a running oomd kills for swap."""
        oomd = ctx.oomd
        return [w for w in oomd.watched() if w.kind == "swap"] if oomd.active else []

    def _oomd_kill(self, ctx: HostContext, watched: List[Watched]) -> str:
        oomd = ctx.oomd
        paths = ", ".join(w.path or "/" for w in watched)
        limit = oomd.dump.swap_used_limit if oomd.dump and oomd.dump.swap_used_limit else \
            oomd.settings.swap_used_limit
        return (f"; systemd-oomd watches swap on {paths} and kills the cgroup using the most "
                f"swap once swap is {limit:g}% full")

    def _allowed(self, ctx: HostContext) -> str:
        """What the engine's cgroup lets it swap, as the finding says it."""
        limits = ctx.engine_limits
        if limits.cgroup is None:
            return "no cgroup limit known"
        swap_max = limits.swap_max
        if swap_max is None or swap_max.value is None:
            return "memory.swap.max is max"
        return f"memory.swap.max is {format_bytes(swap_max.value)}"

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


def _is_zero(value: str, mem_total: Optional[int]) -> bool:
    """Whether a ``MemorySwapMax=`` value is no swap at all: systemd reads ``0``, ``0T``,
    ``0.0G`` and ``0%`` alike, so the size is parsed, not spelled."""
    parsed = parse_systemd_bytes(value, mem_total)
    return parsed is not None and parsed[0] == 0
