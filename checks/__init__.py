"""Built-in checks, in the order they are shown."""

from __future__ import annotations

from typing import Tuple, Type

from strata_doctor.check import Check
from strata_doctor.checks.arena_fit import ArenaFit
from strata_doctor.checks.cgroup_limits import CgroupLimits
from strata_doctor.checks.cpu_contention import CpuContention
from strata_doctor.checks.cpu_frequency import CpuFrequencyCheck
from strata_doctor.checks.cpu_isa import CpuIsa
from strata_doctor.checks.cpu_isolation import CpuIsolation
from strata_doctor.checks.expert_workers import ExpertWorkers
from strata_doctor.checks.gpu_placement import GpuPlacementCheck
from strata_doctor.checks.hugepages import Hugepages
from strata_doctor.checks.memlock import Memlock
from strata_doctor.checks.numa_balancing import NumaBalancing
from strata_doctor.checks.numa_binding import NumaBinding
from strata_doctor.checks.numa_topology import NumaTopology
from strata_doctor.checks.oomd import Oomd
from strata_doctor.checks.page_cache import PageCache
from strata_doctor.checks.pcie_link import PcieLinkCheck
from strata_doctor.checks.sub_numa_clustering import SubNumaClustering
from strata_doctor.checks.swap import Swap
from strata_doctor.checks.transparent_hugepages import TransparentHugepages
from strata_doctor.checks.virtual_numa import VirtualNuma

BUILTIN: Tuple[Type[Check], ...] = (
    NumaTopology,
    SubNumaClustering,
    VirtualNuma,
    GpuPlacementCheck,
    NumaBinding,
    NumaBalancing,
    ArenaFit,
    PageCache,
    CgroupLimits,
    Hugepages,
    TransparentHugepages,
    Oomd,
    Swap,
    Memlock,
    CpuContention,
    CpuIsolation,
    ExpertWorkers,
    CpuFrequencyCheck,
    PcieLinkCheck,
    CpuIsa,
)
