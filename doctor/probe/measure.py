"""``strata-doctor probe``: measure the NUMA read-bandwidth and latency matrix.

For every pair of a CPU node (a node with CPUs this process may use) and a memory node
(every node with memory, CPU-less ones included):

* **read bandwidth**: a buffer is mapped, bound to the memory node with
  ``mbind(MPOL_BIND)``, and split among threads pinned one per CPU of the CPU node (or
  ``--threads N``). Each thread first writes its share (the first touch, from the CPU
  node), then calls glibc's ``memchr`` over it for a byte that is not there, again and
  again until its time is up. ctypes releases the GIL around each call, so the threads
  read at memory speed in parallel; bytes read / wall time is the figure.
* **idle latency**: one pinned thread follows a chain of pointers through a buffer bound
  the same way, at least 4x the last-level cache when ``--size`` allows. The chain is a
  degenerate binary search tree and the C library's ``tfind`` walks it, comparing with
  ``strcmp``: one dependent load per step and no Python per load (docs/probe.md).
* **placement**: after measuring, ``move_pages(nodes=NULL)`` reports every page's node;
  the cell's ``placed_fraction`` is the share on the memory node.

Everything runs through :class:`~strata_doctor.probe.system.System`, which tests replace.
"""

from __future__ import annotations

import ctypes
import functools
import os
import random
import sys
import threading
from array import array
from datetime import datetime, timezone
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.parse import format_bytes
from strata_doctor.facts.saved_probe import Cell, ProbeResult
from strata_doctor.probe.system import NODE_DIR, NodeInfo, System, Unsupported

MiB = 1 << 20
DEFAULT_SIZE = 1 << 30
DEFAULT_SECONDS = 10.0
MIN_SIZE = 4 * MiB
MAX_SECONDS = 3600.0
MAX_THREADS = 4096
BLOCK = 64 * 1024
"""The chain visits one line per 64 KiB block per round (see :func:`build_chain`)."""
LINE = 64
PIECE = 8 * MiB
"""One ``memchr`` call reads at most this much, so a stop is seen within milliseconds."""
LATENCY_FALLBACK = 256 * MiB
"""The chase buffer when the kernel does not say how large the caches are."""
MIN_PHASE = 0.05
"""The shortest measurement, whatever is left of ``--seconds``."""
SEGMENT = 65536
"""Least chase steps per ``tfind`` call: Python's cost per call is then far below 0.1%."""
RESOLUTION = 0.1
"""A latency is given only when the memory's part is at least this share of a step."""
HEADROOM = 64 * MiB
"""Free memory a node keeps beyond the probe's buffer."""

Progress = Callable[[str], None]


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
    if size < MIN_SIZE:
        raise ProbeRefused(f"--size {format_bytes(size)} is too small (at least {format_bytes(MIN_SIZE)})")
    if not 0 < seconds <= MAX_SECONDS:
        raise ProbeRefused(f"--seconds {seconds} must be above 0 and at most {MAX_SECONDS:.0f}")
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise ProbeRefused(f"--threads {threads} must be between 1 and {MAX_THREADS}")
    nodes = system.nodes()
    cpu_nodes = tuple(n for n in nodes if n.cpus)
    mem_nodes = tuple(n for n in nodes if n.mem_total > 0)
    if not cpu_nodes or not mem_nodes:
        raise ProbeRefused(f"no NUMA node with CPUs this process may use, or none with memory "
                           f"(read from {NODE_DIR})")
    llc = system.llc_bytes()
    want = 4 * llc if llc else LATENCY_FALLBACK
    latency = max(BLOCK * 16, min(_round_up(want, BLOCK), size // BLOCK * BLOCK))
    notes = []
    if llc and latency < 4 * llc:
        notes.append(
            f"the chase buffer ({format_bytes(latency)}) is smaller than 4x the last-level cache "
            f"({format_bytes(llc)}), so some loads may hit the cache and latencies read low; "
            "raise --size for a true idle latency")
    elif not llc:
        notes.append(f"the cache sizes are unknown; the chase buffer is {format_bytes(latency)}")
    bandwidth = size // system.page_size * system.page_size
    need = max(bandwidth, latency + BLOCK)
    for node in mem_nodes:
        if node.mem_free < need + HEADROOM:
            raise ProbeRefused(
                f"node {node.id} has {format_bytes(node.mem_free)} free; the probe needs "
                f"{format_bytes(need)} there plus {format_bytes(HEADROOM)} to spare "
                "(lower --size, or free memory on that node)")
    return Plan(cpu_nodes, mem_nodes, bandwidth, latency, llc, seconds, threads, tuple(notes))


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


class Probe:
    """One run: measures every cell of a plan and frees every buffer, even on Ctrl-C."""

    def __init__(self, system: System, plan: Plan, progress: Optional[Progress] = None,
                 seed: Optional[int] = None) -> None:
        self.system = system
        self.plan = plan
        self.progress = progress or (lambda text: None)
        self.rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
        self.stop = threading.Event()
        self.maps: Dict[int, int] = {}
        """Live mappings: address -> size. Emptied by :meth:`run` whatever happens."""
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
        cells: List[Cell] = []
        try:
            done = 0
            for cpu in plan.cpu_nodes:
                for mem in plan.mem_nodes:
                    done += 1
                    self.progress(f"cpu node {cpu.id} -> memory node {mem.id} "
                                  f"({done}/{plan.cells}): bandwidth")
                    gbps, threads, placed_bw = self.bandwidth(cpu, mem)
                    self.progress(f"cpu node {cpu.id} -> memory node {mem.id} "
                                  f"({done}/{plan.cells}): latency")
                    latency, placed_lat = self.latency(cpu, mem)
                    cells.append(Cell(cpu.id, mem.id, gbps, latency, min(placed_bw, placed_lat), threads))
        finally:
            self.stop.set()
            self.free_all()
        overhead = max(self._overhead.values()) if self._overhead else None
        return ProbeResult(
            cells=tuple(cells), size_bytes=plan.size_bytes, seconds=plan.seconds,
            cpu_model=self.system.cpu_model(), kernel=self.system.kernel(),
            latency_bytes=plan.latency_bytes, llc_bytes=plan.llc_bytes,
            chase_overhead_ns=overhead,
            created=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            notes=plan.notes + tuple(self.unresolved),
        )

    # -- memory --------------------------------------------------------------
    def map_on(self, size: int, node: int) -> int:
        """A fresh mapping whose pages may only come from ``node``."""
        addr = self.system.map(size)
        self.maps[addr] = size
        self.system.bind(addr, size, node)
        return addr

    def unmap(self, addr: int) -> None:
        """Free one mapping."""
        size = self.maps.pop(addr)
        self.system.unmap(addr, size)

    def free_all(self) -> None:
        """Free every mapping still held."""
        for addr in list(self.maps):
            self.unmap(addr)

    def placed(self, addr: int, size: int, node: int) -> float:
        """The share of the range's pages that the kernel reports on ``node``."""
        status = self.system.page_nodes(addr, size)
        return status.count(node) / len(status) if len(status) else 0.0

    # -- bandwidth -------------------------------------------------------------
    def bandwidth(self, cpu: NodeInfo, mem: NodeInfo) -> Tuple[float, int, float]:
        """Read GB/s of ``cpu``'s threads over memory on ``mem``, threads, placed fraction."""
        system = self.system
        count = self.plan.threads or len(cpu.cpus)
        chunk = self.plan.size_bytes // count // system.page_size * system.page_size
        if chunk < system.page_size:
            raise ProbeRefused(f"--size is too small for {count} threads")
        addr = self.map_on(chunk * count, mem.id)
        try:
            gbps = self.read_rate(addr, chunk, count, cpu, None, touch=True)
            placed = self.placed(addr, chunk * count, mem.id)
        finally:
            self.unmap(addr)
        return gbps, count, placed

    def read_rate(self, addr: int, chunk: int, count: int, cpu: NodeInfo, seconds: Optional[float],
                  touch: bool = False) -> float:
        """GB/s of ``count`` threads pinned to ``cpu``'s CPUs, each reading its ``chunk``
        for ``seconds`` (None: the run's :meth:`budget`, once every thread is ready).

        With ``touch`` each thread first writes its chunk: the first touch of fresh pages
        happens on the CPU node.
        """
        system = self.system
        share = [seconds or 0.0]

        def take_budget() -> None:
            if seconds is None:
                share[0] = self.budget()

        ready = threading.Barrier(count, action=take_budget)
        spans: List[Tuple[float, float, int]] = []

        def reader(index: int) -> None:
            system.pin([cpu.cpus[index % len(cpu.cpus)]])
            start_addr = addr + index * chunk
            if touch:
                system.memset(start_addr, 0, chunk)  # first touch, from the CPU node
            system.memchr(start_addr, 1, chunk)  # one untimed pass
            ready.wait()
            start = system.clock()
            deadline = start + share[0]
            done = 0
            while not self.stop.is_set():
                offset = 0
                while offset < chunk and not self.stop.is_set():
                    n = min(PIECE, chunk - offset)
                    system.memchr(start_addr + offset, 1, n)
                    done += n
                    offset += n
                    if system.clock() >= deadline:
                        break
                if system.clock() >= deadline:
                    break
            spans.append((start, system.clock(), done))

        self._run_threads([functools.partial(reader, i) for i in range(count)], ready)
        elapsed = max(s[1] for s in spans) - min(s[0] for s in spans)
        total = sum(s[2] for s in spans)
        return total / elapsed / 1e9 if elapsed > 0 else 0.0

    # -- latency ---------------------------------------------------------------
    def latency(self, cpu: NodeInfo, mem: NodeInfo) -> Tuple[Optional[float], float]:
        """ns per dependent load of one thread on ``cpu`` over memory on ``mem``; placed fraction."""
        size = self.plan.latency_bytes
        raw = self.map_on(size + BLOCK, mem.id)
        base = _round_up(raw, BLOCK)
        result: List[float] = []

        def chaser() -> None:
            system = self.system
            system.pin([cpu.cpus[0]])
            if cpu.id not in self._overhead:
                self._overhead[cpu.id] = self.step_overhead()
            # build_chain writes the whole buffer in address order: the first touch, here.
            first, stops, steps = build_chain(base, size, self.rng, ctypes.addressof(self._other),
                                              ctypes.addressof(self._key))
            seconds = self.budget()
            root = ctypes.c_uint64(first)
            key = ctypes.addressof(self._key)
            calls = 0
            start = system.clock()
            while True:  # one segment of the cyclic chain per call
                if system.tfind(key, ctypes.addressof(root)) != stops[calls % len(stops)]:
                    raise Unsupported("the C library's tfind does not follow the chain")
                root.value = ctypes.c_uint64.from_address(stops[calls % len(stops)] + 16).value
                calls += 1
                elapsed = system.clock() - start
                if elapsed >= seconds or self.stop.is_set():
                    break
            # glibc's tfind picks the next node with a cmov on strcmp's result, so the
            # comparison is on every step's critical path: subtract its L1-resident cost.
            raw = elapsed / (calls * steps) * 1e9
            net = raw - self._overhead[cpu.id]
            if net < RESOLUTION * raw:
                self.unresolved.append(
                    f"cpu node {cpu.id} -> memory node {mem.id}: a chase step took {raw:.1f} ns, "
                    f"hardly more than the chase's own {self._overhead[cpu.id]:.1f} ns, so no "
                    "latency is given (other load, or an emulated CPU)")
                return
            result.append(net)

        try:
            self._run_threads([chaser])
            placed = self.placed(base, size, mem.id)
        finally:
            self.unmap(raw)
        return (result[0] if result else None), placed

    def step_overhead(self) -> float:
        """ns of one chase step when every node is in L1: the method's own cost per load.

        Two chains of different length, so the cost of the call itself cancels out.
        """
        times = []
        for nodes in (64, 512):
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
            times.append(best / 200)
        return max(0.0, (times[1] - times[0]) / (512 - 64) * 1e9)

    # -- threads ---------------------------------------------------------------
    def _run_threads(self, targets: Sequence[Callable[[], None]],
                     barrier: Optional[threading.Barrier] = None) -> None:
        """Run the workers; the main thread waits in short joins, so Ctrl-C reaches it."""
        errors: List[BaseException] = []

        def wrap(target: Callable[[], None]) -> Callable[[], None]:
            def body() -> None:
                try:
                    target()
                except threading.BrokenBarrierError:
                    pass
                except BaseException as exc:  # re-raised in the main thread
                    errors.append(exc)
                    self.stop.set()
                    if barrier is not None:
                        barrier.abort()
            return body

        workers = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
        for w in workers:
            w.start()
        try:
            for w in workers:
                while w.is_alive():
                    w.join(0.1)
        except BaseException:
            self.stop.set()
            if barrier is not None:
                barrier.abort()
            for w in workers:
                w.join()
            raise
        if errors:
            raise errors[0]


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
    runner = Probe(system, plan)
    count = len(cpu.cpus)
    chunk = plan.size_bytes // count // system.page_size * system.page_size
    probe_rates: List[float] = []
    single_rates: List[float] = []
    try:
        addr = runner.map_on(chunk * count, mem.id)
        runner.read_rate(addr, chunk, count, cpu, 0.0, touch=True)
        for _ in range(rounds):
            single_rates.append(runner.read_rate(addr, chunk * count, 1, cpu, seconds))
            probe_rates.append(runner.read_rate(addr, chunk, count, cpu, seconds))
        placed = runner.placed(addr, chunk * count, mem.id)
    finally:
        runner.free_all()
    return Yardstick(cpu.id, sorted(probe_rates)[rounds // 2], sorted(single_rates)[rounds // 2],
                     count, placed)


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
    lines = BLOCK // LINE
    order = list(range(blocks))
    rng.shuffle(order)
    successor = [0] * blocks
    for j in range(blocks - 1):
        successor[order[j]] = order[j + 1]
    even = list(range(0, lines, 2))
    rng.shuffle(even)
    line_order = even + [line + 1 for line in even]  # every pair-mate half a chain later
    little = sys.byteorder == "little"
    # The template block.
    template = array("Q", bytes(BLOCK))
    template[0::8] = array("Q", [key]) * lines
    halves = memoryview(template).cast("B").cast("H")
    halves[(2 * 4 + (0 if little else 3))::32] = array("H", [line * LINE for line in range(lines)])
    halves.release()
    start, _ = template.buffer_info()
    ctypes.memmove(base, start, BLOCK)
    done = BLOCK
    while done < size:  # doubling copies: a few large memmoves
        n = min(done, size - done)
        ctypes.memmove(base + done, base, n)
        done += n
    # Each block's right fields: bits 16-63 of the next block's address.
    view = memoryview((ctypes.c_char * size).from_address(base)).cast("B")
    words = view.cast("Q")
    h = view.cast("H")
    per_block = BLOCK // 2
    constant: Dict[int, array[int]] = {}
    for b in range(blocks):
        target = base + successor[b] * BLOCK
        first = b * per_block + 2 * 4
        for part in (1, 2, 3):
            value = (target >> (16 * part)) & 0xFFFF
            if not value:
                continue  # the template holds zeros
            fill = constant.get(value)
            if fill is None:
                fill = array("H", [value]) * lines
                if len(constant) < 64:
                    constant[value] = fill
            offset = part if little else 3 - part
            h[first + offset:(b + 1) * per_block:32] = fill
    # The last block of the order ends every round: on to the first block, next line;
    # the very last line back to the first (a cycle). Every G-th round ends a segment.
    rounds = 1
    while rounds * blocks < SEGMENT and rounds < lines:
        rounds *= 2
    last_block = order[-1]
    stops = []
    for k, line in enumerate(line_order):
        following = line_order[(k + 1) % lines]
        node = base + last_block * BLOCK + line * LINE
        words[(node - base) // 8 + 2] = base + order[0] * BLOCK + following * LINE
        if (k + 1) % rounds == 0:
            words[(node - base) // 8] = stop_key
            stops.append(node)
    for v in (h, words, view):
        v.release()
    return base + order[0] * BLOCK + line_order[0] * LINE, stops, rounds * blocks
