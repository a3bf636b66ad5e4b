"""The probe's read bandwidth: pinned threads calling ``memchr`` over their shares.

Each thread reads its own contiguous share of one buffer, :data:`PIECE` per call, for
a byte that is not there, until its time is up; ctypes releases the GIL around each
call, so the threads read at memory speed in parallel. The figure is bytes read by all
threads over the wall time from the first thread's start to the last one's end.

:func:`yardstick` holds the method against one thread's ``memchr`` over the same buffer
(docs/probe.md, ``benchmarks/run.py``).
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, List, NamedTuple, Sequence, Tuple

from strata_doctor.probe.buffers import Buffers
from strata_doctor.probe.plan import MiB, make_plan
from strata_doctor.probe.system import NodeInfo, System
from strata_doctor.probe.workers import run_threads

PIECE = 8 * MiB
"""One ``memchr`` call reads at most this much, so a stop is seen within milliseconds."""

Span = Tuple[float, float, int]
"""One thread's reading: its start, its end (monotonic seconds), and the bytes it read."""


def read_rate(system: System, stop: threading.Event, addr: int, chunk: int, count: int,
              cpu: NodeInfo, duration: Callable[[], float], touch: bool = False) -> float:
    """GB/s of ``count`` threads pinned to ``cpu``'s CPUs, each reading its ``chunk``
    for ``duration()`` seconds, asked once every thread is ready.

    With ``touch`` each thread first writes its chunk: the first touch of fresh pages
    happens on the CPU node.
    """
    share = [0.0]

    def start_timing() -> None:
        share[0] = duration()

    ready = threading.Barrier(count, action=start_timing)
    spans: List[Span] = []

    def reader(index: int) -> None:
        system.pin([cpu.cpus[index % len(cpu.cpus)]])
        start_addr = addr + index * chunk
        if touch:
            system.memset(start_addr, 0, chunk)  # first touch, from the CPU node
        system.memchr(start_addr, 1, chunk)  # one untimed pass
        ready.wait()
        start = system.clock()
        done = _read_until(system, stop, start_addr, chunk, start + share[0])
        spans.append((start, system.clock(), done))

    run_threads([functools.partial(reader, i) for i in range(count)], stop, ready)
    return _gbps(spans)


def _read_until(system: System, stop: threading.Event, addr: int, chunk: int,
                deadline: float) -> int:
    """Bytes read in passes over the chunk until the deadline or a stop."""
    done = 0
    while not stop.is_set():
        done += _one_pass(system, stop, addr, chunk, deadline)
        if system.clock() >= deadline:
            break
    return done


def _one_pass(system: System, stop: threading.Event, addr: int, chunk: int, deadline: float) -> int:
    """Bytes read in one pass over the chunk, cut short by the deadline or a stop."""
    offset = 0
    while offset < chunk and not stop.is_set():
        n = min(PIECE, chunk - offset)
        system.memchr(addr + offset, 1, n)
        offset += n
        if system.clock() >= deadline:
            break
    return offset


def _gbps(spans: Sequence[Span]) -> float:
    """All threads' bytes over the wall time they spanned, in GB/s."""
    elapsed = max(s[1] for s in spans) - min(s[0] for s in spans)
    total = sum(s[2] for s in spans)
    return total / elapsed / 1e9 if elapsed > 0 else 0.0


class Yardstick(NamedTuple):
    """The probe's read bandwidth against one thread's ``memchr`` over the same buffer."""

    node: int
    """The node whose CPUs read and whose memory holds the buffer."""
    probe_gbps: float
    """The probe's reading threads (every CPU of the node), median GB/s."""
    single_gbps: float
    """One thread calling ``memchr`` over the whole buffer, median GB/s."""
    threads: int
    """The probe's reading threads."""
    placed_fraction: float
    """Share of the buffer's pages on the node."""


def yardstick(system: System, size: int, seconds: float, rounds: int = 3) -> Yardstick:
    """Measure the probe's bandwidth and the single-thread rate, alternately, on one buffer.

    The first CPU node reads a buffer bound to itself (its own memory when it has some).
    """
    plan = make_plan(system, size, seconds)
    cpu = plan.cpu_nodes[0]
    mem = next((m for m in plan.mem_nodes if m.id == cpu.id), plan.mem_nodes[0])
    buffers = Buffers(system)
    stop = threading.Event()
    count = len(cpu.cpus)
    chunk = plan.size_bytes // count // system.page_size * system.page_size
    probe_rates: List[float] = []
    single_rates: List[float] = []
    try:
        addr = buffers.map_on(chunk * count, mem.id)
        read_rate(system, stop, addr, chunk, count, cpu, lambda: 0.0, touch=True)
        for _ in range(rounds):
            single_rates.append(read_rate(system, stop, addr, chunk * count, 1, cpu, lambda: seconds))
            probe_rates.append(read_rate(system, stop, addr, chunk, count, cpu, lambda: seconds))
        placed = buffers.placed(addr, chunk * count, mem.id)
    finally:
        buffers.free_all()
    return Yardstick(cpu.id, sorted(probe_rates)[rounds // 2], sorted(single_rates)[rounds // 2],
                     count, placed)
