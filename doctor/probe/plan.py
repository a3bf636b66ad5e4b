"""What a probe run will measure, decided before any memory is taken.

The options are checked, the cells (every CPU node against every memory node) and the
buffers chosen, and a node without room for them refused, all from the topology alone:
a refusal leaves the host as it was.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.parse import format_bytes
from strata_doctor.probe.system import NODE_DIR, NodeInfo, System

MiB = 1 << 20
DEFAULT_SIZE = 1 << 30
DEFAULT_SECONDS = 10.0
MIN_SIZE = 4 * MiB
MAX_SECONDS = 3600.0
MAX_THREADS = 4096
BLOCK = 64 * 1024
"""The chain visits one line per 64 KiB block per round (see ``measure.build_chain``)."""
LATENCY_FALLBACK = 256 * MiB
"""The chase buffer when the kernel does not say how large the caches are."""
HEADROOM = 64 * MiB
"""Free memory a node keeps beyond the probe's buffer."""


class ProbeRefused(Exception):
    """The probe will not run as asked; the message is one line for the user."""


class Plan(NamedTuple):
    """What a run will measure, decided before any memory is taken."""

    cpu_nodes: Tuple[NodeInfo, ...]
    """The rows."""
    mem_nodes: Tuple[NodeInfo, ...]
    """The columns."""
    size_bytes: int
    """The bandwidth buffer of a cell."""
    latency_bytes: int
    """The chase buffer of a cell."""
    llc_bytes: Optional[int]
    """The largest cache, when known."""
    seconds: float
    """Measuring time of the whole run."""
    threads: Optional[int]
    """``--threads``; None: every CPU of the CPU node."""
    notes: Tuple[str, ...]
    """Conditions the result must carry."""

    @property
    def cells(self) -> int:
        """How many pairs are measured."""
        return len(self.cpu_nodes) * len(self.mem_nodes)


def make_plan(system: System, size: int = DEFAULT_SIZE, seconds: float = DEFAULT_SECONDS,
              threads: Optional[int] = None) -> Plan:
    """Decide the buffers and the time per cell; refuse what cannot run safely."""
    refusal = options_refusal(size, seconds, threads)
    if refusal:
        raise ProbeRefused(refusal)
    nodes = system.nodes()
    cpu_nodes = tuple(n for n in nodes if n.cpus)
    mem_nodes = tuple(n for n in nodes if n.mem_total > 0)
    if not cpu_nodes or not mem_nodes:
        raise ProbeRefused(f"no NUMA node with CPUs this process may use, or none with memory "
                           f"(read from {NODE_DIR})")
    llc = system.llc_bytes()
    latency = chase_bytes(size, llc)
    bandwidth = size // system.page_size * system.page_size
    short = short_node(mem_nodes, max(bandwidth, latency + BLOCK))
    if short:
        raise ProbeRefused(short)
    return Plan(cpu_nodes, mem_nodes, bandwidth, latency, llc, seconds, threads,
                chase_notes(latency, llc) + run_notes(seconds))


def options_refusal(size: int, seconds: float, threads: Optional[int]) -> Optional[str]:
    """Why ``--size``, ``--seconds`` or ``--threads`` cannot be used; None when they can."""
    if size < MIN_SIZE:
        return f"--size {format_bytes(size)} is too small (at least {format_bytes(MIN_SIZE)})"
    if not 0 < seconds <= MAX_SECONDS:
        return f"--seconds {seconds} must be above 0 and at most {MAX_SECONDS:.0f}"
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        return f"--threads {threads} must be between 1 and {MAX_THREADS}"
    return None


def run_notes(seconds: float) -> Tuple[str, ...]:
    """What the result must say about a run shorter than the default: each cell's share of
    the time is then short, and its figures read low (a 1 s run gave a sixth of the 10 s
    figure on one host), so they are not to be trusted."""
    if seconds >= DEFAULT_SECONDS:
        return ()
    return (f"--seconds {seconds:g} is shorter than the default {DEFAULT_SECONDS:g}: each cell "
            "measured only briefly, so its figures may read low; run with the default for "
            "figures to trust",)


def chase_bytes(size: int, llc: Optional[int]) -> int:
    """The chase buffer: 4x the last-level cache in whole blocks, within ``--size``,
    and never under 16 blocks."""
    want = 4 * llc if llc else LATENCY_FALLBACK
    return max(BLOCK * 16, min(round_up(want, BLOCK), size // BLOCK * BLOCK))


def chase_notes(latency: int, llc: Optional[int]) -> Tuple[str, ...]:
    """What the result must say about a chase buffer that may not defeat the caches."""
    notes: List[str] = []
    if llc and latency < 4 * llc:
        notes.append(
            f"the chase buffer ({format_bytes(latency)}) is smaller than 4x the last-level cache "
            f"({format_bytes(llc)}), so some loads may hit the cache and latencies read low; "
            "raise --size for a true idle latency")
    elif not llc:
        notes.append(f"the cache sizes are unknown; the chase buffer is {format_bytes(latency)}")
    return tuple(notes)


def short_node(mem_nodes: Sequence[NodeInfo], need: int) -> Optional[str]:
    """The refusal for the first memory node without ``need`` bytes free and the headroom;
    None when every node has them."""
    for node in mem_nodes:
        if node.mem_free < need + HEADROOM:
            return (f"node {node.id} has {format_bytes(node.mem_free)} free; the probe needs "
                    f"{format_bytes(need)} there plus {format_bytes(HEADROOM)} to spare "
                    "(lower --size, or free memory on that node)")
    return None


def round_up(value: int, unit: int) -> int:
    """``value`` rounded up to a whole number of ``unit``."""
    return -(-value // unit) * unit
