"""The hugepage pools: one per page size under ``/sys/kernel/mm/hugepages/``, each node's
share under ``/sys/devices/system/node/nodeN/hugepages/``, and the default pool from
``/proc/meminfo`` and ``/proc/sys/vm`` where sysfs lacks it (older kernels, trimmed
captures).
"""

import re
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.numa import NODE_DIR
from strata_doctor.facts.parse import parse_int
from strata_doctor.root import Root

HUGEPAGES_DIR = "/sys/kernel/mm/hugepages"


NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


NR_OVERCOMMIT = "/proc/sys/vm/nr_overcommit_hugepages"


DEFAULT_PAGE = 2 * 1024**2
"""The default hugepage size when the kernel does not say (2 MiB, as on x86-64)."""


_POOL_FILES = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
               "nr_overcommit_hugepages")


def size_dir_name(size: int) -> str:
    """The sysfs directory of a page size: ``hugepages-2048kB``."""
    return f"hugepages-{size // 1024}kB"


def parse_size_dir(name: str) -> Optional[int]:
    """``hugepages-2048kB`` -> 2097152 bytes; None for anything else."""
    match = re.fullmatch(r"hugepages-(\d+)kB", name)
    return int(match.group(1)) * 1024 if match else None


class PagePool(NamedTuple):
    """One page size's pool, from ``/sys/kernel/mm/hugepages/hugepages-<N>kB/`` (or from
    ``/proc/meminfo`` and ``/proc/sys/vm`` for the default size when sysfs lacks it)."""

    size: int
    """Page size in bytes."""
    total: int
    """``nr_hugepages``: pages in the pool, used or free."""
    free: int
    """``free_hugepages``: pages not faulted in by anyone."""
    reserved: int = 0
    """``resv_hugepages``: free pages promised to a mapping that has not touched them yet."""
    surplus: int = 0
    """``surplus_hugepages``: pages above ``total``, allowed by overcommit."""
    overcommit: int = 0
    """``nr_overcommit_hugepages``: how many surplus pages may be made on demand."""
    source: str = ""
    """The directory or file these came from."""

    @property
    def used(self) -> int:
        """Pages someone has faulted in."""
        return max(0, self.total + self.surplus - self.free)

    @property
    def bytes(self) -> int:
        """Memory the pool takes out of ordinary use."""
        return (self.total + self.surplus) * self.size


class NodePool(NamedTuple):
    """One node's share of a pool, from ``/sys/devices/system/node/nodeN/hugepages/``."""

    node: int
    """NUMA node id."""
    size: int
    """Page size in bytes."""
    total: int
    """``nr_hugepages`` on this node."""
    free: int
    """``free_hugepages`` on this node."""
    surplus: int = 0
    """``surplus_hugepages`` on this node."""


def read_pools(
    root: Root, meminfo: Mapping[str, int], default_size: Optional[int], nr: Optional[int],
    overcommit: Optional[int], node_pools: Sequence[NodePool] = (),
) -> Tuple[PagePool, ...]:
    """Every page size's pool, smallest first: sysfs's, the default pool from ``meminfo``
    (``/proc/meminfo``), ``nr`` and ``overcommit`` (``/proc/sys/vm``) when sysfs has no
    directory for it, and any other size the nodes' pools (``node_pools``) hold pages of
    when the global directory is missing (a trimmed capture keeps the nodes' folders)."""
    pools: Dict[int, PagePool] = {}
    for name in root.listdir(HUGEPAGES_DIR):
        pool = _sysfs_pool(root, name)
        if pool is not None:
            pools[pool.size] = pool
    size = default_size or DEFAULT_PAGE
    if size not in pools and ("HugePages_Total" in meminfo or nr is not None):
        pools[size] = _meminfo_pool(meminfo, size, nr, overcommit)
    for pool in nodes_pools(node_pools):
        pools.setdefault(pool.size, pool)
    return tuple(pools[s] for s in sorted(pools))


def nodes_pools(node_pools: Sequence[NodePool]) -> Tuple[PagePool, ...]:
    """The pool of each size that the nodes hold pages of, summed over the nodes (the
    kernel's global pool is that sum), smallest size first."""
    sums: Dict[int, Tuple[int, int, int]] = {}
    for n in node_pools:
        total, free, surplus = sums.get(n.size, (0, 0, 0))
        sums[n.size] = (total + n.total, free + n.free, surplus + n.surplus)
    return tuple(
        PagePool(size, total, free, surplus=surplus,
                 source=f"{NODE_DIR}/node*/hugepages/{size_dir_name(size)}")
        for size, (total, free, surplus) in sorted(sums.items()) if total or surplus
    )


def _sysfs_pool(root: Root, name: str) -> Optional[PagePool]:
    """The pool of one ``hugepages-<N>kB`` directory; None for another name."""
    size = parse_size_dir(name)
    if size is None:
        return None
    base = f"{HUGEPAGES_DIR}/{name}"
    total, free, reserved, surplus, overcommit = (
        parse_int(root.read(f"{base}/{attr}")) or 0 for attr in _POOL_FILES)
    return PagePool(size, total, free, reserved, surplus, overcommit, base)


def _meminfo_pool(meminfo: Mapping[str, int], size: int, nr: Optional[int],
                  overcommit: Optional[int]) -> PagePool:
    """The default pool as ``/proc/meminfo`` and ``/proc/sys/vm`` tell it."""
    total = meminfo.get("HugePages_Total", nr if nr is not None else 0)
    return PagePool(
        size=size,
        total=total,
        free=meminfo.get("HugePages_Free", total),
        reserved=meminfo.get("HugePages_Rsvd", 0),
        surplus=meminfo.get("HugePages_Surp", 0),
        overcommit=overcommit or 0,
        source="/proc/meminfo",
    )


def read_node_pools(root: Root) -> Tuple[NodePool, ...]:
    """Every node's pool of every page size, from ``nodeN/hugepages/hugepages-<N>kB/``."""
    result: List[NodePool] = []
    nodes = sorted(int(n[4:]) for n in root.listdir(NODE_DIR) if n.startswith("node") and n[4:].isdigit())
    for node in nodes:
        base = f"{NODE_DIR}/node{node}/hugepages"
        for name in root.listdir(base):
            size = parse_size_dir(name)
            if size is None:
                continue
            total = parse_int(root.read(f"{base}/{name}/nr_hugepages"))
            if total is None:
                continue
            result.append(NodePool(
                node=node, size=size, total=total,
                free=parse_int(root.read(f"{base}/{name}/free_hugepages")) or 0,
                surplus=parse_int(root.read(f"{base}/{name}/surplus_hugepages")) or 0,
            ))
    return tuple(sorted(result, key=lambda p: (p.node, p.size)))
