"""One host as the checks see it: facts read lazily, once, through one root."""

from functools import cached_property
from typing import Dict, FrozenSet, List, Optional, Tuple

from strata_doctor.config import EngineConfig
from strata_doctor.context_accel import AcceleratorFacts
from strata_doctor.context_gpus import EngineGpuFacts
from strata_doctor.context_kernel import KernelLogFacts
from strata_doctor.context_memory import MemoryStateFacts
from strata_doctor.context_nodes import MemoryNodeFacts
from strata_doctor.context_platform import PlatformFacts
from strata_doctor.context_report import ReportFacts
from strata_doctor.facts.cgroup import EngineLimits, read_engine_limits
from strata_doctor.facts.cgroup_path import read_cgroup_path
from strata_doctor.facts.cpu import CpuFacts, KernelIsa, read_cpu, read_kernel_isa
from strata_doctor.facts.cpu_arch import CpuArch, read_cpu_arch
from strata_doctor.facts.cpu_policy import (
    CpuFrequency,
    NumaBalancing,
    Virtualization,
    read_cpu_frequency,
    read_numa_balancing,
    read_virtualization,
)
from strata_doctor.facts.engine import (
    EngineProcess,
    SystemdSupport,
    UnitBinding,
    UnitState,
    read_configured_binding,
    read_process,
    read_systemd_support,
    read_unit,
    unit_exec_start,
)
from strata_doctor.facts.gpu import Gpu, read_pci_functions
from strata_doctor.facts.hugepage_pools import NodePool, read_node_pools
from strata_doctor.facts.hugepages import HugepageFacts, detect_container, read_hugepages
from strata_doctor.facts.isolation import IsolationFacts, read_isolation
from strata_doctor.facts.meminfo import read_meminfo
from strata_doctor.facts.numa import NumaFacts, read_numa
from strata_doctor.facts.nvidia_smi import SmiGpuState, read_smi_query, read_smi_states
from strata_doctor.facts.oomd import OomdFacts, read_oomd, read_oomd_active
from strata_doctor.facts.pagecache import NodeCache, read_node_cache
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.facts.processes import ProcessInfo, find_engine_pid, read_processes, read_uptime
from strata_doctor.facts.saved_probe import SAVED_PATH, SavedProbe, read_saved
from strata_doctor.facts.systemd_seen import SystemdSeen, read_systemd_seen
from strata_doctor.facts.thp import ThpFacts, read_thp
from strata_doctor.facts.units import RESERVED_UNITS, unit_settings
from strata_doctor.root import Root
from strata_doctor.rules.binding import BindingPlan, BindingState, assess, plan_for
from strata_doctor.rules.gpu import GpuPlacement, choose_compute_gpu, place_gpu
from strata_doctor.rules.isolation import IsolationVerdict, assess_isolation, planned_cpus, service_cpus
from strata_doctor.rules.limits import tightest_limits
from strata_doctor.rules.memory import arena_headroom, host_room
from strata_doctor.rules.oomd import Exposure, assess_exposure
from strata_doctor.rules.pool import PoolAssessment, assess_pool
from strata_doctor.rules.trap import TrapVerdict, assess_trap
from strata_doctor.sizes import with_model_sizes


class HostContext(EngineGpuFacts, AcceleratorFacts, MemoryNodeFacts, KernelLogFacts, MemoryStateFacts,
                  PlatformFacts, ReportFacts):
    """Facts about one host, each computed on first use and then kept."""

    def __init__(self, root: Root, config: EngineConfig, gpu: Optional[str] = None) -> None:
        self.root = root
        self.config = config
        self.gpu_choice = gpu or config.gpu
        self.config = with_model_sizes(root, config, lambda: self.engine_pid)  # doctor/sizes.py

    @cached_property
    def numa(self) -> NumaFacts:
        """NUMA nodes, CPUs and distances."""
        return read_numa(self.root)

    @cached_property
    def cpu(self) -> CpuFacts:
        """CPU model, sockets and ISA."""
        return read_cpu(self.root)

    @cached_property
    def cpu_arch(self) -> CpuArch:
        """The architecture /proc/cpuinfo describes: arm cores and Features, POWER's platform."""
        return read_cpu_arch(self.root)

    @cached_property
    def gpus(self) -> Tuple[Gpu, ...]:
        """Every display-class PCI function and AMD accelerator, integrated GPUs marked
        (context_accel.py)."""
        return self.classified_gpus

    @cached_property
    def pci_addresses(self) -> Tuple[str, ...]:
        """Every PCI function the tree lists, display or not; none: its GPUs are unknown."""
        return read_pci_functions(self.root)

    @cached_property
    def compute_gpu(self) -> Tuple[Optional[Gpu], str]:
        """(the compute GPU, why it was chosen), or (None, why there is none): a BMC's or a
        hypervisor's display chip is never taken unless ``--gpu`` or the config names it."""
        config = self.config if self.gpu_choice == self.config.gpu else EngineConfig()
        return choose_compute_gpu(self.gpus, self.gpu_choice, config.gpu_named_by, config.gpu_setting,
                                  bool(self.gpus) or bool(self.pci_addresses))

    @cached_property
    def placement(self) -> Optional[GpuPlacement]:
        """The compute GPU and its node; None when the host has no compute GPU (the reason
        is :attr:`compute_gpu`'s)."""
        gpu, reason = self.compute_gpu
        if gpu is None:
            return None
        node, source, contradiction = place_gpu(gpu, self.numa)
        return GpuPlacement(gpu, reason, node, source, contradiction)

    @cached_property
    def unit(self) -> UnitState:
        """The engine unit as systemd shows it now."""
        return read_unit(self.root, self.config.unit)

    @cached_property
    def configured_binding(self) -> UnitBinding:
        """The engine unit's binding as written in its unit file and drop-ins."""
        return read_configured_binding(self.root, self.config.unit)

    @cached_property
    def engine_process(self) -> Optional[EngineProcess]:
        """The running engine: its unit's MainPID while the unit runs, otherwise the process
        found as the engine started by hand (from a desktop session or a shell); None when
        neither runs. Every check, rule and fact takes the engine from here."""
        pid = self.unit.main_pid or find_engine_pid(self.root, self.processes, self.config.unit)
        return read_process(self.root, pid) if pid else None

    @cached_property
    def engine_pid(self) -> Optional[int]:
        """The running engine's PID (see :attr:`engine_process`); None when it does not run."""
        proc = self.engine_process
        return proc.pid if proc else None

    @cached_property
    def processes(self) -> Tuple[ProcessInfo, ...]:
        """Every process under /proc."""
        return read_processes(self.root)

    @cached_property
    def uptime(self) -> Optional[float]:
        """Seconds since boot (``/proc/uptime``); None when unreadable."""
        return read_uptime(self.root)

    @cached_property
    def meminfo(self) -> Dict[str, int]:
        """``/proc/meminfo``, in bytes (page counts as they are): the one reading of it,
        which every fact that needs a meminfo value is given."""
        return read_meminfo(self.root)

    @cached_property
    def saved_probe(self) -> Optional[SavedProbe]:
        """What ``strata-doctor probe --save`` measured on this host (docs/probe.md); None
        when it never ran. Unused, with the reason, when from another CPU or kernel."""
        if not self.root.exists(SAVED_PATH):  # tested, not read: absence is no unreadable file
            return None
        text = self.root.read(SAVED_PATH)
        return read_saved(text, self.why_unread(SAVED_PATH), self.cpu.model,
                          self.root.read_value("/proc/sys/kernel/osrelease") if text else None)

    def why_unread(self, path: str) -> Optional[str]:
        """Why a file the facts needed could not be read (``missing``, an error), if it was not."""
        return self.root.reads.get(path)

    # -- systemd ------------------------------------------------------------------------
    @cached_property
    def systemd(self) -> SystemdSupport:
        """systemd's version and cgroup mode: which unit settings this host understands."""
        return read_systemd_support(self.root, self.unit)

    @cached_property
    def systemd_seen(self) -> SystemdSeen:
        """What in the tree shows systemd: systemctl, the unit's files, /run/systemd/system, PID 1."""
        return read_systemd_seen(self.root, self.systemd.present, self.configured_binding.files)

    @cached_property
    def engine_exec_start(self) -> Optional[str]:
        """The engine unit's ``ExecStart=`` after its unit file and drop-ins are merged."""
        return unit_exec_start(self.root, self.config.unit)

    @cached_property
    def reserved_unit_cpus(self) -> List[Tuple[str, str]]:
        """(file, value) of ``AllowedCPUs=`` of system.slice, user.slice and init.scope, for
        those whose files set it (what ``fix --reserve-node`` writes)."""
        found = []
        for unit, section in RESERVED_UNITS:
            setting = unit_settings(self.root, unit, section).get("AllowedCPUs")
            if setting:
                found.append((setting[1], setting[0]))
        return found

    # -- the rules' answers for this host -------------------------------------------------
    @cached_property
    def binding_plan(self) -> Optional[BindingPlan]:
        """Where the engine should run; None when there is nothing to bind to."""
        return plan_for(self.numa, self.target_node, self.config,
                        lambda: self.root.read_value("/proc/sys/kernel/osrelease"),
                        self.cpu_isolation.domain_isolated or frozenset())

    @cached_property
    def arena_headroom(self) -> Optional[Tuple[str, int]]:
        """(nodes, bytes left) on the planned node(s) once arena, K/V and headroom are taken;
        None without an arena size."""
        if self.config.pinned_bytes is None:
            return None
        plan = self.binding_plan if self.numa.nodes else None
        # The host's size as arena-fit counts it: /proc/meminfo, else the nodes' sum.
        mem_total = host_room(self.meminfo, self.numa).total if plan is None else None
        return arena_headroom(self.config, self.numa, plan, mem_total)

    @cached_property
    def binding_state(self) -> Optional[BindingState]:
        """Whether the engine follows the binding plan; None without a plan."""
        plan = self.binding_plan
        if plan is None:
            return None
        return assess(self.engine_process, self.unit, self.configured_binding, plan)

    @cached_property
    def target_node(self) -> Optional[int]:
        """The node the engine should be bound to: ``numa: N`` or the GPU's node."""
        if self.config.numa == "off":
            return None
        if self.config.numa.isdigit():
            return int(self.config.numa)
        return self.placement.node if self.placement else None

    # -- memory traps (hugepages, THP, systemd-oomd): doctor/facts/hugepages.py, doctor/facts/oomd.py --
    @cached_property
    def hugepages(self) -> HugepageFacts:
        """Hugepage pools, their holders and hugetlbfs files, and their configuration."""
        return read_hugepages(self.root, self.processes, self.meminfo)

    @cached_property
    def thp(self) -> ThpFacts:
        """Transparent hugepage settings."""
        return read_thp(self.root, self.meminfo)

    @cached_property
    def node_pools(self) -> Tuple[NodePool, ...]:
        """The hugepage pools of every node and page size."""
        return read_node_pools(self.root)

    @cached_property
    def oomd(self) -> OomdFacts:
        """systemd-oomd and the engine's cgroup under it."""
        return read_oomd(self.root, self.unit, self.engine_pid, self.meminfo, detect_container(self.root))

    @cached_property
    def oomd_active(self) -> str:
        """systemd-oomd's state as ``systemctl is-active`` says it, or ``unknown (why)``."""
        return read_oomd_active(self.root)

    # -- limits on the engine (cgroup, container, memlock, swap) and page cache: facts_cgroup,
    # facts_pagecache --
    @cached_property
    def engine_limits(self) -> EngineLimits:
        """The engine's cgroup limits (the tightest on its path: ``rules.tightest_limits``),
        container, locked-memory limit and swap."""
        oomd = self.oomd
        limits = read_engine_limits(self.root, self.config.unit, oomd.engine_cgroup, oomd.cgroup_source,
                                    self.engine_pid, oomd.container, self.meminfo)
        path = read_cgroup_path(self.root, limits, self.engine_pid is not None)
        return tightest_limits(limits, path, self.meminfo.get("MemTotal"))

    @cached_property
    def binding_node_caches(self) -> Optional[Tuple[NodeCache, ...]]:
        """Free memory and page cache of the node(s) the engine should use (the binding
        plan's memory nodes, else the target node); None without a node or when one of
        them has no readable ``meminfo``."""
        plan = self.binding_plan
        nodes = sorted(plan.mem_nodes) if plan is not None and plan.mem_nodes else (
            [self.target_node] if self.target_node is not None else [])
        caches = tuple(read_node_cache(self.root, n) for n in nodes)
        if not caches or any(c is None for c in caches):
            return None
        return tuple(c for c in caches if c is not None)

    @cached_property
    def pool_assessment(self) -> PoolAssessment:
        """What the default hugepage pool does to the engine's next start."""
        return assess_pool(self.hugepages, self.config, self.engine_pid)

    @cached_property
    def exposure(self) -> Exposure:
        """How exposed the engine is to systemd-oomd."""
        return assess_exposure(self.oomd)

    @cached_property
    def trap_verdict(self) -> Optional[TrapVerdict]:
        """Whether a pool the arena cannot use is the seed's trap or only held-back memory
        (``rules.assess_trap``); None unless MAP_HUGETLB fails beside a pool."""
        proc = self.engine_process
        return assess_trap(self.hugepages, self.config, self.pool_assessment,
                           proc.resident_bytes if proc else 0, self.oomd, self.exposure)

    # -- how the kernel runs the pool's CPUs: doctor/facts/cpu_policy.py ----------------------
    @cached_property
    def numa_balancing(self) -> NumaBalancing:
        """``kernel.numa_balancing`` and its page-migration counters."""
        return read_numa_balancing(self.root)

    @cached_property
    def cpu_frequency(self) -> CpuFrequency:
        """cpufreq policies of the pool's CPUs (:attr:`pool_cpus`), turbo switches, the ACPI
        platform profile and TuneD."""
        return read_cpu_frequency(self.root, self.pool_cpus[0])

    @cached_property
    def pool_cpus(self) -> Tuple[FrozenSet[int], str]:
        """(CPUs, where) the expert pool will run: the binding plan's CPUs, else the running
        engine's allowed CPUs, else every online CPU."""
        plan = self.binding_plan if len(self.numa.cpu_nodes) > 1 else None
        if plan is not None:
            nodes = sorted(plan.cpu_nodes)
            return plan.cpus, ("node " if len(nodes) == 1 else "nodes ") + ",".join(map(str, nodes))
        proc = self.engine_process
        online = self.numa.online_cpus or frozenset(c for c, _ in self.cpu.package_of)
        if proc is not None and proc.cpus_allowed and proc.cpus_allowed < online:
            return proc.cpus_allowed, "the running engine's allowed CPUs"
        usable = service_cpus(self.cpu_isolation, online)  # a unit that sets no affinity
        if usable == online or self.engine_cpu_setting:
            return online, "the host"
        return usable, "every service"

    @cached_property
    def cpu_isolation(self) -> IsolationFacts:
        """Isolated and nohz_full CPUs, and systemd's default CPU affinity."""
        return read_isolation(self.root)

    @cached_property
    def engine_cpu_setting(self) -> Optional[str]:
        """The engine unit's own ``CPUAffinity=``/``AllowedCPUs=`` (loaded, else in its
        files), which escapes systemd's default affinity; None when it sets neither."""
        for key in ("CPUAffinity", "AllowedCPUs"):
            if self.unit.get(key).strip():
                return f"{key}={self.unit.get(key).strip()}"
        files = self.configured_binding
        if files.cpu_affinity:
            return f"CPUAffinity={format_cpulist(files.cpu_affinity)}"
        return f"AllowedCPUs={format_cpulist(files.allowed_cpus)}" if files.allowed_cpus else None

    @cached_property
    def isolation(self) -> IsolationVerdict:
        """The engine's planned CPUs against isolated CPUs and systemd's default affinity."""
        online = self.numa.online_cpus or frozenset(c for c, _ in self.cpu.package_of)
        planned = planned_cpus(self.numa, self.binding_plan, online)
        return assess_isolation(self.cpu_isolation, planned, online, self.engine_cpu_setting)

    @cached_property
    def virtualization(self) -> Virtualization:
        """The ``hypervisor`` flag, ``systemd-detect-virt --vm`` and a pSeries LPAR's hypervisor."""
        return read_virtualization(self.root, self.cpu.flags, self.cpu_arch.platform_guest)

    # -- GPUs as nvidia-smi sees them, and the ISA the kernel gives ----------------------------
    @cached_property
    def smi_query(self) -> Dict[str, SmiGpuState]:
        """nvidia-smi's GPU query, one row per NVIDIA GPU by PCI address: model, memory,
        driver, PCIe link (from its captured or live output); empty without nvidia-smi. The
        report and the map name GPUs from it; :attr:`smi_states` adds ``nvidia-smi -q``."""
        return read_smi_query(self.root)

    @cached_property
    def smi_states(self) -> Dict[str, SmiGpuState]:
        """:attr:`smi_query`'s rows with each GPU's persistence mode (``nvidia-smi -q``), by
        PCI address; empty without nvidia-smi."""
        return read_smi_states(self.root, self.smi_query)

    @cached_property
    def kernel_isa(self) -> KernelIsa:
        """What the kernel lets a process use: release, arch_prctl's AMX answer (asked on a
        live host, replayed from a capture), boot options that hide vector state."""
        return read_kernel_isa(self.root)
