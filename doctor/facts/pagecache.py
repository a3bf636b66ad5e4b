"""Page cache on one NUMA node, and whether the kernel reclaims it before going remote.

Read through the root: ``FilePages``, ``Inactive(file)``, ``Active(file)``, ``Shmem``,
``MemFree`` and ``MemTotal`` of ``/sys/devices/system/node/nodeN/meminfo``, and
``/proc/sys/vm/zone_reclaim_mode``. Which files fill the cache is not read: the amounts
are what decide whether the arena fits the node.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from strata_doctor.facts.meminfo import parse_meminfo
from strata_doctor.facts.parse import parse_int
from strata_doctor.root import Root

NODE_MEMINFO = "/sys/devices/system/node/node{}/meminfo"
ZONE_RECLAIM = "/proc/sys/vm/zone_reclaim_mode"


class NodeCache(NamedTuple):
    """One node's free memory and page cache, in bytes."""

    node: int
    source: str
    """The node's ``meminfo``."""
    mem_total: int
    mem_free: int
    file_pages: int
    """``FilePages``: page cache, shmem and buffers."""
    inactive_file: int
    """``Inactive(file)``: the cache the kernel reclaims first."""
    active_file: int
    """``Active(file)``."""
    shmem: int
    """``Shmem``: counted in FilePages but not dropped with the cache (tmpfs, shared memory)."""
    zone_reclaim_mode: Optional[int]
    """``vm.zone_reclaim_mode``: 0 lets an allocation go to the far node before reclaiming
    the near node's cache; None when unreadable."""

    @property
    def droppable(self) -> int:
        """Clean cache ``drop_caches`` can free: FilePages less Shmem."""
        return max(self.file_pages - self.shmem, 0)


def read_node_cache(root: Root, node: int) -> Optional[NodeCache]:
    """The node's page cache; None when its meminfo is missing or lacks the counters."""
    source = NODE_MEMINFO.format(node)
    info = parse_meminfo(root.read(source) or "")
    if "FilePages" not in info or "MemFree" not in info or "MemTotal" not in info:
        return None
    return NodeCache(
        node=node, source=source, mem_total=info["MemTotal"], mem_free=info["MemFree"],
        file_pages=info["FilePages"], inactive_file=info.get("Inactive(file)", 0),
        active_file=info.get("Active(file)", 0), shmem=info.get("Shmem", 0),
        zone_reclaim_mode=parse_int(root.read_value(ZONE_RECLAIM)),
    )
