"""One host as the checks see it: facts read lazily, once, through one root."""

from functools import cached_property
from typing import FrozenSet, NamedTuple, Optional, Tuple

from strata_doctor.engine import (
    EngineConfig,
    EngineProcess,
    UnitBinding,
    UnitState,
    read_configured_binding,
    read_process,
    read_unit,
)
from strata_doctor.facts import (
    CpuFacts,
    Gpu,
    NumaFacts,
    normalize_address,
    read_cpu,
    read_gpus,
    read_numa,
)
from strata_doctor.memory import HugepageFacts, ThpFacts, detect_container, read_hugepages, read_thp
from strata_doctor.oomd import OomdFacts, read_oomd
from strata_doctor.parse import format_cpulist
from strata_doctor.processes import ProcessInfo, find_engine_pid, read_processes
from strata_doctor.root import Root


class GpuPlacement(NamedTuple):
    """The compute GPU, its node, and how each was decided."""

    gpu: Gpu
    """The chosen compute GPU."""
    choice_reason: str
    """Why this GPU was taken as the compute GPU."""
    node: Optional[int]
    """Its NUMA node; None when neither ``numa_node`` nor ``local_cpulist`` tells."""
    node_source: str
    """``numa_node``, ``local_cpulist`` or ``none``."""
    contradiction: Optional[str] = None
    """Set when ``numa_node`` and ``local_cpulist`` disagree."""


class HostContext:
    """Facts about one host, each computed on first use and then kept."""

    def __init__(self, root: Root, config: EngineConfig, gpu: Optional[str] = None) -> None:
        self.root = root
        self.config = config
        self.gpu_choice = gpu or config.gpu

    @cached_property
    def numa(self) -> NumaFacts:
        """NUMA nodes, CPUs and distances."""
        return read_numa(self.root)

    @cached_property
    def cpu(self) -> CpuFacts:
        """CPU model, sockets and ISA."""
        return read_cpu(self.root)

    @cached_property
    def gpus(self) -> Tuple[Gpu, ...]:
        """Every display-class PCI function."""
        return read_gpus(self.root)

    @cached_property
    def placement(self) -> Optional[GpuPlacement]:
        """The compute GPU and its node; None when the host has no GPU."""
        gpu, reason = choose_compute_gpu(self.gpus, self.gpu_choice)
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
    def engine_pid(self) -> Optional[int]:
        """The engine's PID: its unit's MainPID, else (no loaded unit: started by hand or
        from a desktop session) a process whose command line names the engine."""
        if self.unit.main_pid or self.unit.loaded:
            return self.unit.main_pid
        return find_engine_pid(self.root, self.processes, self.config.unit)

    @cached_property
    def engine_process(self) -> Optional[EngineProcess]:
        """The running engine, when its PID is known and still exists."""
        pid = self.engine_pid
        return read_process(self.root, pid) if pid else None

    @cached_property
    def processes(self) -> Tuple[ProcessInfo, ...]:
        """Every process under /proc."""
        return read_processes(self.root)

    @cached_property
    def target_node(self) -> Optional[int]:
        """The node the engine should be bound to: ``numa: N`` or the GPU's node."""
        if self.config.numa == "off":
            return None
        if self.config.numa.isdigit():
            return int(self.config.numa)
        return self.placement.node if self.placement else None

    # -- memory traps (hugepages, THP, systemd-oomd): doctor/memory.py, doctor/oomd.py --
    @cached_property
    def hugepages(self) -> HugepageFacts:
        """Hugepage pools, their holders and hugetlbfs files, and their configuration."""
        return read_hugepages(self.root, self.processes)

    @cached_property
    def thp(self) -> ThpFacts:
        """Transparent hugepage settings."""
        return read_thp(self.root)

    @cached_property
    def oomd(self) -> OomdFacts:
        """systemd-oomd and the engine's cgroup under it."""
        pid = self.engine_pid if self.engine_process else None
        return read_oomd(self.root, self.unit, pid, self.processes, detect_container(self.root))


class GpuChoiceError(Exception):
    """``--gpu`` names no display-class function on this host."""


def choose_compute_gpu(
    gpus: Tuple[Gpu, ...], wanted: Optional[str]
) -> Tuple[Optional[Gpu], str]:
    """Pick the GPU the engine computes on, with the reason."""
    if wanted:
        address = normalize_address(wanted)
        for gpu in gpus:
            if gpu.address == address:
                return gpu, f"chosen with --gpu/config ({address})"
        known = ", ".join(g.address for g in gpus) or "none"
        raise GpuChoiceError(
            f"--gpu {wanted}: no display-class PCI function at {address} (found: {known})"
        )
    if not gpus:
        return None, "no display-class PCI function found"
    if len(gpus) == 1:
        return gpus[0], "the only GPU"
    headless = [g for g in gpus if not g.boot_vga]
    if len(headless) == 1:
        display = next(g.address for g in gpus if g.boot_vga)
        return headless[0], f"the GPU that is not the boot display ({display} drives the console)"
    pool = headless or list(gpus)
    best = max(pool, key=lambda g: (g.largest_bar, g.vendor == 0x10DE, [-ord(c) for c in g.address]))
    return best, f"the largest memory BAR ({best.largest_bar // 2**20} MiB) among {len(pool)} GPUs"


def place_gpu(gpu: Gpu, numa: NumaFacts) -> Tuple[Optional[int], str, Optional[str]]:
    """The GPU's node: ``numa_node`` when >= 0, else the node matching ``local_cpulist``."""
    by_cpus = numa.node_of_cpus(gpu.local_cpus)
    raw = gpu.numa_node_raw
    if raw is not None and raw >= 0 and numa.node(raw) is not None:
        contradiction = _contradiction(gpu, raw, numa)
        return raw, "numa_node", contradiction
    if by_cpus is not None:
        return by_cpus, "local_cpulist", None
    if len(numa.nodes) == 1:
        return numa.nodes[0].id, "single-node", None
    return None, "none", None


def _contradiction(gpu: Gpu, node_id: int, numa: NumaFacts) -> Optional[str]:
    node = numa.node(node_id)
    if node is None or not gpu.local_cpus or not node.all_cpus:
        return None
    if gpu.local_cpus <= node.all_cpus:
        return None
    other = numa.node_of_cpus(gpu.local_cpus)
    where = f" (those are node {other}'s CPUs)" if other is not None else ""
    return (
        f"numa_node says {node_id} but local_cpulist is {format_cpulist(gpu.local_cpus)}{where}"
    )


def cpus_of(numa: NumaFacts, nodes: FrozenSet[int]) -> FrozenSet[int]:
    """Online CPUs of the given nodes."""
    return frozenset().union(*(n.cpus for n in numa.nodes if n.id in nodes))
