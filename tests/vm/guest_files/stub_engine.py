#!/usr/bin/python3
"""A stand-in for the Strata engine, run inside the test guest as strata.service.

Like the engine's CPU expert pool, one worker per CPU it may run on touches its
share of a buffer of a few hundred MiB, so that first touch spreads the pages over
the nodes of those CPUs unless a memory policy says otherwise.  It then prints, as
JSON, what the kernel says about this very process: the CPUs and memory nodes it may
use (``/proc/self/status``), the policy and per-node pages of the buffer and of all
its mappings (``/proc/self/numa_maps``) and its cgroup.
Usage: stub_engine.py [MiB] (default 256).
"""

import ctypes
import json
import mmap
import os
import re
import sys
import threading
from typing import Dict


def status() -> Dict[str, str]:
    out = {}
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def main() -> int:
    size = int(sys.argv[1] if len(sys.argv) > 1 else 256) << 20
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    cpus = sorted(os.sched_getaffinity(0))
    share = size // len(cpus) // mmap.PAGESIZE * mmap.PAGESIZE
    touched: Dict[int, int] = {}

    def worker(index: int, cpu: int) -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only
        first = index * share
        last = size if index == len(cpus) - 1 else first + share
        for off in range(first, last, mmap.PAGESIZE):
            buf[off] = 1
        touched[cpu] = (last - first) // mmap.PAGESIZE

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(cpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    # The buffer's mapping may have merged with a neighbour (a thread stack): find
    # the mapping that contains it, then that mapping's line in numa_maps.
    vma_start = start
    with open("/proc/self/maps", encoding="utf-8") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= start < hi:
                vma_start = lo
                break
    per_node_all: Dict[str, int] = {}
    per_node_buf: Dict[str, int] = {}
    policy = ""
    with open("/proc/self/numa_maps", encoding="utf-8") as f:
        maps = f.read()
    for line in maps.splitlines():
        fields = line.split()
        addr = int(fields[0], 16)
        pages = {m.group(1): int(m.group(2)) for m in re.finditer(r"\bN(\d+)=(\d+)", line)}
        for node, n in pages.items():
            per_node_all[node] = per_node_all.get(node, 0) + n
        if addr == vma_start:
            per_node_buf = pages
            # The policy may hold a space ("prefer (many):0-1"); it ends where the
            # key=value fields begin.
            m = re.match(r"[0-9a-f]+ (.*?)(?= \w+=|$)", line)
            policy = m.group(1) if m else fields[1]
    st = status()
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        cgroup = f.read().strip()
    print(json.dumps({
        "pid": os.getpid(),
        "cpus_allowed_list": st.get("Cpus_allowed_list"),
        "mems_allowed_list": st.get("Mems_allowed_list"),
        "sched_getaffinity": sorted(os.sched_getaffinity(0)),
        "buffer_bytes": size,
        "pages_touched_per_cpu": {str(c): n for c, n in sorted(touched.items())},
        "buffer_policy": policy,
        "buffer_pages_per_node": per_node_buf,
        "all_pages_per_node": per_node_all,
        "cgroup": cgroup,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
