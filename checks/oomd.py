"""oomd: can systemd-oomd kill the engine, and is it part of the hugepage failure chain?"""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

from strata_doctor.check import Check, Command
from strata_doctor.context import HostContext
from strata_doctor.facts.oomd import OomdFacts, oomd_commands
from strata_doctor.facts.oomd_dump import Watched
from strata_doctor.facts.oomd_journal import OomdKill
from strata_doctor.facts.parse import format_bytes, format_count
from strata_doctor.fix.memory import move_to_system_service_fix, oomd_dropin_fix
from strata_doctor.model import Evidence, Finding, Fix, Severity
from strata_doctor.rules.memory import GpuPinned, MemoryProjection, gpu_pinned, project_memory
from strata_doctor.rules.oomd import Exposure, chain_break, restart_looping
from strata_doctor.rules.pool import trap_in_effect
from strata_doctor.rules.trap import CHAIN


class Oomd(Check):
    """Finds whether systemd-oomd can kill the engine, and says how it would.

    systemd-oomd kills a whole cgroup: under a cgroup with ``ManagedOOMMemoryPressure=kill``
    the one with the most reclaim activity once pressure stays above the limit (Fedora
    watches ``user@UID.service`` at 50% for 20 s), and under ``ManagedOOMSwap=kill`` the
    one using the most swap once memory and swap are both over ``SwapUsedLimit``. An
    engine loading a 46.84 GiB arena is the heaviest reclaimer on the host. On the seed
    box the hugepage trap forced that load into ordinary pages beside a 46.88 GiB pool;
    oomd killed the unit, systemd restarted it, and the loop went on. When both are
    present this check reports them as one chain, in the order it happens
    (``oomd/trap-chain``, referring to ``hugepages/trap``).

    Reads ``systemctl show systemd-oomd.service``, ``oomctl dump``, ``oomd.conf`` and its
    drop-ins, the engine's cgroup (its unit's ControlGroup, or ``/proc/PID/cgroup``),
    ``ManagedOOM*`` of the engine unit and every ancestor slice (loaded, and on disk for a
    change not yet loaded), swap from ``/proc/meminfo``, ``/proc/pressure/memory``, the
    unit's NRestarts and Result, and earlier kills in ``journalctl -u systemd-oomd``. The
    fix is a drop-in with ``ManagedOOMPreference=avoid`` for a system service (oomd
    honours it only for root-owned cgroups), moving a session-started engine into a system
    service, and never turning oomd off for the whole host.
    """

    id = "oomd"
    title = "OOM killer (systemd-oomd)"
    findings = ("trap-chain", "exposed", "configured", "protected", "not-watched", "inactive", "cgroup-v1",
                "unknown-cgroup")

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        return oomd_commands(ctx.config.unit)

    def applies(self, ctx: HostContext) -> Optional[str]:
        facts = ctx.oomd
        if not facts.systemd:
            where = f" (a {facts.container} container: the host's oomd cannot be seen from here)" \
                if facts.container else ""
            return f"no systemd: {facts.systemd_reason or 'systemctl did not answer'}{where}"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        facts = ctx.oomd
        state_ev = Evidence("$ systemctl show systemd-oomd.service", f"ActiveState={facts.oomd_state}")
        verdict = self._verdict(ctx)
        if verdict in ("inactive", "cgroup-v1", "unknown-cgroup"):
            yield self._unseen(verdict, facts, state_ev)
            return
        exposure = ctx.exposure
        evidence = (state_ev, *self._evidence(facts, exposure))
        if verdict == "not-watched":
            yield self._not_watched(facts, exposure, evidence)
        elif verdict == "configured":
            value, path = exposure.configured or ("", "")
            yield self.finding(
                "configured", Severity.INFO,
                f"configured: ManagedOOMPreference={value} in {path}; takes effect after "
                f"`systemctl daemon-reload` and a restart of {facts.engine_unit}",
                detail="Until then systemd-oomd may still pick the engine: "
                + self._mechanism(facts, exposure, self._pinned(ctx)),
                evidence=evidence,
            )
        elif verdict == "protected":
            yield self.finding(
                "protected", Severity.OK,
                f"systemd-oomd watches {self._watch_list(facts, exposure)}, but {facts.engine_unit} has "
                f"ManagedOOMPreference={exposure.preference}: oomd picks other cgroups first",
                evidence=evidence,
            )
        elif verdict == "trap-chain":
            yield self._chain(ctx, facts, exposure, evidence)
        else:
            yield self._exposed(ctx, facts, exposure, evidence)

    def _verdict(self, ctx: HostContext) -> str:
        """The finding this host gets, in the order the questions are asked: does oomd run,
        can it act, where is the engine, does it watch it, is the engine protected, and is
        the hugepage trap what drives it to kill."""
        facts = ctx.oomd
        if not facts.active:
            return "inactive"
        if facts.cgroup_v2 is False:
            return "cgroup-v1"
        if facts.engine_cgroup is None:
            return "unknown-cgroup"
        exposure = ctx.exposure
        if not exposure.effective_watch:
            return "not-watched"
        if exposure.pending:
            return "configured"
        if exposure.protected:
            return "protected"
        if trap_in_effect(ctx.hugepages, ctx.pool_assessment) and self._is_chain(ctx):
            return "trap-chain"
        return "exposed"

    # -- findings -----------------------------------------------------------------------------
    def _unseen(self, verdict: str, facts: OomdFacts, state_ev: Evidence) -> Finding:
        """The findings before the engine's exposure can be told."""
        if verdict == "inactive":
            return self.finding(
                "inactive", Severity.OK,
                f"systemd-oomd is not running ({facts.oomd_state}): it cannot kill the engine",
                evidence=(state_ev,),
            )
        if verdict == "cgroup-v1":
            return self.finding(
                "cgroup-v1", Severity.INFO,
                "systemd-oomd is active but the host runs cgroup v1: oomd needs the unified "
                "hierarchy (cgroup v2) and cannot act here",
                evidence=(state_ev,),
            )
        watched = (", ".join(sorted({w.path for w in facts.dump.watched})) if facts.dump
                   else f"unknown: {facts.dump_reason}")
        return self.finding(
            "unknown-cgroup", Severity.INFO,
            f"systemd-oomd is active (watching: {watched}), but {facts.engine_unit} is not loaded "
            "and no engine process was found, so its exposure cannot be told",
            detail="Run the check with the engine running, or name its unit with --unit.",
            evidence=(state_ev,),
        )

    def _not_watched(self, facts: OomdFacts, exposure: Exposure, evidence: Tuple[Evidence, ...]) -> Finding:
        swap_only = [w for w in exposure.watched if w.kind == "swap"]
        note = f" (ManagedOOMSwap=kill on {swap_only[0].path}, but the host has no swap)" \
            if swap_only else ""
        return self.finding(
            "not-watched", Severity.OK,
            f"systemd-oomd is active but watches no cgroup above {facts.engine_cgroup}{note}",
            evidence=evidence,
        )

    def _exposed(
        self, ctx: HostContext, facts: OomdFacts, exposure: Exposure, evidence: Tuple[Evidence, ...],
    ) -> Finding:
        projection = self._projection(ctx)
        kills = facts.engine_kills()
        looping = restart_looping(facts)
        reasons = self._reasons(facts, projection, kills, looping)
        severity = Severity.ERROR if reasons else Severity.WARNING
        summary = (f"systemd-oomd can kill {self._who(facts)}: it watches "
                   f"{self._watch_list(facts, exposure)}")
        if reasons:
            summary += "; " + "; ".join(reasons)
        detail = self._mechanism(facts, exposure, self._pinned(ctx))
        if projection is not None:
            detail += f" Projected after the engine's start: {projection.arithmetic}."
        if kills and not looping:
            detail += self._earlier_kills(kills)
        nearby = [k for k in facts.kills_under([w.path for w in exposure.effective_watch]) if k not in kills]
        if nearby:
            detail += self._nearby_detail(nearby)
            evidence += (self._nearby_evidence(exposure, nearby),)
        return self.finding("exposed", severity, summary, detail=detail + " " + self._advice(facts),
                            evidence=evidence, fix=self._fix(facts))

    def _earlier_kills(self, kills: Tuple[OomdKill, ...]) -> str:
        return (f" The journal shows {len(kills):,} earlier kill{'s' if len(kills) != 1 else ''} "
                f"of the engine (last {kills[-1].time}); it is running normally now.")

    def _reasons(self, facts: OomdFacts, projection: Optional[MemoryProjection],
                 kills: Tuple[OomdKill, ...], looping: bool) -> List[str]:
        """Why the exposure is an error rather than a warning: oomd already kills the engine
        in a loop, or its start leaves less than the headroom."""
        reasons: List[str] = []
        if kills and looping:
            reasons.append(f"it has already killed the engine {len(kills):,} time"
                           f"{'s' if len(kills) != 1 else ''} (last {kills[-1].time or 'time unknown'})"
                           f"{self._restarts(facts)}")
        if projection is not None and projection.short:
            reasons.append(f"the projected need leaves {format_bytes(projection.left)}, less than the "
                           f"{format_bytes(projection.headroom)} headroom")
        return reasons

    def _nearby_detail(self, nearby: List[OomdKill]) -> str:
        last = nearby[-1]
        plural = "s" if len(nearby) != 1 else ""
        return (f" oomd has already killed {len(nearby):,} other cgroup{plural} under the cgroups it "
                f"watches here (last {last.time}: {last.cgroup}, {last.reason}); the engine's "
                "cgroup is a candidate in the same way.")

    def _nearby_evidence(self, exposure: Exposure, nearby: List[OomdKill]) -> Evidence:
        last = nearby[-1]
        plural = "s" if len(nearby) != 1 else ""
        watched = ", ".join(w.path for w in exposure.effective_watch)
        return Evidence("$ journalctl -u systemd-oomd",
                        f"{len(nearby):,} kill{plural} under {watched}; last {last.time} {last.cgroup}")

    def _chain(
        self, ctx: HostContext, facts: OomdFacts, exposure: Exposure, evidence: Tuple[Evidence, ...],
    ) -> Finding:
        a = ctx.pool_assessment
        pool, need = a.pool, a.need
        assert pool is not None and need is not None
        kills = facts.engine_kills()
        watch = self._pressure_watch(exposure)
        limit_text = self._limit_text(facts, watch)
        killed = (f"{len(kills):,} kill{'s' if len(kills) != 1 else ''} of it in the journal, last "
                  f"{kills[-1].time}" if kills else "no kill in the journal read")
        summary = (
            f"one failure chain ({CHAIN}): MAP_HUGETLB fails (pool {format_count(pool.total)}, free "
            f"{format_count(pool.free)}, needed {format_count(need.pages)}), the THP fallback needs "
            f"{format_bytes(need.arena)} more while the pool keeps {format_bytes(pool.total * pool.size)}, "
            f"memory pressure trips systemd-oomd ({limit_text}), it kills {facts.engine_unit} "
            f"({killed}) and systemd restarts it{self._restarts(facts)}"
        )
        projection = self._projection(ctx)
        steps = [
            f"1. Hugepage trap (hugepages/trap): {need.arithmetic}, but only {format_count(pool.free)} of "
            f"the pool's {format_count(pool.total)} pages are free, so MAP_HUGETLB fails.",
            f"2. THP fallback: hugepages: {a.mode} maps the arena in ordinary memory instead, "
            f"{format_bytes(need.arena)}, while the pool keeps "
            f"{format_bytes(pool.total * pool.size)} that no other allocation can use."
            + (f" {projection.arithmetic}." if projection else ""),
            "3. Memory pressure: the load reclaims and compacts memory; "
            + (facts.pressure_reason or "/proc/pressure/memory now: " + self._pressure_text(facts)) + ".",
            f"4. oomd kill: {self._mechanism(facts, exposure, self._pinned(ctx))}"
            + (f" Kills in the journal: {'; '.join(f'{k.time} {k.cgroup}' for k in kills[-3:])}."
               if kills else ""),
            f"5. Restart loop: systemd restarts {facts.engine_unit} into the same trap"
            f"{self._restarts(facts)}.",
            chain_break(ctx.hugepages, ctx.config, ctx.engine_pid).text + "; ManagedOOMPreference="
            "avoid (this finding's fix) keeps oomd off the engine under later pressure. Never turn "
            "systemd-oomd off for the whole host.",
        ]
        return self.finding("trap-chain", Severity.ERROR, summary, detail=" ".join(steps),
                            evidence=evidence, fix=self._fix(facts, "oomd/trap-chain"))

    # -- text helpers --------------------------------------------------------------------------
    def _who(self, facts: OomdFacts) -> str:
        if facts.engine_unit_loaded:
            return f"{facts.engine_unit} ({facts.engine_cgroup})"
        return f"the engine (pid {facts.engine_pid}, {facts.engine_cgroup})"

    def _watch_list(self, facts: OomdFacts, exposure: Exposure) -> str:
        return ", ".join(
            f"{w.path} for {'swap' if w.kind == 'swap' else 'memory pressure'}"
            + (f" > {self._limit_text(facts, w, where=False)}" if w.kind != "swap" else "")
            for w in exposure.effective_watch
        )

    def _limit_text(self, facts: OomdFacts, watch: Optional[Watched], where: bool = True) -> str:
        if watch is None or watch.kind == "swap":
            return f"swap over {facts.settings.swap_used_limit:g}%"
        limit, duration = facts.limit_of(watch)
        return f"{limit:g}% for {duration:g}s" + (f" on {watch.path}" if where else "")

    def _pressure_watch(self, exposure: Exposure) -> Optional[Watched]:
        watches = exposure.effective_watch
        return next((w for w in watches if w.kind == "memory-pressure"), watches[0] if watches else None)

    def _pinned(self, ctx: HostContext) -> Optional[GpuPinned]:
        gpu, _ = ctx.compute_gpu
        return gpu_pinned(ctx.config, gpu.address if gpu is not None else None)

    def _mechanism(self, facts: OomdFacts, exposure: Exposure, pinned: Optional[GpuPinned]) -> str:
        parts = []
        for w in exposure.effective_watch:
            if w.kind == "memory-pressure":
                limit, duration = facts.limit_of(w)
                parts.append(
                    f"systemd-oomd watches {w.path} ({w.source}): when its memory pressure stays "
                    f"above {limit:g}% for {duration:g}s with reclaim going on, it kills the cgroup "
                    f"under it with the most reclaim activity, which is the engine "
                    f"({facts.engine_cgroup}) while it loads its arena."
                )
            else:
                used = facts.swap_used
                swap = f" (swap {format_bytes(used)} of {format_bytes(facts.swap_total or 0)} used)" \
                    if used is not None else ""
                parts.append(
                    f"systemd-oomd watches {w.path} for swap ({w.source}): when memory and swap are "
                    f"both over {facts.settings.swap_used_limit:g}% used{swap}, it kills the cgroup "
                    "under it using the most swap" + self._pinned_swap(pinned) + "."
                )
        if facts.user_uid is not None:
            parts.append(
                f"The engine runs under user@{facts.user_uid}.service, a desktop session: a "
                "ManagedOOMPreference there is not honoured (only root-owned cgroups), so it "
                "cannot be protected in place."
            )
        return " ".join(parts)

    def _pinned_swap(self, pinned: Optional[GpuPinned]) -> str:
        """What the engine can put in swap when the compute GPU pins its arena: not the arena."""
        if pinned is None:
            return ""
        size = f" ({format_bytes(pinned.size)})" if pinned.size is not None else ""
        return (f"; arena + K/V{size}, pinned for the GPU {pinned.gpu}, stay in RAM, so only the "
                "engine's other memory counts there")

    def _pressure_text(self, facts: OomdFacts) -> str:
        if facts.pressure_reason:
            return facts.pressure_reason
        some, full = facts.pressure_of("some"), facts.pressure_of("full")
        rows = [f"{p.kind} avg10={p.avg10:g}% avg60={p.avg60:g}%" for p in (some, full) if p]
        return ", ".join(rows) if rows else "pressure not read"

    def _restarts(self, facts: OomdFacts) -> str:
        bits = []
        if facts.n_restarts:
            bits.append(f"NRestarts={facts.n_restarts}")
        if facts.result and facts.result != "success":
            bits.append(f"Result={facts.result}")
        if "auto-restart" in facts.active_state:
            bits.append(facts.active_state)
        return f" ({', '.join(bits)})" if bits else ""

    def _is_chain(self, ctx: HostContext) -> bool:
        """The fallback drives the watched engine into pressure that the pool's memory would
        relieve (rules.TrapVerdict.chain); a pool that only holds memory back is no link."""
        verdict = ctx.trap_verdict
        return verdict is not None and verdict.chain

    def _advice(self, facts: OomdFacts) -> str:
        if facts.user_uid is not None:
            return ("Move the engine into a system service and give that ManagedOOMPreference=avoid; "
                    "do not turn systemd-oomd off host-wide.")
        return (f"ManagedOOMPreference=avoid on {facts.engine_unit} makes oomd pick other cgroups "
                "first (honoured for root-owned cgroups, which system services are); keep oomd on "
                "for the rest of the host.")

    def _fix(self, facts: OomdFacts, finding: str = "oomd/exposed") -> Optional[Fix]:
        if facts.container:
            return None
        if facts.user_uid is not None:
            return move_to_system_service_fix(facts.engine_unit, facts.user_uid)
        if not facts.engine_unit_loaded:
            return None
        return oomd_dropin_fix(facts.engine_unit, finding)

    def _projection(self, ctx: HostContext) -> Optional[MemoryProjection]:
        if ctx.config.arena_bytes is None:
            return None
        proc = ctx.engine_process
        return project_memory(ctx.hugepages, ctx.config, ctx.pool_assessment,
                              proc.resident_bytes if proc else 0)

    def _evidence(self, facts: OomdFacts, exposure: Exposure) -> List[Evidence]:
        ev = [Evidence(facts.cgroup_source or "cgroup", facts.engine_cgroup or "")]
        for w in exposure.watched:
            ev.append(Evidence(w.source or "oomd", f"{w.path}: {w.kind}"
                               + (f" limit {w.limit:g}%" if w.limit else "")))
        engine = facts.engine_settings
        if engine is not None and engine.shown:
            ev.append(Evidence(f"$ systemctl show {engine.unit}",
                               f"ManagedOOMPreference={engine.preference or 'none'} "
                               f"NRestarts={facts.n_restarts} Result={facts.result}"))
        ev.append(self._settings_evidence(facts))
        return ev + self._memory_evidence(facts) + self._journal_evidence(facts)

    def _settings_evidence(self, facts: OomdFacts) -> Evidence:
        st = facts.settings
        return Evidence(", ".join(st.files) or "oomd.conf (defaults)",
                        f"SwapUsedLimit={st.swap_used_limit:g}% "
                        f"DefaultMemoryPressureLimit={st.pressure_limit:g}% "
                        f"DefaultMemoryPressureDurationSec={st.pressure_duration:g}s")

    def _memory_evidence(self, facts: OomdFacts) -> List[Evidence]:
        ev = []
        if facts.swap_total is not None:
            ev.append(Evidence("/proc/meminfo", f"SwapTotal={format_bytes(facts.swap_total)} "
                               f"SwapFree={format_bytes(facts.swap_free or 0)}"))
        if facts.pressure:
            ev.append(Evidence("/proc/pressure/memory", self._pressure_text(facts)))
        return ev

    def _journal_evidence(self, facts: OomdFacts) -> List[Evidence]:
        kills = facts.engine_kills()
        if kills:
            return [Evidence("$ journalctl -u systemd-oomd", f"{len(kills):,} kills of the engine, last "
                             f"{kills[-1].time}: {kills[-1].reason}")]
        if facts.journal_reason:
            return [Evidence("$ journalctl -u systemd-oomd", facts.journal_reason)]
        return []
