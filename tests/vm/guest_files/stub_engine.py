#!/usr/bin/python3
"""A stand-in for the Strata engine, run inside the test guest as strata.service.

It touches a buffer of a few hundred MiB (as the engine's arena would be touched),
then prints, as JSON, what the kernel says about this very process: the CPUs and
memory nodes it may use (``/proc/self/status``), the policy and per-node pages of
the buffer and of all its mappings (``/proc/self/numa_maps``) and its cgroup.
Usage: stub_engine.py [MiB] (default 256).
"""

import ctypes
import json
import mmap
import os
import re
import sys
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
    for off in range(0, size, mmap.PAGESIZE):
        buf[off] = 1
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
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
        if addr == start:
            per_node_buf = pages
            policy = fields[1]
    st = status()
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        cgroup = f.read().strip()
    print(json.dumps({
        "pid": os.getpid(),
        "cpus_allowed_list": st.get("Cpus_allowed_list"),
        "mems_allowed_list": st.get("Mems_allowed_list"),
        "sched_getaffinity": sorted(os.sched_getaffinity(0)),
        "buffer_bytes": size,
        "buffer_policy": policy,
        "buffer_pages_per_node": per_node_buf,
        "all_pages_per_node": per_node_all,
        "cgroup": cgroup,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
