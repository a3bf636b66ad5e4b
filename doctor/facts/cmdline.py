"""Hugepage and THP settings on the kernel command line: the running kernel's
(``/proc/cmdline``) and the next boot's, as GRUB (``/etc/default/grub``) or systemd-boot
and UKIs (``/etc/kernel/cmdline``) configure it, so that a fix written but not yet booted
can be told apart from no fix at all.

Parsers are pure functions on strings; :func:`read_configured_cmdline` takes a
:class:`~strata_doctor.root.Root`.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import is_uint, parse_kernel_size
from strata_doctor.root import Root

CMDLINE_FILES = ("/etc/default/grub", "/etc/kernel/cmdline")
"""Where the next boot's kernel command line is configured (GRUB, systemd-boot/UKI)."""


_HUGEPAGE_WORDS = ("default_hugepagesz", "hugepagesz", "hugepages")


class CmdlineHugepages(NamedTuple):
    """Hugepage settings on a kernel command line (``default_hugepagesz=``, ``hugepagesz=``,
    ``hugepages=``, ``transparent_hugepage=``)."""

    default_size: Optional[int] = None
    """``default_hugepagesz=`` in bytes."""
    pools: Tuple[Tuple[Optional[int], Optional[int], int], ...] = ()
    """(page size or None for the default, node or None for all nodes, count) per
    ``hugepages=`` value; ``hugepages=1:512,0:0`` gives one entry per node."""
    thp: Optional[str] = None
    """``transparent_hugepage=`` (always, madvise, never)."""
    words: Tuple[str, ...] = ()
    """The hugepage words as written (``hugepagesz=2M hugepages=0:24000``), for messages."""

    def count_for(self, size: int, default_size: int) -> Optional[int]:
        """Total pages of ``size`` the command line asks for; None when it names none."""
        counts = [c for s, _, c in self.pools if (s or self.default_size or default_size) == size]
        return sum(counts) if counts else None

    def node_counts(self, size: int, default_size: int) -> Dict[int, int]:
        """Per-node counts of ``size`` (``hugepages=<node>:<count>``)."""
        return {n: c for s, n, c in self.pools
                if n is not None and (s or self.default_size or default_size) == size}


def parse_hugepage_cmdline(text: str) -> CmdlineHugepages:
    """Hugepage settings of a kernel command line, in the order the kernel applies them:
    each ``hugepages=`` counts pages of the ``hugepagesz=`` before it."""
    default_size: Optional[int] = None
    size: Optional[int] = None
    pools: List[Tuple[Optional[int], Optional[int], int]] = []
    thp: Optional[str] = None
    words: List[str] = []
    for word in text.replace("\0", " ").replace('"', " ").split():
        key, _, value = word.partition("=")
        if key in _HUGEPAGE_WORDS:
            words.append(word)
        if key == "default_hugepagesz":
            default_size = parse_kernel_size(value)
        elif key == "hugepagesz":
            size = parse_kernel_size(value)
        elif key == "hugepages":
            pools.extend(_pool_counts(value, size))
        elif key == "transparent_hugepage":
            thp = value or None
    return CmdlineHugepages(default_size, tuple(pools), thp, tuple(words))


def _pool_counts(value: str, size: Optional[int]) -> List[Tuple[Optional[int], Optional[int], int]]:
    """(size, node, count) of one ``hugepages=`` value: ``24000`` for every node, or
    ``0:512,1:0`` per node; parts that are not counts are skipped, as the kernel does."""
    pools: List[Tuple[Optional[int], Optional[int], int]] = []
    for part in value.split(","):
        node_text, sep, count_text = part.partition(":")
        if sep and is_uint(node_text) and is_uint(count_text):
            pools.append((size, int(node_text), int(count_text)))
        elif not sep and is_uint(part):
            pools.append((size, None, int(part)))
    return pools


def parse_grub_cmdline(text: str) -> str:
    """The kernel arguments configured in ``/etc/default/grub`` (``GRUB_CMDLINE_LINUX*``)."""
    parts = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("GRUB_CMDLINE_LINUX=", "GRUB_CMDLINE_LINUX_DEFAULT=")):
            parts.append(line.partition("=")[2].strip().strip("'\""))
    return " ".join(parts)


def read_configured_cmdline(root: Root) -> Tuple[Tuple[str, CmdlineHugepages], ...]:
    """(file, its settings) for each of :data:`CMDLINE_FILES` there is: the next boot's
    kernel command line."""
    configured = []
    for path in CMDLINE_FILES:
        text = root.read(path)
        if text is not None:
            line = parse_grub_cmdline(text) if path.endswith("grub") else text
            configured.append((path, parse_hugepage_cmdline(line)))
    return tuple(configured)
