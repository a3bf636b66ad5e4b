"""numa-balancing: automatic NUMA balancing migrating the arena's pages under the pool."""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

from strata_doctor.check import Check
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import (
    CMDLINE,
    KERNEL_RELEASE,
    NUMA_BALANCING,
    PROC_CONFIG,
    VMSTAT,
    BalancingDefault,
)
from strata_doctor.facts.cpu_policy import NumaBalancing as NumaBalancingFacts
from strata_doctor.facts.sysctl import SysctlSetting
from strata_doctor.fix.memory import sysctl_fix, sysctl_placement
from strata_doctor.model import Evidence, Finding, Fix, Severity

KEY = "kernel.numa_balancing"
HUGEPAGES_KEY = "vm.nr_hugepages"
REASON = ("automatic NUMA balancing unmaps and migrates the expert arena's pages while the "
          "CPU pool reads them (strata-doctor numa-balancing)")


class NumaBalancing(Check):
    """Warns when automatic NUMA balancing is on for a host with several CPU nodes.

    Reads ``/proc/sys/kernel/numa_balancing`` and, when it is on, the ``numa_pages_migrated``,
    ``numa_hint_faults`` and ``numa_pte_updates`` counters of ``/proc/vmstat``. With
    balancing on, the kernel periodically unmaps the arena's pages to see which CPUs touch
    them (a NUMA hinting fault on the next read) and migrates pages toward those CPUs: the
    expert pool stalls on faults and copies while it reads, and a binding the plan chose is
    second-guessed page by page. llama.cpp prints a warning for exactly this. Debian, Ubuntu,
    Fedora and RHEL kernels turn it on by default on every host with two nodes or more.
    The fix writes ``kernel.numa_balancing = 0`` into the sysctl.d file the hugepages fix
    uses and sets it now. Hosts with one CPU node have nothing to balance: skipped. A
    missing file is unknown (a capture may leave it out), not off, unless the kernel's
    config or release shows the kernel lacks the feature; the finding says what boot would
    set (``numa_balancing=`` on the command line, ``CONFIG_NUMA_BALANCING_DEFAULT_ENABLED``,
    or the release and the distributions' default).
    """

    id = "numa-balancing"
    title = "Automatic NUMA balancing"
    findings = ("enabled", "configured", "off", "unknown", "unsupported", "unreadable")

    def applies(self, ctx: HostContext) -> Optional[str]:
        if len(ctx.numa.cpu_nodes) < 2:
            return "one NUMA node with CPUs: automatic NUMA balancing has nothing to migrate"
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        facts = ctx.numa_balancing
        configured = ctx.hugepages.sysctl.last(KEY)
        if facts.mode is None:
            yield self._unread(ctx, facts)
            return
        evidence: List[Evidence] = [Evidence(NUMA_BALANCING, str(facts.mode))]
        if configured is not None:
            evidence.append(Evidence(configured.path, f"{KEY} = {configured.value}"))
        if not facts.on:
            yield self._off(ctx, configured, evidence)
        elif configured is not None and configured.value.strip() == "0":
            yield self.finding(
                "configured", Severity.INFO,
                f"{configured.path} turns automatic NUMA balancing off; it is on until "
                "`sysctl --system` or the next boot",
                evidence=tuple(evidence),
            )
        else:
            yield self._enabled(ctx, facts, evidence)

    def _unread(self, ctx: HostContext, facts: NumaBalancingFacts) -> Finding:
        default = facts.default
        if facts.unread != "missing" or default is None:
            return self.finding(
                "unreadable", Severity.INFO,
                f"{NUMA_BALANCING} could not be read ({facts.unread or 'not a number'})",
            )
        lacking = _lacking(default)
        if lacking is not None:
            return self.finding(
                "unsupported", Severity.OK,
                f"{NUMA_BALANCING} is absent: {_kernel(default)} has no automatic NUMA "
                f"balancing ({lacking})",
                evidence=(Evidence(NUMA_BALANCING, "missing"), *_default_evidence(default)),
            )
        return self._unknown(ctx, default)

    def _unknown(self, ctx: HostContext, default: BalancingDefault) -> Finding:
        """The file is absent but the kernel may have the feature: what boot would set."""
        configured = ctx.hugepages.sysctl.last(KEY)
        evidence = [Evidence(NUMA_BALANCING, "missing"), *_default_evidence(default)]
        if configured is not None:
            evidence.append(Evidence(configured.path, f"{KEY} = {configured.value}"))
        later = f"; {configured.path} sets {configured.value} after boot" if configured else ""
        return self.finding(
            "unknown", Severity.INFO,
            f"{NUMA_BALANCING} is absent from the capture, so whether automatic NUMA balancing "
            f"is on is unknown; {_boot_default(default, len(ctx.numa.cpu_nodes))}{later}",
            detail="On the host itself, `cat /proc/sys/kernel/numa_balancing` tells (0 is off). "
            "Where it is on, the kernel unmaps and migrates the arena's pages while the pool "
            f"reads them; `sysctl -w {KEY}=0` turns it off, and `{KEY} = 0` in sysctl.d keeps "
            "it off at the next boots.",
            evidence=tuple(evidence),
        )

    def _off(
        self, ctx: HostContext, configured: Optional[SysctlSetting], evidence: List[Evidence],
    ) -> Finding:
        """Off now; a warning when a sysctl.d file turns it back on at the next boot."""
        back = configured if configured is not None and configured.value.strip() not in ("0", "") \
            else None
        return self.finding(
            "off", Severity.WARNING if back is not None else Severity.OK,
            f"automatic NUMA balancing is off ({KEY} = 0)"
            + (f", but {back.path} sets {back.value} at the next boot" if back is not None else ""),
            evidence=tuple(evidence),
            fix=self._fix(ctx, "off") if back is not None else None,
        )

    def _enabled(self, ctx: HostContext, facts: NumaBalancingFacts, evidence: List[Evidence]) -> Finding:
        nodes = ctx.numa.cpu_nodes
        if facts.counters:
            evidence.append(Evidence(VMSTAT, " ".join(f"{k}={v}" for k, v in facts.counters)))
        mode = {1: "on", 2: "in memory-tiering mode"}.get(facts.mode or 0, f"on (mode {facts.mode})")
        node_text = ", ".join(str(n.id) for n in nodes)
        return self.finding(
            "enabled", Severity.WARNING,
            f"automatic NUMA balancing is {mode} ({KEY} = {facts.mode}) on {len(nodes):,} CPU nodes "
            f"({node_text}): the kernel migrates the arena's pages while the pool reads them"
            + _since_boot(facts),
            detail="The kernel unmaps pages at intervals to sample which CPUs touch them, then "
            "moves them toward those CPUs: every sample is a fault in the expert pool's reads, "
            "every move a copy, and a binding to the GPU's node is undone page by page when "
            "threads stray. llama.cpp warns about it for the same reason. The engine places "
            "its memory itself (numactl --preferred), so the kernel's guesses only cost. "
            f"Turn it off: `sysctl -w {KEY}=0` now, and `{KEY} = 0` in sysctl.d for boots.",
            evidence=tuple(evidence),
            fix=self._fix(ctx, "enabled"),
        )

    def _fix(self, ctx: HostContext, finding: str) -> Fix:
        """``kernel.numa_balancing = 0`` in the sysctl.d file the hugepages fix writes for
        ``vm.nr_hugepages`` (the plan merges both into one file), and ``sysctl -w`` now."""
        config = ctx.hugepages.sysctl
        fix = sysctl_fix(((KEY, "0", REASON),), f"{self.id}/{finding}", config)
        # The hugepages fix names its file after every file that sets vm.nr_hugepages to
        # another value; a file that sets it at all is enough to move this one there too.
        shared, _ = sysctl_placement(((KEY, "0", REASON), (HUGEPAGES_KEY, "", "")), config)
        if fix.files and fix.files[0].path != shared:
            fix = fix._replace(
                files=(fix.files[0]._replace(path=shared),),
                summary=f"set {KEY} = 0 in {shared} (the file named to sort after those that set "
                f"{HUGEPAGES_KEY}, which the hugepages fix writes) and apply it now",
            )
        return fix


def _since_boot(facts: NumaBalancingFacts) -> str:
    """The hinting faults and migrations since boot, when vmstat has both counters."""
    migrated = facts.counter("numa_pages_migrated")
    faults = facts.counter("numa_hint_faults")
    if migrated is None or faults is None:
        return ""
    return (f"; since boot it has taken {faults:,} hinting faults and migrated "
            f"{migrated:,} pages ({migrated * 4 / 2**20:.1f} GiB)")


FIRST_RELEASE = (3, 8)
"""The first Linux release with automatic NUMA balancing (CONFIG_NUMA_BALANCING)."""
_CONFIG_KEYS = ("CONFIG_NUMA_BALANCING", "CONFIG_NUMA_BALANCING_DEFAULT_ENABLED")


def _lacking(default: BalancingDefault) -> Optional[str]:
    """Why the kernel has no automatic NUMA balancing, when the tree shows it; else None."""
    if default.built is False:
        return f"{_CONFIG_KEYS[0]} is not set in {default.config}"
    if default.built is None and default.version is not None and default.version < FIRST_RELEASE:
        return "it came with Linux 3.8"
    return None


def _boot_default(default: BalancingDefault, nodes: int) -> str:
    """What the kernel sets at boot on ``nodes`` nodes, from the strongest evidence the tree has."""
    if default.cmdline in ("enable", "disable"):
        return (f"numa_balancing={default.cmdline} on {CMDLINE} turns it "
                f"{'on' if default.cmdline == 'enable' else 'off'} at boot")
    if default.built:
        setting = f"{_CONFIG_KEYS[1]}=y" if default.enabled else f"{_CONFIG_KEYS[1]} is not set"
        return (f"{_kernel(default)} has it ({default.config}: {setting}), so it is "
                f"{'on' if default.enabled else 'off'} at boot on these {nodes} nodes")
    if default.release is None:
        return f"the capture has neither {KERNEL_RELEASE} nor a kernel config to tell whether it is built in"
    since = "comes after Linux 3.8, which brought it," if default.version else "may have it,"
    return (f"kernel {default.release} {since} and Debian, Ubuntu, Fedora and RHEL 7 or later "
            f"kernels turn it on by default with two nodes or more (this host has {nodes}); "
            f"neither /boot/config-{default.release} nor {PROC_CONFIG} is in the capture to tell")


def _kernel(default: BalancingDefault) -> str:
    """The kernel by its release; /proc/config.gz names no release, which may be missing."""
    return f"kernel {default.release}" if default.release is not None else "the running kernel"


def _default_evidence(default: BalancingDefault) -> Tuple[Evidence, ...]:
    """The files the boot default was judged from."""
    found = []
    if default.release is not None:
        found.append(Evidence(KERNEL_RELEASE, default.release))
    if default.config is not None:
        states = (default.built, default.enabled)
        words = (f"{key}={'y' if on else 'n'}" for key, on in zip(_CONFIG_KEYS, states))
        found.append(Evidence(default.config, ", ".join(words)))
    if default.cmdline is not None:
        found.append(Evidence(CMDLINE, f"numa_balancing={default.cmdline}"))
    return tuple(found)
