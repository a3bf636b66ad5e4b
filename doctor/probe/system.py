"""The kernel and the C library as the probe uses them, through ctypes only.

:class:`System` is small on purpose: the probe asks it for the topology, for memory
(``mmap``), for placement (``mbind`` with ``MPOL_BIND``, checked with ``move_pages``),
to pin the calling thread, and for the C routines that do the reading (``memchr``,
``memset``, ``tfind``). Tests replace it with a fake that keeps the C routines (they only
touch the process's own buffers) and fakes the NUMA calls, so that placement, refusals
and output are tested without touching the host.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import time
from array import array
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

NODE_DIR = "/sys/devices/system/node"
CACHE_DIR = "/sys/devices/system/cpu/cpu{}/cache"

MPOL_DEFAULT = 0
MPOL_BIND = 2
MADV_HUGEPAGE = 14
PROT_READ, PROT_WRITE = 1, 2
MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE = 0x02, 0x20, 0x4000
MASK_WORDS = 16  # 1024 nodes, the largest MAX_NUMNODES of common kernels

# Syscall numbers: glibc wraps none of these three (libnuma does, and is not required).
SYSCALLS: Dict[str, Tuple[int, int, int]] = {  # mbind, set_mempolicy, move_pages
    "x86_64": (237, 238, 279),
    "aarch64": (235, 237, 239),
    "ppc64le": (259, 261, 301),
}


class Unsupported(Exception):
    """The probe cannot run here (architecture, C library); the message says why."""


class NodeInfo(NamedTuple):
    """One NUMA node as the probe needs it."""

    id: int
    """The node id."""
    cpus: Tuple[int, ...]
    """Its online CPUs that this process may run on."""
    mem_total: int
    """MemTotal of the node's meminfo, bytes (0: no memory)."""
    mem_free: int
    """MemFree of the node's meminfo, bytes."""


class System:
    """The live host: sysfs for the topology, libc and raw syscalls for the rest."""

    page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def __init__(self) -> None:
        numbers = SYSCALLS.get(platform.machine())
        if numbers is None:
            raise Unsupported(f"no NUMA syscall numbers known for {platform.machine()}")
        self._mbind, self._set_mempolicy, self._move_pages = numbers
        name = ctypes.util.find_library("c") or "libc.so.6"
        self.libc = libc = ctypes.CDLL(name, use_errno=True)
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        libc.mmap.restype = vp
        libc.mmap.argtypes = [vp, sz, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [vp, sz]
        libc.madvise.argtypes = [vp, sz, ctypes.c_int]
        libc.memchr.restype = vp
        libc.memchr.argtypes = [vp, ctypes.c_int, sz]
        libc.memset.restype = vp
        libc.memset.argtypes = [vp, ctypes.c_int, sz]
        libc.tfind.restype = vp
        libc.tfind.argtypes = [vp, vp, vp]
        libc.syscall.restype = ctypes.c_long
        self._strcmp = ctypes.cast(libc.strcmp, vp).value

    # -- topology ------------------------------------------------------------
    def nodes(self) -> List[NodeInfo]:
        """Every node, with its usable CPUs and its memory."""
        allowed = os.sched_getaffinity(0)
        out = []
        for name in sorted(os.listdir(NODE_DIR)):
            if not name.startswith("node") or not name[4:].isdigit():
                continue
            base = f"{NODE_DIR}/{name}"
            cpus = tuple(c for c in _cpulist(_read(f"{base}/cpulist")) if c in allowed)
            meminfo = _node_meminfo(_read(f"{base}/meminfo"))
            out.append(NodeInfo(int(name[4:]), cpus, meminfo.get("MemTotal", 0),
                                meminfo.get("MemFree", 0)))
        return sorted(out)

    def llc_bytes(self) -> Optional[int]:
        """The largest cache of the first usable CPU, from sysfs; None when unknown."""
        cpu = min(os.sched_getaffinity(0))
        best = None
        directory = CACHE_DIR.format(cpu)
        try:
            entries = os.listdir(directory)
        except OSError:
            return None
        for entry in entries:
            if entry.startswith("index"):
                size = _size(_read(f"{directory}/{entry}/size"))
                if size and (best is None or size > best):
                    best = size
        return best

    def cpu_model(self) -> str:
        """``model name`` (x86) or the closest line of /proc/cpuinfo."""
        for line in _read("/proc/cpuinfo").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu") and value.strip():
                return value.strip()
        return platform.processor() or platform.machine()

    def kernel(self) -> str:
        """The running kernel's release."""
        return os.uname().release

    # -- memory --------------------------------------------------------------
    def map(self, size: int) -> int:
        """An anonymous private mapping of ``size`` bytes, not yet touched."""
        addr = self.libc.mmap(None, size, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise _oserror("mmap")
        self.libc.madvise(addr, size, MADV_HUGEPAGE)  # fewer faults and TLB misses; may fail
        return int(addr)

    def unmap(self, addr: int, size: int) -> None:
        """Give a mapping back."""
        if self.libc.munmap(addr, size) != 0:
            raise _oserror("munmap")

    def bind(self, addr: int, size: int, node: int) -> None:
        """``mbind(MPOL_BIND)``: the range's pages may come from ``node`` only."""
        mask = _nodemask(node)
        rc = self.libc.syscall(ctypes.c_long(self._mbind), ctypes.c_void_p(addr),
                               ctypes.c_ulong(size), ctypes.c_long(MPOL_BIND), mask,
                               ctypes.c_ulong(MASK_WORDS * 64 + 1), ctypes.c_ulong(0))
        if rc != 0:
            raise _oserror(f"mbind to node {node}")

    def bind_thread(self, node: Optional[int]) -> None:
        """``set_mempolicy``: this thread's new pages from ``node`` only (None: the default)."""
        if node is None:
            rc = self.libc.syscall(ctypes.c_long(self._set_mempolicy), ctypes.c_long(MPOL_DEFAULT),
                                   None, ctypes.c_ulong(0))
        else:
            rc = self.libc.syscall(ctypes.c_long(self._set_mempolicy), ctypes.c_long(MPOL_BIND),
                                   _nodemask(node), ctypes.c_ulong(MASK_WORDS * 64 + 1))
        if rc != 0:
            raise _oserror("set_mempolicy")

    def page_nodes(self, addr: int, size: int) -> array:  # type: ignore[type-arg]
        """Each page's node as ``move_pages(nodes=NULL)`` reports it (negative: an errno)."""
        pages = array("Q", range(addr, addr + size, self.page_size))
        status = array("i", bytes(4 * len(pages)))
        page_ptr, _ = pages.buffer_info()
        status_ptr, _ = status.buffer_info()
        rc = self.libc.syscall(ctypes.c_long(self._move_pages), ctypes.c_long(0),
                               ctypes.c_ulong(len(pages)), ctypes.c_void_p(page_ptr), None,
                               ctypes.c_void_p(status_ptr), ctypes.c_long(0))
        if rc < 0:
            raise _oserror("move_pages")
        return status

    def pin(self, cpus: Iterable[int]) -> None:
        """Run the calling thread on these CPUs only."""
        os.sched_setaffinity(0, set(cpus))

    # -- the reading routines (they release the GIL) -------------------------
    def memset(self, addr: int, byte: int, size: int) -> None:
        """Write ``size`` bytes: the first touch of fresh pages."""
        self.libc.memset(addr, byte, size)

    def memchr(self, addr: int, byte: int, size: int) -> Optional[int]:
        """Read ``size`` bytes looking for ``byte``: the bandwidth loop."""
        found = self.libc.memchr(addr, byte, size)
        return None if found is None else int(found)

    def tfind(self, key: int, rootp: int) -> Optional[int]:
        """``tfind(key, rootp, strcmp)``: follow the chain that starts at ``*rootp``."""
        found = self.libc.tfind(key, rootp, self._strcmp)
        return None if found is None else int(found)

    def clock(self) -> float:
        """Seconds on a monotonic clock."""
        return time.perf_counter()


def _nodemask(node: int) -> ctypes.Array[ctypes.c_ulong]:
    mask = (ctypes.c_ulong * MASK_WORDS)()
    mask[node // 64] = 1 << (node % 64)
    return mask


def _oserror(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _cpulist(text: str) -> List[int]:
    out: List[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _node_meminfo(text: str) -> Dict[str, int]:
    out = {}
    for line in text.splitlines():
        words = line.split()  # Node 0 MemFree:  3204444 kB
        if len(words) >= 4 and words[3].isdigit():
            out[words[2].rstrip(":")] = int(words[3]) * (1024 if words[-1] == "kB" else 1)
    return out


def _size(text: str) -> Optional[int]:
    text = text.strip()
    units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    if text[-1:] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]]
    return int(text) if text.isdigit() else None


__all__ = ["NodeInfo", "System", "Unsupported"]
