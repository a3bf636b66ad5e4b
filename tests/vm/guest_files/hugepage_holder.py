#!/usr/bin/python3
"""Takes hugetlb pages inside the test guest, as the seed's stale reservation did.

``hugepage_holder.py anon N READY``: map N default-size huge pages with MAP_HUGETLB,
touch them, write READY and hold them until killed (the process that keeps 8,221
pages of the seed's pool).
``hugepage_holder.py file PATH N``: create PATH in a hugetlbfs mount, fault in N
pages and exit; the file keeps its pages with no process mapping it (an orphan).
"""

import mmap
import os
import signal
import sys
import time
from typing import List

MAP_HUGETLB = 0x40000


def page_size() -> int:
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("Hugepagesize:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no Hugepagesize in /proc/meminfo")


def touch(buf: mmap.mmap, size: int, step: int) -> None:
    for off in range(0, size, step):
        buf[off] = 1


def main(argv: List[str]) -> int:
    psize = page_size()
    if argv[1] == "anon":
        n, ready = int(argv[2]), argv[3]
        size = n * psize
        buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB)
        touch(buf, size, psize)
        with open(ready, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(3600)
    if argv[1] == "file":
        path, n = argv[2], int(argv[3])
        size = n * psize
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, size)
        buf = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        touch(buf, size, psize)
        buf.close()
        os.close(fd)
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
