"""The probe's results as data: the JSON document, the text matrix, and the reader check uses.

``strata-doctor probe`` measures; this module only describes what it measured. It has no
ctypes and no threads, so ``check`` reads a saved ``/var/lib/strata-doctor/probe.json``
without loading the measuring code. The schema is ``strata-doctor/probe/1``
(docs/json-schema.md); the method and its limits are in docs/probe.md.
"""

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

SCHEMA = "strata-doctor/probe/1"
SAVED_PATH = "/var/lib/strata-doctor/probe.json"
"""Where ``probe --save`` writes, under the root; where ``check`` looks."""
UNVERIFIED_BELOW = 0.99
"""A cell whose placed fraction is below this is marked unverified."""
MEMORY_BOUND_LOW = 0.5
"""The low end of the gain estimate assumes half of the pool's time is memory reads."""


class Cell(NamedTuple):
    """One (CPU node, memory node) pair of the matrix."""

    cpu_node: int
    """The node whose CPUs ran the reading threads."""
    mem_node: int
    """The node the buffer's pages were bound to."""
    read_gbps: Optional[float]
    """Read bandwidth in GB/s (10^9 bytes per second); None when not measured."""
    latency_ns: Optional[float]
    """Idle latency: ns per dependent load, one thread; None when not measured."""
    placed_fraction: float
    """Fraction of the buffers' pages that ``move_pages`` found on ``mem_node``."""
    threads: int
    """Reading threads of the bandwidth measurement."""

    @property
    def verified(self) -> bool:
        """True when at least 99% of the pages were where they were bound."""
        return self.placed_fraction >= UNVERIFIED_BELOW


class GpuCopy(NamedTuple):
    """Pinned host-to-device copy bandwidth from one CPU node's memory."""

    cpu_node: int
    """The node of the copying thread and of the pinned pages."""
    h2d_gbps: float
    """cudaMemcpy host to device, GB/s."""
    placed_fraction: float
    """Fraction of the pinned pages found on ``cpu_node``."""


class ProbeResult(NamedTuple):
    """Everything one probe run measured, and the conditions it ran under."""

    cells: Tuple[Cell, ...]
    """The matrix, row by row (CPU node), then by memory node."""
    size_bytes: int
    """The bandwidth buffer of each cell (``--size``)."""
    seconds: float
    """The measuring time asked for (``--seconds``)."""
    cpu_model: str
    """``model name`` of /proc/cpuinfo when measured."""
    kernel: str
    """The kernel release when measured."""
    latency_bytes: int = 0
    """The pointer-chase buffer of each cell."""
    llc_bytes: Optional[int] = None
    """The largest CPU cache the kernel reported; None when unknown."""
    chase_overhead_ns: Optional[float] = None
    """Time of one chase step when everything hits L1 (the method's own cost per load);
    subtracted from every latency."""
    created: str = ""
    """When it ran (UTC, ISO 8601)."""
    gpu_status: str = "skipped"
    """``measured`` or ``skipped``."""
    gpu_reason: str = ""
    """Why the GPU copy was skipped, or which GPU was measured."""
    gpu: Tuple[GpuCopy, ...] = ()
    """Host-to-device copy bandwidth per CPU node, when measured."""
    notes: Tuple[str, ...] = ()
    """Conditions that limit what the figures mean (e.g. a chase buffer below 4x the LLC)."""

    @property
    def cpu_nodes(self) -> List[int]:
        """The rows: nodes with CPUs."""
        return sorted({c.cpu_node for c in self.cells})

    @property
    def mem_nodes(self) -> List[int]:
        """The columns: nodes with memory, CPU-less ones included."""
        return sorted({c.mem_node for c in self.cells})

    def cell(self, cpu_node: int, mem_node: int) -> Optional[Cell]:
        """The cell of a pair; None when it was not measured."""
        for c in self.cells:
            if c.cpu_node == cpu_node and c.mem_node == mem_node:
                return c
        return None


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
    try:
        result = from_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        return SavedProbe(SAVED_PATH, None, f"it is not a probe result: {exc}")
    return SavedProbe(SAVED_PATH, result, stale_reason(result, cpu_model, kernel))


def to_dict(result: ProbeResult) -> Dict[str, Any]:
    """The ``strata-doctor/probe/1`` document."""
    return {
        "schema": SCHEMA,
        "created": result.created,
        "cpu_model": result.cpu_model,
        "kernel": result.kernel,
        "size_bytes": result.size_bytes,
        "latency_bytes": result.latency_bytes,
        "llc_bytes": result.llc_bytes,
        "seconds": result.seconds,
        "chase_overhead_ns": _round(result.chase_overhead_ns, 2),
        "matrix": [
            {
                "cpu_node": c.cpu_node,
                "mem_node": c.mem_node,
                "read_gbps": _round(c.read_gbps, 2),
                "latency_ns": _round(c.latency_ns, 1),
                "placed_fraction": round(c.placed_fraction, 4),
                "verified": c.verified,
                "threads": c.threads,
            }
            for c in result.cells
        ],
        "gpu": {
            "status": result.gpu_status,
            "reason": result.gpu_reason,
            "copies": [
                {"cpu_node": g.cpu_node, "h2d_gbps": round(g.h2d_gbps, 2),
                 "placed_fraction": round(g.placed_fraction, 4)}
                for g in result.gpu
            ],
        },
        "notes": list(result.notes),
    }


def to_json(result: ProbeResult) -> str:
    """The document as indented JSON text, with a final newline."""
    return json.dumps(to_dict(result), indent=2) + "\n"


def _round(value: Optional[float], digits: int) -> Optional[float]:
    return None if value is None else round(value, digits)


def from_json(text: str) -> ProbeResult:
    """Read a saved document; ValueError names what is wrong with it."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema {data.get('schema')!r}, expected {SCHEMA!r}")
    rows = data.get("matrix")
    if not isinstance(rows, list) or not rows:
        raise ValueError("no matrix")
    cells = tuple(_cell(row, i) for i, row in enumerate(rows))
    found = data.get("gpu")
    gpu: Dict[str, Any] = found if isinstance(found, dict) else {}
    copies = tuple(
        GpuCopy(int(g["cpu_node"]), float(g["h2d_gbps"]), _optional_float(g.get("placed_fraction")) or 0.0)
        for g in gpu.get("copies") or () if isinstance(g, dict) and _numbers(g, ("cpu_node", "h2d_gbps"))
    )
    return ProbeResult(
        cells=cells,
        size_bytes=_int(data, "size_bytes"),
        seconds=float(_number(data, "seconds")),
        cpu_model=str(data.get("cpu_model") or ""),
        kernel=str(data.get("kernel") or ""),
        latency_bytes=_int(data, "latency_bytes", 0),
        llc_bytes=data.get("llc_bytes") if isinstance(data.get("llc_bytes"), int) else None,
        chase_overhead_ns=_optional_float(data.get("chase_overhead_ns")),
        created=str(data.get("created") or ""),
        gpu_status=str(gpu.get("status") or "skipped"),
        gpu_reason=str(gpu.get("reason") or ""),
        gpu=copies,
        notes=tuple(str(n) for n in data.get("notes") or () if isinstance(n, str)),
    )


def _cell(row: Any, index: int) -> Cell:
    if not isinstance(row, dict):
        raise ValueError(f"matrix[{index}] is not an object")
    for key in ("cpu_node", "mem_node", "threads"):
        if not isinstance(row.get(key), int) or isinstance(row.get(key), bool):
            raise ValueError(f"matrix[{index}].{key} is not an integer")
    placed = _optional_float(row.get("placed_fraction"))
    if placed is None or not 0.0 <= placed <= 1.0:
        raise ValueError(f"matrix[{index}].placed_fraction is not a fraction")
    values: List[Optional[float]] = []
    for key in ("read_gbps", "latency_ns"):
        value = row.get(key)
        number = _optional_float(value)
        if value is not None and (number is None or number < 0):
            raise ValueError(f"matrix[{index}].{key} is not a number >= 0")
        values.append(number)
    return Cell(row["cpu_node"], row["mem_node"], values[0], values[1], placed, row["threads"])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _numbers(data: Dict[str, Any], keys: Sequence[str]) -> bool:
    return all(_is_number(data.get(k)) for k in keys)


def _number(data: Dict[str, Any], key: str) -> float:
    value = _optional_float(data.get(key))
    if value is None:
        raise ValueError(f"{key} is not a number")
    return value


def _int(data: Dict[str, Any], key: str, default: Optional[int] = None) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} is not an integer")
    return int(value)


def _optional_float(value: Any) -> Optional[float]:
    return float(value) if _is_number(value) else None


def to_text(result: ProbeResult) -> str:
    """The matrices as Intel MLC prints them: rows are CPU nodes, columns memory nodes."""
    rows, cols = result.cpu_nodes, result.mem_nodes
    unverified = [c for c in result.cells if not c.verified]
    threads = sorted({c.threads for c in result.cells})
    lines = [
        f"Measured on {result.cpu_model or 'an unknown CPU'}, kernel {result.kernel or 'unknown'}.",
        "",
        "Read bandwidth (GB/s): "
        + (f"{threads[0]} thread(s)" if len(threads) == 1 else "every CPU")
        + " of the CPU node reading memory bound to each node",
    ]
    lines += _matrix(result, rows, cols, lambda c: c.read_gbps, "{:.1f}")
    lines += ["", "Idle latency (ns per dependent load, one thread)"]
    lines += _matrix(result, rows, cols, lambda c: c.latency_ns, "{:.1f}")
    if result.chase_overhead_ns is not None:
        lines.append(
            f"Net of the chase's own work per load ({result.chase_overhead_ns:.1f} ns, "
            "timed with the chain in L1)."
        )
    if unverified:
        lines.append("")
        for c in unverified:
            lines.append(
                f"* cpu node {c.cpu_node} -> memory node {c.mem_node}: placement unverified, "
                f"only {c.placed_fraction:.1%} of the pages were on node {c.mem_node}"
            )
    if result.gpu_status == "measured" and result.gpu:
        lines += ["", f"Pinned host-to-device copy ({result.gpu_reason}), GB/s"]
        for g in result.gpu:
            lines.append(f"  from node {g.cpu_node}: {g.h2d_gbps:.1f}"
                         + ("" if g.placed_fraction >= UNVERIFIED_BELOW else
                            f" (unverified: {g.placed_fraction:.0%} of the pages on the node)"))
    else:
        lines += ["", f"GPU copy bandwidth: skipped ({result.gpu_reason or 'not asked'})"]
    for note in result.notes:
        lines.append(f"Note: {note}")
    return "\n".join(lines) + "\n"


def _matrix(result: ProbeResult, rows: Sequence[int], cols: Sequence[int], value: Any,
            spec: str) -> List[str]:
    width = 10
    out = ["CPU node " + "".join(f"{'mem ' + str(m):>{width}}" for m in cols)]
    for r in rows:
        text = f"{r:>8} "
        for m in cols:
            cell = result.cell(r, m)
            figure = value(cell) if cell else None
            shown = "-" if figure is None else spec.format(figure)
            if cell is not None and not cell.verified and figure is not None:
                shown += "*"
            text += f"{shown:>{width}}"
        out.append(text)
    return out


def stale_reason(result: ProbeResult, cpu_model: Optional[str], kernel: Optional[str]) -> Optional[str]:
    """Why a saved result does not describe this host any more; None when it still does."""
    if cpu_model and result.cpu_model and cpu_model.strip() != result.cpu_model.strip():
        return f"it was measured on another CPU ({result.cpu_model})"
    if kernel and result.kernel and kernel.strip() != result.kernel.strip():
        return f"it was measured under another kernel ({result.kernel})"
    return None


def remote_reads(result: ProbeResult, node: int) -> Optional[Remote]:
    """Local versus remote read bandwidth of ``node``'s CPUs, and what binding would gain.

    Without a binding, first-touch spreads a shared arena over the N CPU nodes whose
    threads touch it, so about (N-1)/N of any thread's reads are remote. A memory-bound
    pool bound to one node reads everything locally: its read time falls from
    ``1/N + (N-1)/N x ratio`` to 1 (the high end); the low end assumes half of the time
    goes to memory reads (Amdahl). None when the matrix lacks the cells.
    """
    local = result.cell(node, node)
    others = [result.cell(node, n) for n in result.cpu_nodes if n != node]
    if local is None or local.read_gbps is None or not others:
        return None
    remote = [c for c in others if c is not None and c.read_gbps is not None]
    if len(remote) != len(others):
        return None
    remote_gbps = sum(c.read_gbps or 0.0 for c in remote) / len(remote)
    nodes = len(result.cpu_nodes)
    ratio = local.read_gbps / remote_gbps
    spread = 1.0 / nodes + (nodes - 1) / nodes * ratio  # unbound read time / bound read time
    low = 1.0 / ((1.0 - MEMORY_BOUND_LOW) + MEMORY_BOUND_LOW / spread) - 1.0
    return Remote(node, local.read_gbps, remote_gbps, nodes, low, spread - 1.0,
                  all(c.verified for c in [local, *remote]))
