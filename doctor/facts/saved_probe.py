"""The saved probe result as ``check`` and the report see it, and its text matrix.

``strata-doctor probe`` measures; :mod:`~strata_doctor.facts.probe_result` describes what
it measured. This module judges a saved ``/var/lib/strata-doctor/probe.json`` (is it
readable, a probe result, from this CPU and kernel?), says what its matrix means for
binding, and prints it as Intel MLC does. The method and its limits are in docs/probe.md.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.probe_result import UNVERIFIED_BELOW, Cell, GpuCopy, ProbeResult, from_json

SAVED_PATH = "/var/lib/strata-doctor/probe.json"
"""Where ``probe --save`` writes, under the root; where ``check`` looks."""
MAX_SAVED_BYTES = 4 << 20
"""A saved result of 64 x 64 nodes is about 1 MiB; a larger file is no probe result, and is
not parsed."""
MEMORY_BOUND_LOW = 0.5
"""The low end of the gain estimate assumes half of the pool's time is memory reads."""


class Remote(NamedTuple):
    """What the saved matrix says of one node's threads reading local versus remote memory."""

    node: int
    """The node the engine would be bound to (the GPU's)."""
    local_gbps: float
    """Its CPUs reading its own memory."""
    remote_gbps: float
    """Its CPUs reading the other CPU nodes' memory (their mean)."""
    nodes: int
    """CPU nodes first-touch would spread an unbound arena over."""
    gain_low: float
    """Estimated speed-up of binding, low end (half the time memory-bound), e.g. 0.27."""
    gain_high: float
    """Estimated speed-up of binding, high end (entirely memory-bound)."""
    verified: bool
    """Every cell used had its placement verified."""

    @property
    def ratio(self) -> float:
        """How many times slower a remote read is than a local one."""
        return self.local_gbps / self.remote_gbps


class SavedProbe(NamedTuple):
    """``/var/lib/strata-doctor/probe.json`` under the root, as ``check`` sees it."""

    path: str
    """The host path it was read from."""
    result: Optional[ProbeResult]
    """The matrix; None when the file cannot be used."""
    unused: Optional[str] = None
    """Why the file is not used (unreadable, malformed, another CPU or kernel); None when it is."""

    @property
    def usable(self) -> Optional[ProbeResult]:
        """The matrix when it describes this host, else None."""
        return self.result if self.unused is None else None


def read_saved(text: Optional[str], why_unread: Optional[str], cpu_model: Optional[str],
               kernel: Optional[str]) -> Optional[SavedProbe]:
    """Judge the saved file's text: None when there is none; unused, with why, when it is
    unreadable, malformed, or from another CPU model or kernel."""
    if text is None:
        if why_unread in (None, "missing"):
            return None
        return SavedProbe(SAVED_PATH, None, f"it could not be read ({why_unread})")
    if len(text) > MAX_SAVED_BYTES:
        return SavedProbe(SAVED_PATH, None, f"it is larger than {MAX_SAVED_BYTES >> 20} MiB")
    try:
        result = from_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        return SavedProbe(SAVED_PATH, None, f"it is not a probe result: {exc}")
    return SavedProbe(SAVED_PATH, result, stale_reason(result, cpu_model, kernel))


def stale_reason(result: ProbeResult, cpu_model: Optional[str], kernel: Optional[str]) -> Optional[str]:
    """Why a saved result does not describe this host any more; None when it still does."""
    if cpu_model and result.cpu_model and cpu_model.strip() != result.cpu_model.strip():
        return f"it was measured on another CPU ({result.cpu_model})"
    if kernel and result.kernel and kernel.strip() != result.kernel.strip():
        return f"it was measured under another kernel ({result.kernel})"
    return None


def remote_reads(result: ProbeResult, node: int) -> Optional[Remote]:
    """Local versus remote read bandwidth of ``node``'s CPUs, and what binding would gain
    (:func:`binding_gain`). None when the matrix lacks the cells; a read of 0 GB/s (a figure
    rounded to nothing, or a file edited by hand) is no measurement, and no ratio rests on it."""
    local = result.cell(node, node)
    remote = _remote_cells(result, node)
    if local is None or not local.read_gbps or not remote:
        return None
    remote_gbps = sum(c.read_gbps or 0.0 for c in remote) / len(remote)
    nodes = len(result.cpu_nodes)
    low, high = binding_gain(local.read_gbps / remote_gbps, nodes)
    return Remote(node, local.read_gbps, remote_gbps, nodes, low, high,
                  all(c.verified for c in [local, *remote]))


def _remote_cells(result: ProbeResult, node: int) -> List[Cell]:
    """``node``'s row over the other CPU nodes' memory; empty unless every one has a figure
    above 0 (their mean divides the local figure)."""
    cells = by_pair(result)  # one look-up per node, not a scan of the matrix
    others = [cells.get((node, n)) for n in result.cpu_nodes if n != node]
    remote = [c for c in others if c is not None and c.read_gbps]
    return remote if len(remote) == len(others) else []


def by_pair(result: ProbeResult) -> Dict[Tuple[int, int], Cell]:
    """The cells by (CPU node, memory node); the first of a pair given twice, as
    :meth:`ProbeResult.cell` finds it."""
    cells: Dict[Tuple[int, int], Cell] = {}
    for cell in result.cells:
        cells.setdefault((cell.cpu_node, cell.mem_node), cell)
    return cells


def binding_gain(ratio: float, nodes: int) -> Tuple[float, float]:
    """The speed-up of binding a pool to one of ``nodes`` CPU nodes, low and high end,
    when remote reads are ``ratio`` times slower than local ones.

    Without a binding, first-touch spreads a shared arena over the N CPU nodes whose
    threads touch it, so about (N-1)/N of any thread's reads are remote. A memory-bound
    pool bound to one node reads everything locally: its read time falls from
    ``1/N + (N-1)/N x ratio`` to 1 (the high end); the low end assumes half of the time
    goes to memory reads (Amdahl).
    """
    spread = 1.0 / nodes + (nodes - 1) / nodes * ratio  # unbound read time / bound read time
    low = 1.0 / ((1.0 - MEMORY_BOUND_LOW) + MEMORY_BOUND_LOW / spread) - 1.0
    return low, spread - 1.0


def to_text(result: ProbeResult) -> str:
    """The matrices as Intel MLC prints them: rows are CPU nodes, columns memory nodes."""
    lines = [
        f"Measured on {result.cpu_model or 'an unknown CPU'}, kernel {result.kernel or 'unknown'}.",
        "",
    ]
    lines += _one_node(result) if len(result.cells) == 1 else _matrices(result)
    if result.chase_overhead_ns is not None:
        lines.append(
            f"Net of the chase's own work per load ({result.chase_overhead_ns:.1f} ns, "
            "timed with the chain in L1)."
        )
    lines += _unverified_lines(result)
    lines += _gpu_lines(result)
    lines += [f"Note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def _matrices(result: ProbeResult) -> List[str]:
    """Bandwidth and latency, CPU nodes against memory nodes."""
    rows, cols = result.cpu_nodes, result.mem_nodes
    lines = [f"Read bandwidth (GB/s): {_readers(result)} of the CPU node reading memory bound to each node"]
    lines += _matrix(result, rows, cols, lambda c: c.read_gbps, "{:.1f}")
    lines += ["", "Idle latency (ns per dependent load, one thread)"]
    return lines + _matrix(result, rows, cols, lambda c: c.latency_ns, "{:.1f}")


def _one_node(result: ProbeResult) -> List[str]:
    """One CPU node and one memory node: nothing to compare, so no matrix of one cell."""
    cell = result.cells[0]
    node = (f"node {cell.cpu_node}" if cell.cpu_node == cell.mem_node
            else f"CPU node {cell.cpu_node} and memory node {cell.mem_node}")
    read = "not measured" if cell.read_gbps is None else f"{cell.read_gbps:.1f} GB/s"
    latency = "not measured" if cell.latency_ns is None else f"{cell.latency_ns:.1f} ns per dependent load"
    mark = "" if cell.verified else "*"
    return [f"One NUMA node ({node}): nothing to compare, no memory is remote; binding changes no read.",
            f"Read bandwidth{mark}: {read} ({_readers(result)}); idle latency{mark}: {latency} (one thread)."]


def _readers(result: ProbeResult) -> str:
    """The bandwidth's reading threads: one count when every cell had the same."""
    threads = sorted({c.threads for c in result.cells})
    if len(threads) != 1:
        return "every CPU"
    return "1 thread" if threads[0] == 1 else f"{threads[0]:,} threads"


def _unverified_lines(result: ProbeResult) -> List[str]:
    """A line for every cell whose pages were not all where they were bound."""
    unverified = [c for c in result.cells if not c.verified]
    if not unverified:
        return []
    return [""] + [
        f"* cpu node {c.cpu_node} -> memory node {c.mem_node}: placement unverified, "
        f"only {c.placed_fraction:.1%} of the pages were on node {c.mem_node}"
        for c in unverified
    ]


def _gpu_lines(result: ProbeResult) -> List[str]:
    """The pinned copy bandwidth from every CPU node, or why it was not measured."""
    if result.gpu_status != "measured" or not result.gpu:
        return ["", f"GPU copy bandwidth: skipped ({result.gpu_reason or 'not asked'})"]
    return ["", f"Pinned host-to-device copy ({result.gpu_reason}), GB/s",
            *(_copy_line(g) for g in result.gpu)]


def _copy_line(copy: GpuCopy) -> str:
    """One node's copy bandwidth, marked when its pages were not on the node."""
    unverified = ("" if copy.placed_fraction >= UNVERIFIED_BELOW else
                  f" (unverified: {copy.placed_fraction:.0%} of the pages on the node)")
    return f"  from node {copy.cpu_node}: {copy.h2d_gbps:.1f}{unverified}"


def _matrix(result: ProbeResult, rows: Sequence[int], cols: Sequence[int], value: Any,
            spec: str) -> List[str]:
    width = 10
    cells = by_pair(result)  # rows x columns look-ups: a scan each would be quadratic
    out = ["CPU node " + "".join(f"{'mem ' + str(m):>{width}}" for m in cols)]
    for r in rows:
        text = f"{r:>8} "
        for m in cols:
            cell = cells.get((r, m))
            figure = value(cell) if cell else None
            shown = "-" if figure is None else spec.format(figure)
            if cell is not None and not cell.verified and figure is not None:
                shown += "*"
            text += f"{shown:>{width}}"
        out.append(text)
    return out
