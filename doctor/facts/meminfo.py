"""``/proc/meminfo``: read once per host, by :func:`read_meminfo`, and its parser.

``HostContext.meminfo`` is the one caller of the reader; every fact that needs a meminfo
value (the hugepage pools, THP, swap) takes the parsed values as an argument. A node's
``/sys/devices/system/node/nodeN/meminfo`` has the same layout, so the node facts share
:func:`parse_meminfo`, but it is another file and read by their own readers.
"""

from __future__ import annotations

from typing import Dict, Optional

from strata_doctor.facts.parse import is_uint
from strata_doctor.root import Root

MEMINFO = "/proc/meminfo"


def parse_meminfo(text: str) -> Dict[str, int]:
    """Parse ``/proc/meminfo`` or a node's ``meminfo``; values with ``kB`` become bytes.

    Node files prefix each line with ``Node 0``; that prefix is dropped. Counts without a
    unit (HugePages_Total) stay counts.
    """
    result: Dict[str, int] = {}
    for line in text.replace("\0", "").splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key.startswith("Node "):
            key = key.split(None, 2)[-1] if len(key.split(None, 2)) == 3 else key
        words = rest.split()
        if not words or not is_uint(words[0]):
            continue
        value = int(words[0])
        if len(words) > 1 and words[1].lower() == "kb":
            value *= 1024
        result[key] = value
    return result


def read_meminfo(root: Root) -> Dict[str, int]:
    """``/proc/meminfo`` in bytes (page counts as they are); empty when it cannot be read
    (:func:`meminfo_unread` says why)."""
    return parse_meminfo(root.read(MEMINFO) or "")


def meminfo_unread(root: Root) -> Optional[str]:
    """Why :func:`read_meminfo` found no ``/proc/meminfo`` (``missing``, an error); None
    when it was read. Asks the root's record of reads, never the host again."""
    return root.reads.get(MEMINFO)
