"""cpu-frequency: a power-saving frequency policy on the CPUs the expert pool runs on."""

from __future__ import annotations

from typing import FrozenSet, Iterator, List, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import BOOST, NO_TURBO, PLATFORM_PROFILE, CpuFrequency, FreqPolicy
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.model import Evidence, Finding, Fix, ManualStep, Severity

LOW_EPP = ("power", "balance_power")


class CpuFrequencyCheck(Check):
    """Warns when the pool's CPUs are held to a power-saving frequency policy.

    Reads ``/sys/devices/system/cpu/cpufreq/policyN/`` (``scaling_driver``,
    ``scaling_governor``, ``energy_performance_preference``, ``scaling_cur_freq``,
    ``cpuinfo_min_freq``, ``cpuinfo_max_freq``, ``affected_cpus``), or the same files in
    ``cpuN/cpufreq/`` for a CPU no policy folder governs (3.x and early 4.x kernels),
    ``intel_pstate/no_turbo``, ``cpufreq/boost`` and ``/sys/firmware/acpi/platform_profile``
    for the CPUs the expert pool will run on (the binding plan's node, else every CPU).
    The pool is compute-bound on the CPU for most routed experts (58-84% on the seed box),
    so its speed follows the clock: the powersave governor under acpi-cpufreq holds every
    CPU at its lowest frequency (1.2 GHz of the seed's E5-2696 v4, base 2.2 GHz).
    Warnings: ``powersave`` with a driver where it means the lowest frequency (not
    intel_pstate or amd-pstate-epp in active mode, whose powersave scales with load), an
    energy/performance preference of ``power`` or ``balance_power``, turbo off, and the
    ``low-power`` platform profile. An empty ``scaling_governor`` is unknown (info), never
    a policy that is fine. The remedy is advice only, since the operator pays the
    power: ``tuned-adm profile throughput-performance`` where TuneD is installed, otherwise
    ``cpupower frequency-set -g performance``. No file is written.
    """

    id = "cpu-frequency"
    title = "CPU frequency policy"
    findings = ("powersave", "power-preference", "turbo-off", "low-power-profile", "unknown-governor",
                "performance", "no-policy")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if not ctx.cpu_frequency.known:
            return ("no cpufreq policy, turbo switch or platform profile: the firmware or "
                    "hypervisor sets the clocks")
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        freq = ctx.cpu_frequency
        cpus, where = ctx.pool_cpus
        scope = _scope(cpus, where)
        policies = freq.policies_of(cpus)
        low = [p for p in policies if p.pinned_low]
        unnamed = [p for p in policies if p.governor is None]
        found = [
            self._powersave(ctx, low, scope) if low else None,
            self._power_preference(freq, policies, cpus, scope),
            self._turbo_off(freq),
            self._low_power(freq),
        ]
        findings = [f for f in found if f is not None]
        yield from findings
        if unnamed:
            yield self._unknown_governor(unnamed, cpus, scope)
        named = tuple(p for p in policies if p.governor is not None)
        if not findings and (named or not unnamed):
            yield self._fine(named, _share(list(named), cpus, scope) if named else scope)

    def _power_preference(
        self, freq: CpuFrequency, policies: Tuple[FreqPolicy, ...], cpus: FrozenSet[int], scope: str,
    ) -> Optional[Finding]:
        """The hardware told to favour power (not under a powersave governor that pins it low)."""
        epp = [p for p in policies if p.epp in LOW_EPP and not p.pinned_low]
        if not epp:
            return None
        values = sorted({p.epp or "" for p in epp})
        return self.finding(
            "power-preference", Severity.WARNING,
            f"the energy/performance preference is {' and '.join(values)} on "
            f"{_share(epp, cpus, scope)} ({_drivers(epp)}): the hardware favours power over speed",
            detail=f"The {_drivers(epp)} driver lets the hardware pick the clock, biased by "
            "energy_performance_preference; `power` and `balance_power` ramp slowly and stay "
            "low under the pool's bursts. " + _advice_text(freq),
            evidence=_policy_evidence(epp, "energy_performance_preference"),
            fix=_advice(freq, "set the energy/performance preference to performance"),
        )

    def _turbo_off(self, freq: CpuFrequency) -> Optional[Finding]:
        turbo = self._turbo(freq)
        if turbo is None:
            return None
        path, value, how = turbo
        return self.finding(
            "turbo-off", Severity.WARNING,
            f"turbo is off ({path} = {value}): the pool's CPUs stop at their base clock",
            detail="With turbo off the cores never go above the base frequency, even when "
            f"the power and thermal budget allows. Turn it back on with `{how}` (until the "
            "next boot; the setting that turned it off, a BIOS option, a TuneD profile or a "
            "unit, must be changed to keep it).",
            evidence=(Evidence(path, value),),
            fix=Fix(summary=f"turn turbo back on: {how}", manual=(ManualStep(
                f"Run `{how}` as root, and remove whatever turned turbo off at boot (BIOS, "
                "TuneD profile, a unit); it costs power only while the cores run fast."),),
                takes_effect="now"),
        )

    def _low_power(self, freq: CpuFrequency) -> Optional[Finding]:
        if freq.platform_profile != "low-power":
            return None
        return self.finding(
            "low-power-profile", Severity.WARNING,
            f"the ACPI platform profile is low-power ({PLATFORM_PROFILE}): the firmware caps "
            "the package's power and clocks",
            detail="The platform profile sets the firmware's power limits for the whole "
            "machine. `echo performance > /sys/firmware/acpi/platform_profile` (or "
            "`balanced`; `platform_profile_choices` lists what the firmware offers) lifts "
            "them, at the cost of fan noise and power draw under load. A desktop's "
            "power-saver mode (power-profiles-daemon: `powerprofilesctl set performance`) "
            "sets this profile and the power preference together.",
            evidence=(Evidence(PLATFORM_PROFILE, "low-power"),),
            fix=Fix(summary="set the ACPI platform profile to performance", manual=(ManualStep(
                "Run `echo performance > /sys/firmware/acpi/platform_profile` as root (or pick "
                "it in the desktop's power settings); it costs power and fan noise under load."),),
                takes_effect="now"),
        )

    def _powersave(self, ctx: HostContext, low: List[FreqPolicy], scope: str) -> Finding:
        freq = ctx.cpu_frequency
        cpus = ctx.pool_cpus[0]
        if len(low) < len(freq.policies_of(cpus)):
            held = f"{_count(low, cpus)} of {scope}"
        else:  # "all of node 1's 44 CPUs", but not "all of all 32 CPUs"
            held = scope if scope.startswith("all ") else f"all of {scope}"
        return self.finding(
            "powersave", Severity.WARNING,
            f"the powersave governor of {_drivers(low)} holds {held}{_clock(low)}",
            detail=f"With {_drivers(low)}, the powersave governor always picks the lowest "
            "frequency, whatever the load: the expert pool computes its routed experts at that "
            "clock. " + _advice_text(freq),
            evidence=_policy_evidence(low, "scaling_governor"),
            fix=_advice(freq, "run the pool's CPUs under the performance governor"),
        )

    def _unknown_governor(self, unnamed: List[FreqPolicy], cpus: FrozenSet[int], scope: str) -> Finding:
        """Policies whose ``scaling_governor`` the tree leaves empty: unknown, never fine."""
        return self.finding(
            "unknown-governor", Severity.INFO,
            f"scaling_governor names no governor for {_share(unnamed, cpus, scope)} "
            f"({_drivers(unnamed)}): their frequency policy is unknown",
            detail="Reading scaling_governor fails (EINVAL) while no governor is attached to "
            "the policy, after a driver switch or when the default governor did not load, and "
            "a capture keeps that as an empty file. On the host, `cpupower frequency-info` "
            "names the policy; `cpupower frequency-set -g performance` attaches one.",
            evidence=_policy_evidence(unnamed, "scaling_governor"),
        )

    @staticmethod
    def _turbo(freq: CpuFrequency) -> Optional[Tuple[str, str, str]]:
        if freq.no_turbo == 1:
            return NO_TURBO, "1", f"echo 0 > {NO_TURBO}"
        if freq.boost == 0:
            return BOOST, "0", f"echo 1 > {BOOST}"
        return None

    def _fine(self, policies: Tuple[FreqPolicy, ...], scope: str) -> Finding:
        if not policies:
            return self.finding("no-policy", Severity.OK,
                                f"no cpufreq policy covers {scope}; turbo and platform profile are not "
                                "power-saving")
        governors = sorted({f"{p.governor} ({p.driver or 'driver unknown'})" for p in policies})
        epps = sorted({p.epp for p in policies if p.epp})
        # The subject is "N of ..." for a share, else the whole scope: singular for one CPU.
        one = scope.startswith("1 of ") or (
            len(frozenset().union(*(p.cpus for p in policies))) == 1 and " CPUs (" not in scope)
        return self.finding(
            "performance", Severity.OK,
            f"{scope} {'runs' if one else 'run'} the {', '.join(governors)} policy"
            + (f" with energy/performance preference {', '.join(epps)}" if epps else ""),
            evidence=_policy_evidence(policies, "scaling_governor"),
        )


def _clock(low: List[FreqPolicy]) -> str:
    """The clocks the policies hold now, and their range: `` at 1.20 GHz, their lowest clock
    (range 1.20-3.70 GHz)``."""
    cur = sorted({p.cur_khz for p in low if p.cur_khz})
    lowest = sorted({p.min_khz for p in low if p.min_khz})
    clock = f" at {_ghz(cur[0])}" if len(cur) == 1 else (
        f" at {_ghz(cur[0])}-{_ghz(cur[-1])}" if cur else "")
    if cur and lowest and cur == lowest:
        clock += ", their lowest clock"
    return clock + _clock_range(low, lowest)


def _clock_range(low: List[FreqPolicy], lowest: List[int]) -> str:
    highest = sorted({p.max_khz for p in low if p.max_khz})
    return f" (range {lowest[0] / 1e6:.2f}-{_ghz(highest[-1])})" if lowest and highest else ""


def _scope(cpus: FrozenSet[int], where: str) -> str:
    """The pool's CPUs, said for where they are: ``all 32 CPUs``, ``node 1's 44 CPUs (...)``,
    ``the running engine's allowed CPUs (0-3)``, ``the 6 CPUs every service may run on (...)``."""
    count = f"{len(cpus):,} CPU" + ("" if len(cpus) == 1 else "s")
    listed = format_cpulist(cpus)
    if where == "the host":
        return f"all {count}" if len(cpus) > 1 else f"the host's one CPU ({listed})"
    if where.endswith(" CPUs"):
        return f"{where} ({listed})"
    if where == "every service":
        return f"the {count} every service may run on ({listed})"
    return f"{where}'s {count} ({listed})"


def _count(policies: List[FreqPolicy], cpus: FrozenSet[int]) -> str:
    return str(len(frozenset().union(*(p.cpus for p in policies)) & cpus))


def _share(policies: List[FreqPolicy], cpus: FrozenSet[int], scope: str) -> str:
    """``scope`` when the policies cover every one of ``cpus``, else ``N of scope``."""
    covered = frozenset().union(*(p.cpus for p in policies)) & cpus
    return scope if covered == cpus else f"{len(covered):,} of {scope}"


DRIVER_NOTES = {"intel_cpufreq": "intel_pstate in passive mode", "amd-pstate": "amd-pstate in passive mode"}


def _drivers(policies: List[FreqPolicy] | Tuple[FreqPolicy, ...]) -> str:
    names = sorted({p.driver or "driver unknown" for p in policies})
    return ", ".join(f"{n} ({DRIVER_NOTES[n]})" if n in DRIVER_NOTES else n for n in names)


def _ghz(khz: int) -> str:
    return f"{khz / 1e6:.2f} GHz"


def _policy_evidence(
    policies: List[FreqPolicy] | Tuple[FreqPolicy, ...], attribute: str,
) -> Tuple[Evidence, ...]:
    first = policies[0]
    value = {"scaling_governor": first.governor, "energy_performance_preference": first.epp}[attribute]
    line = f"{value or 'empty'} (scaling_driver {first.driver or 'unknown'}"
    if first.cur_khz:
        line += f", scaling_cur_freq {first.cur_khz} kHz"
    if first.min_khz and first.max_khz:
        line += f", cpuinfo_min_freq {first.min_khz}, cpuinfo_max_freq {first.max_khz}"
    line += ")"
    more = f" and {len(policies) - 1} more policies alike" if len(policies) > 1 else ""
    return (Evidence(f"{first.path}/{attribute}", line + more),)


def _advice_text(freq: CpuFrequency) -> str:
    if freq.tuned:
        current = f" (active now: {freq.tuned_profile})" if freq.tuned_profile else ""
        return ("TuneD is installed: `tuned-adm profile throughput-performance`" + current + " sets "
                "the performance governor, the performance energy preference and keeps turbo on. "
                "It costs power: the cores clock up at once under load and idle a little "
                "higher, typically a few watts per socket at idle and up to the CPUs' TDP "
                "under load instead of staying at the lowest clock.")
    return ("`cpupower frequency-set -g performance` (package linux-cpupower or "
            "kernel-tools) sets the performance governor until the next boot; to keep it, set "
            "it from the distribution's cpupower service or a oneshot unit. It costs power: the "
            "cores run at their highest clock whenever busy and idle a little higher, typically a "
            "few watts per socket at idle and up to the CPUs' TDP under load.")


def _advice(freq: CpuFrequency, what: str) -> Fix:
    command = "tuned-adm profile throughput-performance" if freq.tuned else \
        "cpupower frequency-set -g performance"
    return Fix(
        summary=f"{what}: `{command}` (advice only; no file is written)",
        manual=(ManualStep(
            f"Run `{command}` as root. It trades power for speed: the cores clock up at once "
            "under load, a few watts more per socket at idle and up to the CPUs' TDP under load."
            + ("" if freq.tuned else " It lasts until the next boot; keep it with the "
               "distribution's cpupower service or a oneshot unit.")),),
        takes_effect="now",
    )
