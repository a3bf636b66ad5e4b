"""Fix builders: turn a check's decision into :class:`~strata_doctor.model.Fix` data.

Checks call these; only the applier writes anything.
"""

from __future__ import annotations

from typing import FrozenSet

from strata_doctor.model import FileChange, Fix, ManualStep, RuntimeAction, context_pairs
from strata_doctor.parse import format_cpulist

NUMA_DROPIN = "60-strata-doctor-numa.conf"
WRAPPER = "/usr/local/bin/strata-numa"


def numactl_line(mem_nodes: FrozenSet[int], cpu_nodes: FrozenSet[int], policy: str) -> str:
    """The numactl prefix for a binding, e.g. ``numactl --preferred=1 --cpunodebind=1``."""
    mems = ",".join(str(n) for n in sorted(mem_nodes))
    cpus = ",".join(str(n) for n in sorted(cpu_nodes))
    return f"numactl --{policy}={mems} --cpunodebind={cpus}"


def binding_fix(
    unit: str, mem_nodes: FrozenSet[int], cpu_nodes: FrozenSet[int], cpus: FrozenSet[int],
    policy: str,
) -> Fix:
    """Bind the engine unit's memory and CPUs to the given nodes with a drop-in."""
    nodes = ",".join(str(n) for n in sorted(mem_nodes))
    systemd_policy = {"preferred": "preferred", "preferred-many": "preferred",
                      "interleave": "interleave"}[policy]
    dropin = FileChange(
        path=f"/etc/systemd/system/{unit}.d/{NUMA_DROPIN}",
        template="numa-dropin.conf.j2",
        context=context_pairs(
            unit=unit, numa_policy=systemd_policy, numa_mask=nodes, cpus=format_cpulist(cpus),
        ),
    )
    return Fix(
        summary=f"bind {unit} to node(s) {nodes}: NUMAPolicy={systemd_policy} NUMAMask={nodes}, "
        f"CPUAffinity={format_cpulist(cpus)}",
        files=(dropin,),
        actions=(RuntimeAction("daemon-reload", "systemd"),),
        manual=(ManualStep(f"Restart {unit} when convenient: the binding applies at its next start."),),
        takes_effect="restart",
    )
