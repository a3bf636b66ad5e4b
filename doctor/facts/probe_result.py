"""The probe's result as data, and as the ``strata-doctor/probe/1`` JSON document.

``strata-doctor probe`` writes the document; ``check`` reads it back from a saved file,
which a user or a captured host provides: :func:`from_json` refuses, naming the field,
anything that is not such a document (docs/json-schema.md). No ctypes and no threads
here, so reading it never loads the measuring code.
"""

import json
import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

SCHEMA = "strata-doctor/probe/1"
UNVERIFIED_BELOW = 0.99
"""A cell whose placed fraction is below this is marked unverified."""
MAX_CELLS = 4096
"""The most cells a saved matrix may hold or span (64 x 64 nodes): every reader looks cells
up by pair, so a hand-made matrix of 100 x 100 nodes would cost minutes, not a finding."""


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
    data = _document(text)
    cells = _cells(data.get("matrix"))
    found = data.get("gpu")
    gpu: Dict[str, Any] = found if isinstance(found, dict) else {}
    copies = _copies(gpu.get("copies"))
    return ProbeResult(
        cells=cells,
        size_bytes=_int(data, "size_bytes"),
        seconds=float(_number(data, "seconds")),
        cpu_model=_text(data, "cpu_model"),
        kernel=_text(data, "kernel"),
        latency_bytes=_int(data, "latency_bytes", 0),
        llc_bytes=_llc(data.get("llc_bytes")),
        chase_overhead_ns=_optional_float(data.get("chase_overhead_ns")),
        created=_text(data, "created"),
        gpu_status=_text(gpu, "status", "skipped"),
        gpu_reason=_text(gpu, "reason"),
        gpu=copies,
        notes=_strings(data.get("notes")),
    )


def _document(text: str) -> Dict[str, Any]:
    """The JSON object of a ``strata-doctor/probe/1`` document; ValueError otherwise."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    except RecursionError:  # "[[[[..." thousands deep: the decoder recurses per level
        raise ValueError("nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema {data.get('schema')!r}, expected {SCHEMA!r}")
    return data


def _cells(rows: Any) -> Tuple[Cell, ...]:
    """The matrix's cells, in order; ValueError names the first bad one."""
    if not isinstance(rows, list) or not rows:
        raise ValueError("no matrix")
    if len(rows) > MAX_CELLS:
        raise ValueError(f"matrix has {len(rows):,} cells, more than {MAX_CELLS:,}")
    cells = tuple(_cell(row, i) for i, row in enumerate(rows))
    cpus, mems = len({c.cpu_node for c in cells}), len({c.mem_node for c in cells})
    if cpus * mems > MAX_CELLS:
        raise ValueError(f"matrix spans {cpus:,} CPU nodes x {mems:,} memory nodes, "
                         f"more than {MAX_CELLS:,} cells")
    return cells


def _cell(row: Any, index: int) -> Cell:
    """One row of the matrix; ValueError names the field that is wrong."""
    if not isinstance(row, dict):
        raise ValueError(f"matrix[{index}] is not an object")
    for key in ("cpu_node", "mem_node", "threads"):
        if not _is_int(row.get(key)):
            raise ValueError(f"matrix[{index}].{key} is not an integer")
    placed = _optional_float(row.get("placed_fraction"))
    if placed is None or not 0.0 <= placed <= 1.0:
        raise ValueError(f"matrix[{index}].placed_fraction is not a fraction")
    read = _figure(row, "read_gbps", index)
    latency = _figure(row, "latency_ns", index)
    return Cell(row["cpu_node"], row["mem_node"], read, latency, placed, row["threads"])


def _figure(row: Dict[str, Any], key: str, index: int) -> Optional[float]:
    """A measured figure of a row: None when absent; ValueError unless a finite number >= 0
    (a read of 0 is kept: saved_probe.remote_reads takes it for no measurement)."""
    value = row.get(key)
    number = _optional_float(value)
    if value is not None and (number is None or number < 0):
        raise ValueError(f"matrix[{index}].{key} is not a number >= 0")
    return number


def _copies(entries: Any) -> Tuple[GpuCopy, ...]:
    """The GPU copy entries (absent: none); ValueError names the first bad one. An entry
    without its bandwidth is left out, as the probe writes none such."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ValueError("gpu.copies is not a list")
    return tuple(_copy(entry, i) for i, entry in enumerate(entries)
                 if isinstance(entry, dict) and entry.get("h2d_gbps") is not None)


def _copy(entry: Dict[str, Any], index: int) -> GpuCopy:
    """One GPU copy entry: an integer node and a finite bandwidth."""
    if not _is_int(entry.get("cpu_node")):
        raise ValueError(f"gpu.copies[{index}].cpu_node is not an integer")
    if not _is_number(entry["h2d_gbps"]):
        raise ValueError(f"gpu.copies[{index}].h2d_gbps is not a number")
    return GpuCopy(entry["cpu_node"], float(entry["h2d_gbps"]),
                   _optional_float(entry.get("placed_fraction")) or 0.0)


def _text(data: Dict[str, Any], key: str, default: str = "") -> str:
    """A string field; ``default`` when absent or empty; ValueError when not a string."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} is not a string")
    return value or default


def _llc(value: Any) -> Optional[int]:
    """The cache size: an integer or null (``true`` is no size, though Python counts it one)."""
    if value is not None and not _is_int(value):
        raise ValueError("llc_bytes is not an integer or null")
    return None if value is None else int(value)


def _strings(values: Any) -> Tuple[str, ...]:
    """The notes: a list of strings (absent: none); a lone string would read as its letters."""
    if values is None:
        return ()
    if not isinstance(values, list) or not all(isinstance(n, str) for n in values):
        raise ValueError("notes is not a list of strings")
    return tuple(values)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite number: JSON's ``Infinity``, ``NaN`` and ``1e999`` are no measurement."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer of 400 digits is no float either
        return False


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
