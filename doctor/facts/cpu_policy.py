"""Typed facts about how the kernel runs the expert pool's CPUs: automatic NUMA balancing,
the CPU frequency policy, SMT siblings, and whether the host is a virtual machine.

Each reader takes a :class:`~strata_doctor.root.Root` and reads only through it, so a
captured host replays these facts exactly; :class:`~strata_doctor.context.HostContext`
keeps one answer per host (``ctx.numa_balancing``, ``ctx.cpu_frequency``,
``ctx.thread_siblings``, ``ctx.virtualization``).
"""

from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import parse_cpulist, parse_int
from strata_doctor.root import Command, Root

NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
VMSTAT = "/proc/vmstat"
CPU_DIR = "/sys/devices/system/cpu"
CPUFREQ_DIR = f"{CPU_DIR}/cpufreq"
NO_TURBO = f"{CPU_DIR}/intel_pstate/no_turbo"
PSTATE_STATUS = f"{CPU_DIR}/intel_pstate/status"
BOOST = f"{CPUFREQ_DIR}/boost"
PLATFORM_PROFILE = "/sys/firmware/acpi/platform_profile"
TUNED_ADM = ("/usr/sbin/tuned-adm", "/usr/bin/tuned-adm")
TUNED_PROFILE = "/etc/tuned/active_profile"
DETECT_VIRT = Command("systemd-detect-virt-vm", ("systemd-detect-virt", "--vm"))
"""``systemd-detect-virt --vm``: the hypervisor's name, or ``none`` (exit status 1)."""
_VMSTAT_KEYS = ("numa_pages_migrated", "numa_hint_faults", "numa_pte_updates")


# -- automatic NUMA balancing -------------------------------------------------------------
class NumaBalancing(NamedTuple):
    """``kernel.numa_balancing`` and what it has done, from ``/proc``."""

    mode: Optional[int]
    """``/proc/sys/kernel/numa_balancing``: 0 off, 1 on, 2 memory tiering (bits may combine);
    None when the file is absent or unreadable."""
    unread: Optional[str]
    """Why the file could not be read (``missing``: a kernel without CONFIG_NUMA_BALANCING)."""
    counters: Tuple[Tuple[str, int], ...]
    """``numa_pages_migrated``, ``numa_hint_faults`` and ``numa_pte_updates`` from
    ``/proc/vmstat`` since boot, those present."""

    @property
    def on(self) -> bool:
        """Whether the kernel migrates pages toward the CPUs that touch them."""
        return bool(self.mode)

    def counter(self, name: str) -> Optional[int]:
        """One ``/proc/vmstat`` counter; None when absent."""
        return dict(self.counters).get(name)


def read_numa_balancing(root: Root) -> NumaBalancing:
    """Read ``kernel.numa_balancing`` and its ``/proc/vmstat`` counters through ``root``."""
    mode = parse_int(root.read(NUMA_BALANCING))
    unread = root.reads.get(NUMA_BALANCING) if mode is None else None
    counters: List[Tuple[str, int]] = []
    if mode:
        for line in (root.read(VMSTAT) or "").splitlines():
            key, _, value = line.partition(" ")
            if key in _VMSTAT_KEYS:
                number = parse_int(value)
                if number is not None:
                    counters.append((key, number))
    return NumaBalancing(mode, unread if mode is None else None, tuple(counters))


# -- the CPU frequency policy -------------------------------------------------------------
class FreqPolicy(NamedTuple):
    """One cpufreq policy, from ``/sys/devices/system/cpu/cpufreq/policyN/``."""

    path: str
    """The policy's folder."""
    cpus: FrozenSet[int]
    """The CPUs it governs (``affected_cpus``, else ``related_cpus``, else N)."""
    driver: Optional[str]
    """``scaling_driver``: ``acpi-cpufreq``, ``intel_pstate``, ``intel_cpufreq`` (intel_pstate
    passive), ``amd-pstate-epp``, ``amd-pstate``, ``cppc_cpufreq``..."""
    governor: Optional[str]
    """``scaling_governor``."""
    epp: Optional[str]
    """``energy_performance_preference`` (intel_pstate, amd-pstate-epp); None when absent."""
    cur_khz: Optional[int]
    """``scaling_cur_freq`` in kHz (driver and clocks: those of the first policy read with the
    same governor and preference)."""
    min_khz: Optional[int]
    """``cpuinfo_min_freq``: the lowest the hardware runs, in kHz."""
    max_khz: Optional[int]
    """``cpuinfo_max_freq``: the highest, in kHz (turbo included where the driver says so)."""

    @property
    def pinned_low(self) -> bool:
        """powersave under a driver where it means "the lowest frequency": every driver but
        intel_pstate and amd-pstate-epp in active mode, whose powersave scales with load."""
        return self.governor == "powersave" and self.driver not in ACTIVE_DRIVERS


ACTIVE_DRIVERS = ("intel_pstate", "amd-pstate-epp")
"""Drivers whose own ``powersave`` policy scales with load (the EPP is the knob there)."""


class CpuFrequency(NamedTuple):
    """How the kernel and firmware clock the CPUs."""

    policies: Tuple[FreqPolicy, ...]
    """The cpufreq policies of the CPUs asked for, in the order of their first CPU; empty
    without cpufreq (a VM, or the firmware controls the clocks)."""
    no_turbo: Optional[int]
    """``intel_pstate/no_turbo`` (1: turbo off); None when absent."""
    pstate_status: Optional[str]
    """``intel_pstate/status``: ``active``, ``passive`` or ``off``; None when absent."""
    boost: Optional[int]
    """``cpufreq/boost`` (0: turbo/boost off; acpi-cpufreq, amd-pstate); None when absent."""
    platform_profile: Optional[str]
    """``/sys/firmware/acpi/platform_profile`` (``low-power``, ``balanced``, ``performance``...)."""
    tuned: bool
    """Whether TuneD's ``tuned-adm`` is installed."""
    tuned_profile: Optional[str]
    """``/etc/tuned/active_profile``; None when absent or empty."""

    @property
    def known(self) -> bool:
        """Whether the host shows any frequency control at all."""
        return bool(self.policies) or self.no_turbo is not None or self.boost is not None \
            or self.platform_profile is not None

    def policies_of(self, cpus: FrozenSet[int]) -> Tuple[FreqPolicy, ...]:
        """The policies that govern any of ``cpus``."""
        return tuple(p for p in self.policies if p.cpus & cpus)


def read_cpu_frequency(root: Root, cpus: Iterable[int]) -> CpuFrequency:
    """Read the cpufreq policies of ``cpus``, the turbo switches and the ACPI platform profile
    through ``root``.

    x86 kernels make one ``policyN`` per CPU, named after it: only those of ``cpus`` are read
    (a few files each), unless none is (a policy that governs a cluster of CPUs is named after
    its first one), and then every policy. Driver and clocks are read once for each distinct
    governor and preference, from the first policy that has them.
    """
    policies = _read_policies(root, _policy_names(root, frozenset(cpus)))
    profile = root.read_value(PLATFORM_PROFILE)
    tuned_profile = root.read_value(TUNED_PROFILE) if root.exists(TUNED_PROFILE) else None
    return CpuFrequency(
        policies=tuple(sorted(policies, key=lambda p: min(p.cpus, default=0))),
        no_turbo=parse_int(root.read(NO_TURBO)) if root.exists(NO_TURBO) else None,
        pstate_status=root.read_value(PSTATE_STATUS) if root.exists(PSTATE_STATUS) else None,
        boost=parse_int(root.read(BOOST)) if root.exists(BOOST) else None,
        platform_profile=profile or None,
        tuned=any(root.exists(path) for path in TUNED_ADM),
        tuned_profile=tuned_profile or None,
    )


def _policy_names(root: Root, wanted: FrozenSet[int]) -> List[str]:
    """The ``policyN`` folders named after a CPU of ``wanted``, in CPU order; every policy
    when none is."""
    names = sorted((n for n in root.listdir(CPUFREQ_DIR) if n.startswith("policy") and n[6:].isdigit()),
                   key=lambda n: int(n[6:]))
    return [n for n in names if int(n[6:]) in wanted] or names


def _read_policies(root: Root, names: List[str]) -> List[FreqPolicy]:
    """Each policy of ``names``; driver and clocks are those of the first policy read with
    the same governor and preference."""
    policies: List[FreqPolicy] = []
    shared: Dict[Tuple[Optional[str], Optional[str]], FreqPolicy] = {}
    for name in names:
        base = f"{CPUFREQ_DIR}/{name}"
        governor = root.read_value(f"{base}/scaling_governor")
        epp = root.read_value(f"{base}/energy_performance_preference")
        cpus_text = root.read(f"{base}/affected_cpus") or root.read(f"{base}/related_cpus") or ""
        governed = parse_cpulist(",".join(cpus_text.split())) or frozenset({int(name[6:])})
        first = shared.get((governor, epp))
        if first is None:
            first = shared[(governor, epp)] = _read_clocks(root, base, governed, governor, epp)
            policies.append(first)
        else:
            policies.append(first._replace(path=base, cpus=governed))
    return policies


def _read_clocks(root: Root, base: str, governed: FrozenSet[int], governor: Optional[str],
                 epp: Optional[str]) -> FreqPolicy:
    """The policy in ``base`` with its driver and clocks read."""
    return FreqPolicy(
        path=base, cpus=governed, driver=root.read_value(f"{base}/scaling_driver"),
        governor=governor, epp=epp,
        cur_khz=parse_int(root.read(f"{base}/scaling_cur_freq")),
        min_khz=parse_int(root.read(f"{base}/cpuinfo_min_freq")),
        max_khz=parse_int(root.read(f"{base}/cpuinfo_max_freq")),
    )


# -- SMT siblings -------------------------------------------------------------------------
class ThreadSiblings(NamedTuple):
    """Which logical CPUs share a physical core, from ``cpuN/topology/thread_siblings_list``."""

    cores: Tuple[FrozenSet[int], ...]
    """One set of sibling CPUs per physical core read, in the order of their first CPU."""
    unknown: FrozenSet[int]
    """CPUs asked for whose sibling list could not be read."""

    def cores_in(self, cpus: FrozenSet[int]) -> Optional[int]:
        """Physical cores among ``cpus``; None when any of them has no sibling list."""
        if cpus & self.unknown:
            return None
        return sum(1 for core in self.cores if core & cpus)


def read_thread_siblings(root: Root, cpus: Iterable[int]) -> ThreadSiblings:
    """Read ``thread_siblings_list`` of ``cpus`` through ``root``: one file per core, since a
    core's list names its siblings (CPU ids are not contiguous: the seed's node 1 is
    ``22-43,66-87``, CPU 22's sibling is 66)."""
    seen: Dict[int, FrozenSet[int]] = {}
    unknown: List[int] = []
    for cpu in sorted(cpus):
        if cpu in seen:
            continue
        siblings = parse_cpulist(root.read(f"{CPU_DIR}/cpu{cpu}/topology/thread_siblings_list") or "")
        if cpu not in siblings:
            unknown.append(cpu)
            continue
        for sibling in siblings:
            seen[sibling] = siblings
    cores = sorted(set(seen.values()), key=min)
    return ThreadSiblings(tuple(cores), frozenset(unknown))


# -- virtual machines ---------------------------------------------------------------------
class Virtualization(NamedTuple):
    """Whether the host is a virtual machine, and how that shows."""

    hypervisor_flag: bool
    """The ``hypervisor`` CPU flag in ``/proc/cpuinfo`` (set by every x86 hypervisor)."""
    detected: Optional[str]
    """``systemd-detect-virt --vm``: the hypervisor (``kvm``, ``vmware``, ``microsoft``...),
    ``none``, or None when the program is not installed or did not answer."""

    @property
    def virtual(self) -> bool:
        """Whether the host is a virtual machine."""
        if self.detected is not None:
            return self.detected != "none" or self.hypervisor_flag
        return self.hypervisor_flag

    @property
    def name(self) -> str:
        """The hypervisor as ``systemd-detect-virt`` names it, else ``a hypervisor``."""
        return self.detected if self.detected and self.detected != "none" else "a hypervisor"


def read_virtualization(root: Root, flags: FrozenSet[str]) -> Virtualization:
    """Read the signs of a virtual machine through ``root`` (``flags``: the CPU's flags)."""
    result = root.run(DETECT_VIRT)
    detected: Optional[str] = None
    if not result.missing and not result.timed_out and result.status in (0, 1):
        words = result.stdout.split()
        detected = words[0] if words else None
    return Virtualization("hypervisor" in flags, detected)


__all__ = [
    "ACTIVE_DRIVERS",
    "BOOST",
    "CPUFREQ_DIR",
    "DETECT_VIRT",
    "NO_TURBO",
    "NUMA_BALANCING",
    "PLATFORM_PROFILE",
    "VMSTAT",
    "CpuFrequency",
    "FreqPolicy",
    "NumaBalancing",
    "ThreadSiblings",
    "Virtualization",
    "read_cpu_frequency",
    "read_numa_balancing",
    "read_thread_siblings",
    "read_virtualization",
]
