"""``strata-doctor probe``: measure the NUMA read-bandwidth and latency matrix.

For every pair of a CPU node (a node with CPUs this process may use) and a memory node
(every node with memory, CPU-less ones included), as :mod:`~strata_doctor.probe.plan`
decided:

* **read bandwidth**: a buffer is mapped, bound to the memory node with
  ``mbind(MPOL_BIND)``, and split among threads pinned one per CPU of the CPU node (or
  ``--threads N``), which read it with ``memchr`` (:mod:`~strata_doctor.probe.bandwidth`).
* **idle latency**: one pinned thread follows a chain of pointers through a buffer bound
  the same way, at least 4x the last-level cache when ``--size`` allows. The chain is a
  degenerate binary search tree and the C library's ``tfind`` walks it, comparing with
  ``strcmp``: one dependent load per step and no Python per load (docs/probe.md). This
  module lays the chain and times the walk.
* **placement**: after measuring, ``move_pages(nodes=NULL)`` reports every page's node;
  the cell's ``placed_fraction`` is the share on the memory node.

Everything runs through :class:`~strata_doctor.probe.system.System`, which tests replace.
"""

from __future__ import annotations

import ctypes
import os
import random
import sys
import threading
from array import array
from datetime import datetime, timezone
from typing import Callable, Dict, List, Optional, Tuple

from strata_doctor.facts.probe_result import Cell, ProbeResult
from strata_doctor.probe.bandwidth import read_rate
from strata_doctor.probe.buffers import Buffers
from strata_doctor.probe.plan import BLOCK, Plan, ProbeRefused, round_up
from strata_doctor.probe.system import NodeInfo, System, Unsupported
from strata_doctor.probe.workers import run_threads

LINE = 64
LINES = BLOCK // LINE
"""Lines of a block: the line offsets a chain's rounds go through."""
MIN_PHASE = 0.05
"""The shortest measurement, whatever is left of ``--seconds``."""
SEGMENT = 65536
"""Least chase steps per ``tfind`` call: Python's cost per call is then far below 0.1%."""
RESOLUTION = 0.1
"""A latency is given only when the memory's part is at least this share of a step."""
LITTLE = sys.byteorder == "little"

Progress = Callable[[str], None]


class Probe:
    """One run: measures every cell of a plan and frees every buffer, even on Ctrl-C."""

    def __init__(self, system: System, plan: Plan, progress: Optional[Progress] = None,
                 seed: Optional[int] = None) -> None:
        self.system = system
        self.plan = plan
        self.progress = progress or (lambda text: None)
        self.rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
        self.stop = threading.Event()
        self.buffers = Buffers(system)
        """The mappings held; emptied by :meth:`run` whatever happens."""
        self._key = ctypes.create_string_buffer(b"\x02")
        self._other = ctypes.create_string_buffer(b"\x01")
        self._overhead: Dict[int, float] = {}
        self.unresolved: List[str] = []
        """Cells whose latency could not be told apart from the chase's own cost."""
        self.deadline = 0.0
        """When the whole run should end (``--seconds`` after its start)."""
        self.phases_left = 0
        """Measurements still to come, each taking an equal share of the time left."""

    def budget(self) -> float:
        """Measuring time of the next phase: an equal share of what is left of the run,
        taken after the phase's buffer is set up, so setting up counts against the total."""
        left = (self.deadline - self.system.clock()) / max(1, self.phases_left)
        self.phases_left -= 1
        return max(MIN_PHASE, left)

    # -- the run -------------------------------------------------------------
    def run(self) -> ProbeResult:
        """Measure every cell; the buffers are freed before this returns or raises."""
        plan = self.plan
        self.deadline = self.system.clock() + plan.seconds
        self.phases_left = 2 * plan.cells
        pairs = [(cpu, mem) for cpu in plan.cpu_nodes for mem in plan.mem_nodes]
        try:
            cells = [self.cell(cpu, mem, done) for done, (cpu, mem) in enumerate(pairs, 1)]
        finally:
            self.stop.set()
            self.buffers.free_all()
        return self.result(cells)

    def cell(self, cpu: NodeInfo, mem: NodeInfo, done: int) -> Cell:
        """Measure one pair, the ``done``-th of the plan."""
        where = f"cpu node {cpu.id} -> memory node {mem.id} ({done}/{self.plan.cells})"
        self.progress(f"{where}: bandwidth")
        gbps, threads, placed_bw = self.bandwidth(cpu, mem)
        self.progress(f"{where}: latency")
        latency, placed_lat = self.latency(cpu, mem)
        return Cell(cpu.id, mem.id, gbps, latency, min(placed_bw, placed_lat), threads)

    def result(self, cells: List[Cell]) -> ProbeResult:
        """The measured cells with the conditions they were measured under."""
        plan = self.plan
        overhead = max(self._overhead.values()) if self._overhead else None
        return ProbeResult(
            cells=tuple(cells), size_bytes=plan.size_bytes, seconds=plan.seconds,
            cpu_model=self.system.cpu_model(), kernel=self.system.kernel(),
            latency_bytes=plan.latency_bytes, llc_bytes=plan.llc_bytes,
            chase_overhead_ns=overhead,
            created=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            notes=plan.notes + tuple(self.unresolved),
        )

    # -- bandwidth -------------------------------------------------------------
    def bandwidth(self, cpu: NodeInfo, mem: NodeInfo) -> Tuple[float, int, float]:
        """Read GB/s of ``cpu``'s threads over memory on ``mem``, threads, placed fraction."""
        page = self.system.page_size
        count = self.plan.threads or len(cpu.cpus)
        chunk = self.plan.size_bytes // count // page * page
        if chunk < page:
            raise ProbeRefused(f"--size is too small for {count:,} threads")
        addr = self.buffers.map_on(chunk * count, mem.id)
        try:
            gbps = read_rate(self.system, self.stop, addr, chunk, count, cpu, self.budget, touch=True)
            placed = self.buffers.placed(addr, chunk * count, mem.id)
        finally:
            self.buffers.unmap(addr)
        return gbps, count, placed

    # -- latency ---------------------------------------------------------------
    def latency(self, cpu: NodeInfo, mem: NodeInfo) -> Tuple[Optional[float], float]:
        """ns per dependent load of one thread on ``cpu`` over memory on ``mem``; placed fraction."""
        size = self.plan.latency_bytes
        raw = self.buffers.map_on(size + BLOCK, mem.id)
        base = round_up(raw, BLOCK)
        result: List[Optional[float]] = []

        def chaser() -> None:
            result.append(self.chase(cpu, mem, base, size))

        try:
            run_threads([chaser], self.stop)
            placed = self.buffers.placed(base, size, mem.id)
        finally:
            self.buffers.unmap(raw)
        return (result[0] if result else None), placed

    def chase(self, cpu: NodeInfo, mem: NodeInfo, base: int, size: int) -> Optional[float]:
        """In the chasing thread: the net ns per step over ``[base, base+size)``, or None
        (and a note) when it cannot be told apart from the chase's own cost."""
        self.system.pin([cpu.cpus[0]])
        if cpu.id not in self._overhead:
            self._overhead[cpu.id] = self.step_overhead()
        overhead = self._overhead[cpu.id]
        step = self.step_ns(base, size)
        # glibc's tfind picks the next node with a cmov on strcmp's result, so the
        # comparison is on every step's critical path: subtract its L1-resident cost.
        net = step - overhead
        if net < RESOLUTION * step:
            self.unresolved.append(unresolved_note(cpu, mem, step, overhead))
            return None
        return net

    def step_ns(self, base: int, size: int) -> float:
        """ns per step of the chain laid over the buffer, walked for one phase's budget."""
        # build_chain writes the whole buffer in address order: the first touch, here.
        first, stops, steps = build_chain(base, size, self.rng, ctypes.addressof(self._other),
                                          ctypes.addressof(self._key))
        seconds = self.budget()
        calls, elapsed = self.walk(first, stops, seconds)
        return elapsed / (calls * steps) * 1e9

    def walk(self, first: int, stops: List[int], seconds: float) -> Tuple[int, float]:
        """Walk the cyclic chain one segment per ``tfind`` call for ``seconds``;
        the calls made and the seconds they took."""
        system = self.system
        root = ctypes.c_uint64(first)
        key = ctypes.addressof(self._key)
        calls = 0
        start = system.clock()
        while True:
            stop_node = stops[calls % len(stops)]
            if system.tfind(key, ctypes.addressof(root)) != stop_node:
                raise Unsupported("the C library's tfind does not follow the chain")
            root.value = ctypes.c_uint64.from_address(stop_node + 16).value
            calls += 1
            elapsed = system.clock() - start
            if elapsed >= seconds or self.stop.is_set():
                return calls, elapsed

    def step_overhead(self) -> float:
        """ns of one chase step when every node is in L1: the method's own cost per load.

        Two chains of different length, so the cost of the call itself cancels out.
        """
        times = [self.l1_walk(nodes) for nodes in (64, 512)]
        return max(0.0, (times[1] - times[0]) / (512 - 64) * 1e9)

    def l1_walk(self, nodes: int) -> float:
        """Seconds of one ``tfind`` walk over a chain of ``nodes`` lines, best of five."""
        buf = (ctypes.c_uint64 * (nodes * 8))()
        base = ctypes.addressof(buf)
        order = list(range(nodes))
        self.rng.shuffle(order)
        for i, slot in enumerate(order):
            last = i == nodes - 1
            buf[slot * 8] = ctypes.addressof(self._key if last else self._other)
            buf[slot * 8 + 2] = 0 if last else base + order[i + 1] * LINE
        root = ctypes.c_uint64(base + order[0] * LINE)
        expected = base + order[-1] * LINE
        best = float("inf")
        for _ in range(5):
            start = self.system.clock()
            for _ in range(200):
                if self.system.tfind(ctypes.addressof(self._key), ctypes.addressof(root)) != expected:
                    raise Unsupported("the C library's tfind does not follow the chain")
            best = min(best, self.system.clock() - start)
        return best / 200


def unresolved_note(cpu: NodeInfo, mem: NodeInfo, step: float, overhead: float) -> str:
    """The note for a cell whose chase step is hardly more than the chase's own cost."""
    return (f"cpu node {cpu.id} -> memory node {mem.id}: a chase step took {step:.1f} ns, "
            f"hardly more than the chase's own {overhead:.1f} ns, so no "
            "latency is given (other load, or an emulated CPU)")


def build_chain(base: int, size: int, rng: random.Random, key: int,
                stop_key: int) -> Tuple[int, List[int], int]:
    """Lay a cyclic chain of ``tfind`` nodes over ``[base, base+size)``.

    Returns the first node, the stop nodes in walking order, and the steps from one
    stop to the next (a segment: whole rounds, at least :data:`SEGMENT` steps).

    ``base`` is 64 KiB aligned. Every 64-byte line is one node ``{key, left=0, right}``
    (glibc's and musl's node layout). The walk goes round by round: each round visits
    every 64 KiB block once, in one random block order, at one line offset; the even
    offsets come first and the odd ones after in the same order, so a line's pair-mate,
    which the adjacent-line prefetcher fetches with it, comes half a chain later, long
    after it was evicted. Every line is visited exactly once per cycle. Nodes point at
    ``key``, except the last node of every segment, which points at ``stop_key``: one
    ``tfind`` call walks exactly one segment and returns its stop node, and the next call
    starts at that node's successor, so no call runs long, whatever the buffer's size.

    Every node of a block points at the same line of the block that follows it in the
    order, so the buffer is written in address order, at C speed: one template block
    (keys, and each line's own offset in the low 16 bits of ``right``) copied over the
    whole buffer, which is also the first touch; then, per block, the upper 48 bits of
    its 1024 ``right`` fields (the next block's address) as three strided slices; then
    the 1024 round-ends of the last block.
    """
    blocks = size // BLOCK
    order, line_order = walk_order(rng, blocks)
    lay_template(base, size, key)
    view = memoryview((ctypes.c_char * size).from_address(base)).cast("B")
    words = view.cast("Q")
    halves = view.cast("H")
    link_blocks(halves, base, order)
    rounds = segment_rounds(blocks)
    stops = end_rounds(words, base, order, line_order, rounds, stop_key)
    for v in (halves, words, view):
        v.release()
    return base + order[0] * BLOCK + line_order[0] * LINE, stops, rounds * blocks


def walk_order(rng: random.Random, blocks: int) -> Tuple[List[int], List[int]]:
    """The random order of the blocks, and of the line offsets: the even ones, then
    their pair-mates in the same order."""
    order = list(range(blocks))
    rng.shuffle(order)
    even = list(range(0, LINES, 2))
    rng.shuffle(even)
    return order, even + [line + 1 for line in even]  # every pair-mate half a chain later


def lay_template(base: int, size: int, key: int) -> None:
    """Write the template block over the whole buffer: every line's key and, in the low
    16 bits of its ``right``, its own offset."""
    template = array("Q", bytes(BLOCK))
    template[0::8] = array("Q", [key]) * LINES
    halves = memoryview(template).cast("B").cast("H")
    halves[(2 * 4 + (0 if LITTLE else 3))::32] = array("H", [line * LINE for line in range(LINES)])
    halves.release()
    start, _ = template.buffer_info()
    ctypes.memmove(base, start, BLOCK)
    done = BLOCK
    while done < size:  # doubling copies: a few large memmoves
        n = min(done, size - done)
        ctypes.memmove(base + done, base, n)
        done += n


def link_blocks(halves: memoryview, base: int, order: List[int]) -> None:
    """Each block's ``right`` fields: bits 16-63 of the next block's address."""
    successor = [0] * len(order)
    for j in range(len(order) - 1):
        successor[order[j]] = order[j + 1]
    per_block = BLOCK // 2
    fills: Dict[int, array[int]] = {}
    for b, following in enumerate(successor):
        target = base + following * BLOCK
        first = b * per_block + 2 * 4
        for part in (1, 2, 3):
            value = (target >> (16 * part)) & 0xFFFF
            if value:  # else the template's zeros stand
                offset = part if LITTLE else 3 - part
                halves[first + offset:(b + 1) * per_block:32] = _fill(value, fills)


def _fill(value: int, fills: Dict[int, array[int]]) -> array[int]:
    """A block's worth of one 16-bit value; the first 64 values are kept for reuse."""
    fill = fills.get(value)
    if fill is None:
        fill = array("H", [value]) * LINES
        if len(fills) < 64:
            fills[value] = fill
    return fill


def segment_rounds(blocks: int) -> int:
    """Rounds per segment: the fewest (a power of two, at most a round per line) that
    make at least :data:`SEGMENT` steps."""
    rounds = 1
    while rounds * blocks < SEGMENT and rounds < LINES:
        rounds *= 2
    return rounds


def end_rounds(words: memoryview, base: int, order: List[int], line_order: List[int],
               rounds: int, stop_key: int) -> List[int]:
    """Close every round and mark every segment's end; the stop nodes, in walking order.

    The last block of the order ends every round: on to the first block, next line;
    the very last line back to the first (a cycle). Every ``rounds``-th round ends a segment.
    """
    last_block = base + order[-1] * BLOCK
    first_block = base + order[0] * BLOCK
    stops = []
    for k, line in enumerate(line_order):
        node = last_block + line * LINE
        words[(node - base) // 8 + 2] = first_block + line_order[(k + 1) % LINES] * LINE
        if (k + 1) % rounds == 0:
            words[(node - base) // 8] = stop_key
            stops.append(node)
    return stops
