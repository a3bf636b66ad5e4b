"""Typed facts about how the kernel runs the expert pool's CPUs: automatic NUMA balancing,
the CPU frequency policy, and whether the host is a virtual machine (SMT siblings are
:mod:`strata_doctor.facts.cpu`'s).

Each reader takes a :class:`~strata_doctor.root.Root` and reads only through it, so a
captured host replays these facts exactly; :class:`~strata_doctor.context.HostContext`
keeps one answer per host (``ctx.numa_balancing``, ``ctx.cpu_frequency``,
``ctx.virtualization``).
"""

import re
import zlib
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Set, Tuple

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
KERNEL_RELEASE = "/proc/sys/kernel/osrelease"
CMDLINE = "/proc/cmdline"
PROC_CONFIG = "/proc/config.gz"
_CONFIG_KEYS = ("CONFIG_NUMA_BALANCING", "CONFIG_NUMA_BALANCING_DEFAULT_ENABLED")


# -- automatic NUMA balancing -------------------------------------------------------------
class BalancingDefault(NamedTuple):
    """What the kernel sets ``kernel.numa_balancing`` to at boot, as far as the tree shows:
    read only when the sysctl file itself is missing."""

    release: Optional[str]
    """``/proc/sys/kernel/osrelease``; None when the capture lacks it."""
    version: Optional[Tuple[int, int]]
    """The release's major and minor number (``3.10.0-514.el7.x86_64``: (3, 10))."""
    config: Optional[str]
    """``/boot/config-<release>`` or ``/proc/config.gz``, the config read; None: neither."""
    built: Optional[bool]
    """``CONFIG_NUMA_BALANCING`` in that config (absent: hidden by a dependency, so False);
    None without a config."""
    enabled: Optional[bool]
    """``CONFIG_NUMA_BALANCING_DEFAULT_ENABLED``: on at boot with two nodes or more."""
    cmdline: Optional[str]
    """``numa_balancing=`` on ``/proc/cmdline`` (``enable``, ``disable``), the last one."""


class NumaBalancing(NamedTuple):
    """``kernel.numa_balancing`` and what it has done, from ``/proc``."""

    mode: Optional[int]
    """``/proc/sys/kernel/numa_balancing``: 0 off, 1 on, 2 memory tiering (bits may combine);
    None when the file is absent or unreadable."""
    unread: Optional[str]
    """Why the file could not be read (``missing``: no CONFIG_NUMA_BALANCING, or a capture
    without the file)."""
    counters: Tuple[Tuple[str, int], ...]
    """``numa_pages_migrated``, ``numa_hint_faults`` and ``numa_pte_updates`` from
    ``/proc/vmstat`` since boot, those present."""
    default: Optional[BalancingDefault] = None
    """What the kernel would set at boot; read only when the file is missing."""

    @property
    def on(self) -> bool:
        """Whether the kernel migrates pages toward the CPUs that touch them."""
        return bool(self.mode)

    def counter(self, name: str) -> Optional[int]:
        """One ``/proc/vmstat`` counter; None when absent."""
        return dict(self.counters).get(name)


def read_numa_balancing(root: Root) -> NumaBalancing:
    """Read ``kernel.numa_balancing`` and its ``/proc/vmstat`` counters through ``root``;
    when the file is missing, what the kernel would set at boot."""
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
    return NumaBalancing(mode, unread, tuple(counters),
                         _read_default(root) if unread == "missing" else None)


def _read_default(root: Root) -> BalancingDefault:
    release = root.read_value(KERNEL_RELEASE)
    path, text = _read_kernel_config(root, release)
    config = parse_kernel_config(text or "", _CONFIG_KEYS)
    cmdline = root.read(CMDLINE) if root.exists(CMDLINE) else None
    return BalancingDefault(
        release, parse_release(release or ""), path, config.get(_CONFIG_KEYS[0], False) if text else None,
        config.get(_CONFIG_KEYS[1], False) if text else None, cmdline_value(cmdline or "", "numa_balancing"))


def _read_kernel_config(root: Root, release: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """(path, text) of the running kernel's config: ``/boot/config-<release>``, else
    ``/proc/config.gz`` (CONFIG_IKCONFIG_PROC); (None, None) when the tree has neither."""
    boot = f"/boot/config-{release}" if release and "/" not in release else None
    if boot is not None and root.exists(boot):
        text = root.read(boot)
        if text:
            return boot, text
    if root.exists(PROC_CONFIG):
        text = gunzip_text(root.read_bytes(PROC_CONFIG) or b"")
        if text:
            return PROC_CONFIG, text
    return None, None


def gunzip_text(data: bytes) -> Optional[str]:
    """A gzip file's text, at most 16 MiB of it; None when it is not gzip."""
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, 16 << 20).decode(
            "utf-8", "replace") or None
    except zlib.error:
        return None


def parse_kernel_config(text: str, keys: Iterable[str]) -> Dict[str, bool]:
    """``keys`` a kernel config sets: True for ``=y`` or ``=m``, False for ``# CONFIG_X is not
    set``; a key the text does not name is left out."""
    wanted = set(keys)
    found: Dict[str, bool] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in wanted:
            found[key] = value.strip() in ("y", "m")
        elif line.startswith("# ") and line.rstrip().endswith(" is not set"):
            name = line[2:].split(" ", 1)[0]
            if name in wanted:
                found[name] = False
    return found


def parse_release(text: str) -> Optional[Tuple[int, int]]:
    """``3.10.0-514.el7.x86_64`` -> (3, 10); None when it does not start with two numbers."""
    match = re.match(r"(\d+)\.(\d+)", text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def cmdline_value(text: str, word: str) -> Optional[str]:
    """The value of the last ``word=value`` on a kernel command line; None when absent."""
    values = [w.partition("=")[2] for w in text.split() if w.startswith(f"{word}=")]
    return values[-1] if values else None


# -- the CPU frequency policy -------------------------------------------------------------
class FreqPolicy(NamedTuple):
    """One cpufreq policy, from ``/sys/devices/system/cpu/cpufreq/policyN/``, or on 3.x and
    early 4.x kernels from ``/sys/devices/system/cpu/cpuN/cpufreq/``."""

    path: str
    """The policy's folder (``cpufreq/policyN`` or ``cpuN/cpufreq``)."""
    cpus: FrozenSet[int]
    """The CPUs it governs (``affected_cpus``, else ``related_cpus``, else N)."""
    driver: Optional[str]
    """``scaling_driver``: ``acpi-cpufreq``, ``intel_pstate``, ``intel_cpufreq`` (intel_pstate
    passive), ``amd-pstate-epp``, ``amd-pstate``, ``cppc_cpufreq``..."""
    governor: Optional[str]
    """``scaling_governor``; None when absent or empty (the kernel answers EINVAL while no
    governor is attached, which a capture keeps as an empty file): unknown."""
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
    its first one), and then every policy. A CPU of ``cpus`` no policy governs is read from
    its own ``cpuN/cpufreq`` folder, where 3.x and early 4.x kernels keep the policy (and where
    captures that copied ``cpuN/cpufreq`` without ``cpu/cpufreq`` keep it), as cpupower and
    node_exporter read it. Driver and clocks are read once for each distinct governor and
    preference, from the first policy that has them.
    """
    wanted = frozenset(cpus)
    policies = _read_policies(root, _policy_folders(root, wanted))
    policies += _read_policies(root, _percpu_folders(root, wanted.difference(*(p.cpus for p in policies))))
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


def _policy_folders(root: Root, wanted: FrozenSet[int]) -> List[Tuple[str, int]]:
    """(folder, CPU named) of the ``policyN`` folders named after a CPU of ``wanted``, in CPU
    order; every policy when none is."""
    numbers = sorted(int(n[6:]) for n in root.listdir(CPUFREQ_DIR)
                     if n.startswith("policy") and n[6:].isdigit())
    chosen = [n for n in numbers if n in wanted] or numbers
    return [(f"{CPUFREQ_DIR}/policy{n}", n) for n in chosen]


def _percpu_folders(root: Root, cpus: FrozenSet[int]) -> List[Tuple[str, int]]:
    """(folder, CPU) of the ``cpuN/cpufreq`` folders of ``cpus``, those that exist."""
    folders = ((f"{CPU_DIR}/cpu{cpu}/cpufreq", cpu) for cpu in sorted(cpus))
    return [(base, cpu) for base, cpu in folders if root.is_dir(base)]


def _read_policies(root: Root, folders: List[Tuple[str, int]]) -> List[FreqPolicy]:
    """Each policy of ``folders`` but those whose CPU an earlier one governs (an old kernel
    links a shared policy's other CPUs to its first CPU's folder); driver and clocks are
    those of the first policy read with the same governor and preference."""
    policies: List[FreqPolicy] = []
    shared: Dict[Tuple[Optional[str], Optional[str]], FreqPolicy] = {}
    covered: Set[int] = set()
    for base, cpu in folders:
        if cpu in covered:
            continue
        governor = root.read_value(f"{base}/scaling_governor")
        epp = root.read_value(f"{base}/energy_performance_preference")
        cpus_text = root.read(f"{base}/affected_cpus") or root.read(f"{base}/related_cpus") or ""
        governed = parse_cpulist(",".join(cpus_text.split())) or frozenset({cpu})
        covered.update(governed)
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


# -- virtual machines ---------------------------------------------------------------------
class Virtualization(NamedTuple):
    """Whether the host is a virtual machine, and how that shows."""

    hypervisor_flag: bool
    """The ``hypervisor`` CPU flag in ``/proc/cpuinfo`` (set by every x86 hypervisor)."""
    detected: Optional[str]
    """``systemd-detect-virt --vm``: the hypervisor (``kvm``, ``vmware``, ``microsoft``...),
    ``none``, or None when the program is not installed or did not answer."""
    platform_guest: Optional[str] = None
    """The hypervisor of a platform that only runs as a guest: an IBM pSeries LPAR's
    (``PowerVM LPAR``, from /proc/cpuinfo's ``platform`` and the device tree); None elsewhere."""

    @property
    def virtual(self) -> bool:
        """Whether the host is a virtual machine."""
        if self.platform_guest is not None:
            return True
        if self.detected is not None:
            return self.detected != "none" or self.hypervisor_flag
        return self.hypervisor_flag

    @property
    def name(self) -> str:
        """The hypervisor as ``systemd-detect-virt`` names it, else as the platform does, else
        ``a hypervisor``."""
        if self.detected and self.detected != "none":
            return self.detected
        return self.platform_guest or "a hypervisor"


def read_virtualization(root: Root, flags: FrozenSet[str],
                        platform_guest: Optional[str] = None) -> Virtualization:
    """Read the signs of a virtual machine through ``root`` (``flags``: the CPU's flags;
    ``platform_guest``: the hypervisor a guest-only platform names)."""
    result = root.run(DETECT_VIRT)
    detected: Optional[str] = None
    if not result.missing and not result.timed_out and result.status in (0, 1):
        words = result.stdout.split()
        detected = words[0] if words else None
    return Virtualization("hypervisor" in flags, detected, platform_guest)


__all__ = [
    "ACTIVE_DRIVERS",
    "BOOST",
    "CPUFREQ_DIR",
    "DETECT_VIRT",
    "NO_TURBO",
    "NUMA_BALANCING",
    "PLATFORM_PROFILE",
    "PROC_CONFIG",
    "VMSTAT",
    "BalancingDefault",
    "CpuFrequency",
    "FreqPolicy",
    "NumaBalancing",
    "Virtualization",
    "cmdline_value",
    "gunzip_text",
    "parse_kernel_config",
    "parse_release",
    "read_cpu_frequency",
    "read_numa_balancing",
    "read_virtualization",
]
