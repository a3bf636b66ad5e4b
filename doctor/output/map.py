"""Draw a :class:`~strata_doctor.output.hostmap.HostMap` as boxes for the terminal;
``output/map_mermaid.py`` draws it as a Mermaid flowchart for Markdown (the report), and
``output/map_json.py`` gives it as JSON (``strata-doctor/map/v1``).

Pure: the map in, text out. Box drawing characters under a stream that can encode them,
ASCII otherwise (the same stand-ins as check's marks, ``render.ASCII``). Given a width
(a terminal's), every line fits it: the boxes' rows and the engine's lines wrap, and the
distance table is cut into as many column blocks as it takes.
"""

from __future__ import annotations

import textwrap
from typing import Dict, List, NamedTuple, Optional, Sequence, Union

from strata_doctor.facts.parse import format_bytes, format_cpulist, format_nodes
from strata_doctor.output.hostmap import ArenaPlace, HostMap, MapGpu, MapNode
from strata_doctor.output.text import ASCII
from strata_doctor.rules.gpu import NO_GPU

BOX = {"h": "─", "v": "│", "tl": "┌", "tr": "┐", "bl": "└", "br": "┘"}
BOX_ASCII = {"─": "-", "│": "|", "┌": "+", "┐": "+", "└": "+", "┘": "+"}
"""The box drawing characters' ASCII stand-ins, beside :data:`render.ASCII`'s."""
_TO_ASCII = str.maketrans(dict[str, Union[str, int, None]]({**ASCII, **BOX_ASCII}))
GLYPHS = "".join(BOX.values()) + "→"
"""Every symbol the text picture uses: a stream that cannot encode them gets ASCII."""
LABEL = 8  # width of the labels inside a node's box ("memory  ")
WRAP = 100  # the engine section's long lines wrap here


# -- text -----------------------------------------------------------------------
class Frame(NamedTuple):
    """How the picture is laid out: the width to fit (None: no limit) and ASCII only."""

    width: Optional[int] = None
    """The terminal's width; None for a pipe or a file."""
    ascii_only: bool = False
    """The stream cannot encode box drawing or the arrows."""

    def wrap(self, text: str, first: str, rest: str, width: Optional[int] = None) -> List[str]:
        """``text`` after ``first`` (further lines after ``rest``), within ``width`` (default:
        the frame's; none: one line), in ASCII when the frame says so."""
        width = width or self.width
        text = to_ascii(text) if self.ascii_only else text
        if width is None:
            return [first + text]
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest,
                             break_on_hyphens=False) or [first.rstrip()]


def to_text(host: HostMap, ascii_only: bool = False, width: Optional[int] = None) -> str:
    """The picture for a terminal: sockets holding their nodes, each node with its CPUs,
    memory, GPUs, the engine now and the plan; then distances, the engine and the fix.
    Every line fits ``width`` when one is given."""
    frame = Frame(width, ascii_only)
    lines = frame.wrap(_headline(host), "", " " * len("host: "))
    boxes = _node_boxes(host, frame)
    if boxes:
        lines.extend(["", *boxes])
    lines.extend(_distance_table(host.nodes, width))
    lines.extend(_engine_lines(host, frame))
    text = "\n".join(lines) + "\n"
    return to_ascii(text) if ascii_only else text


def to_ascii(text: str) -> str:
    """``text`` with every symbol the map or check uses replaced by its ASCII stand-in."""
    return text.translate(_TO_ASCII)


def encodable(encoding: Optional[str]) -> bool:
    """Whether a stream in ``encoding`` can write the text picture's symbols."""
    try:
        GLYPHS.encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _headline(host: HostMap) -> str:
    parts = []
    if host.sockets:
        parts.append(_count(host.sockets, "socket"))
    parts.append(_count(len(host.nodes), "NUMA node") if host.nodes else "no NUMA information")
    parts.append(_count(host.cpus, "CPU"))
    if host.memory_total:
        parts.append(f"{format_bytes(host.memory_total)} RAM")
    parts.append(_gpus(host.gpus) if host.pci_functions else "GPUs unknown (no PCI functions in the tree)")
    return "host: " + ", ".join(parts)


def _gpus(gpus: Sequence[MapGpu]) -> str:
    """The GPUs as check counts them: a BMC's or hypervisor's display is no compute GPU."""
    counted = [gpu for gpu in gpus if gpu.may_compute]
    aside = "; ".join(f"{gpu.address} is {gpu.management}" for gpu in gpus if not gpu.may_compute)
    if counted:
        return _count(len(counted), "GPU") + (f" ({aside})" if aside else "")
    return f"no compute GPU ({aside})" if aside else NO_GPU


def _count(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"


def _node_boxes(host: HostMap, frame: Frame) -> List[str]:
    """Sockets holding their nodes, then nodes of no socket, then GPUs of no known node;
    every node box as wide as the widest, so that the picture lines up, and no wider than
    the frame (a box inside a socket's is 4 columns narrower)."""
    inner = _inner_width(host, frame)
    contents = {node.id: _fit(_node_lines(host, node), frame, inner) for node in host.nodes}
    lost = [_fit(_gpu_lines(gpu), frame, inner) for gpu in _lost_gpus(host)]
    width = max([len(line) for lines in [*contents.values(), *lost] for line in lines], default=0)
    lines = _socket_boxes(host, contents, width)
    for node in host.nodes:
        if node.socket is None:
            title = f"node {node.id}" + (" (memory only)" if node.memory_only else "")
            lines.extend(_box(title, contents[node.id], width + 4))
    for gpu_lines in lost:
        lines.extend(_box("GPU on no known node", gpu_lines, width + 4))
    return lines


def _inner_width(host: HostMap, frame: Frame) -> Optional[int]:
    """How wide a node box's rows may be: the frame less the node's box, and the socket's."""
    if frame.width is None:
        return None
    return frame.width - (8 if any(n.socket is not None for n in host.nodes) else 4)


def _fit(rows: List[str], frame: Frame, width: Optional[int]) -> List[str]:
    """A box's rows wrapped to ``width``, each further line under its row's value."""
    return [line for row in rows for line in frame.wrap(row, "", " " * LABEL, width)]


def _lost_gpus(host: HostMap) -> List[MapGpu]:
    """GPUs on no node of the map: their node is unknown, or not among the host's nodes."""
    placed = {node.id for node in host.nodes}
    return [gpu for gpu in host.gpus if gpu.node is None or gpu.node not in placed]


def _socket_boxes(host: HostMap, contents: Dict[int, List[str]], width: int) -> List[str]:
    """Each socket's box around the boxes of its nodes."""
    lines: List[str] = []
    for socket in sorted({n.socket for n in host.nodes if n.socket is not None}):
        inner: List[str] = []
        for node in host.nodes:
            if node.socket == socket:
                inner.extend(_box(f"node {node.id}", contents[node.id], width))
        lines.extend(_box(f"socket {socket}", inner))
    return lines


def _node_lines(host: HostMap, node: MapNode) -> List[str]:
    cpus = f"{format_cpulist(node.cpus)} ({_cores(node)})" if node.cpus else "none"
    memory = (f"{format_bytes(node.memory_total)}, {_size(node.memory_free)} free"
              if node.memory_total is not None else "unknown (no meminfo)")
    lines = [_row("memory", memory)] if node.memory_only else [_row("CPUs", cpus), _row("memory", memory)]
    for gpu in host.gpus:
        if gpu.node == node.id:
            lines.extend(_gpu_lines(gpu))
    if node.engine_bytes is not None and (node.engine_cpus or node.engine_bytes):
        lines.append(_row("engine", f"now: {_engine_cpus(node)}, {format_bytes(node.engine_bytes)}"))
    planned = _planned_here(host, node)
    if planned:
        lines.append(_row("plan", " and ".join(planned)))
    return lines


def _engine_cpus(node: MapNode) -> str:
    """Which of the node's CPUs the engine may run on now, in words."""
    if node.engine_cpus == node.cpus and node.cpus:
        return "all its CPUs"
    return _count(len(node.engine_cpus), "CPU") if node.engine_cpus else "none of its CPUs"


def _planned_here(host: HostMap, node: MapNode) -> List[str]:
    """What the plan puts on the node: the arena, the expert pool, both or neither."""
    planned = []
    if node.arena:
        planned.append(f"the arena ({host.plan.policy})")
    if node.pool:
        planned.append("the expert pool on its CPUs")
    return planned


def _cores(node: MapNode) -> str:
    cores = "cores unknown" if node.cores is None else _count(node.cores, "core")
    return f"{cores}, {_count(len(node.cpus), 'thread')}"


def _roles(gpu: MapGpu) -> List[str]:
    roles = [role for role, on in (("compute GPU", gpu.compute), ("boot display", gpu.boot_display)) if on]
    return roles + ([f"no compute GPU: {gpu.management}"] if gpu.management else [])


def _gpu_lines(gpu: MapGpu) -> List[str]:
    lines = [_row("GPU", f"{gpu.address} {gpu.model}")]
    detail = ([f"PCIe {gpu.link}"] if gpu.link else ["PCIe link unknown"]) + _roles(gpu)
    lines.append(_row("", ", ".join(detail)))
    return lines


def _row(label: str, value: str) -> str:
    return f"{label.ljust(LABEL)}{value}"


def _box(title: str, content: Sequence[str], width: int = 0) -> List[str]:
    """A box around ``content`` with ``title`` in its top edge, at least ``width`` wide inside."""
    width = max([width, len(title) + 3] + [len(line) for line in content])
    top = BOX["tl"] + BOX["h"] + f" {title} " + BOX["h"] * (width - len(title) - 1) + BOX["tr"]
    body = [f"{BOX['v']} {line.ljust(width)} {BOX['v']}" for line in content]
    bottom = BOX["bl"] + BOX["h"] * (width + 2) + BOX["br"]
    return [top, *body, bottom]


def _distance_table(nodes: Sequence[MapNode], width: Optional[int] = None) -> List[str]:
    """The distances, one row per node; in blocks of as many columns as ``width`` holds."""
    if len(nodes) < 2:
        return []
    first = len("distances") + 1
    column = max(len(f"node{n.id}") for n in nodes) + 2
    per_block = len(nodes) if width is None else max(1, (width - first) // column)
    lines = []
    for start in range(0, len(nodes), per_block):
        block = nodes[start:start + per_block]
        ids = [n.id for n in block]
        lines.extend(["", "distances".ljust(first) + "".join(f"node{i}".rjust(column) for i in ids)])
        for n in nodes:
            row = dict(n.distances)
            cells = "".join(_distance(row.get(i)).rjust(column) for i in ids)
            lines.append(f"node{n.id}".ljust(first) + cells)
    return lines


def _distance(value: Optional[int]) -> str:
    return "?" if value is None else str(value)


def _engine_lines(host: HostMap, frame: Frame) -> List[str]:
    engine, plan = host.engine, host.plan
    lines = ["", *frame.wrap(f"engine  {engine.unit}, {engine.state}", "", " " * LABEL)]
    if engine.source != "none":
        cpus = format_cpulist(engine.cpus) if engine.cpus else "any (no limit)"
        lines.append(_item(frame, "now", f"{engine.source}: CPUs {cpus}, memory {engine.memory}"))
    if plan.binds:
        lines.append(_item(frame, "plan", f"{' '.join(plan.numactl)}: CPUs {plan.cpulist}, memory "
                                          f"{plan.policy} on {format_nodes(plan.nodes)}"))
    else:
        lines.append(_item(frame, "plan", "no binding"))
    lines.extend(_item(frame, "", f"- {reason}") for reason in plan.reasons)
    lines.append(_item(frame, "arena", _arena_text(host.arena, host.arena_hint)))
    lines.append(_item(frame, "fix", host.fix))
    width = max((len(c.what) for c in host.changes), default=0) + 2
    lines.extend(_item(frame, "", f"{c.what.ljust(width)}{c.now} → {c.after}") for c in host.changes)
    return lines


def _arena_text(arena: Optional[ArenaPlace], hint: str) -> str:
    """Where the arena would sit and whether it fits there, in one line."""
    if arena is None:
        return f"size not configured ({hint})"
    where = format_nodes(arena.nodes) if arena.nodes != "all" else "the host's memory"
    if arena.total_bytes is None:
        return (f"{format_bytes(arena.arena_bytes)} + K/V {format_bytes(arena.kv_bytes)}"
                f" + headroom {format_bytes(arena.headroom_bytes)} on {where}: its size is unknown"
                " (no MemTotal in the tree; see arena-fit)")
    fits = ("does not fit: " + format_bytes(-arena.spare_bytes) + " short"
            if arena.spare_bytes is not None and arena.spare_bytes < 0
            else f"{_size(arena.spare_bytes)} to spare")
    return (f"{format_bytes(arena.arena_bytes)} + K/V {format_bytes(arena.kv_bytes)}"
            f" + headroom {format_bytes(arena.headroom_bytes)} on {where} "
            f"({_size(arena.total_bytes)}): {fits}")


def _item(frame: Frame, label: str, text: str) -> str:
    indent = " " * 2 + label.ljust(LABEL - 1) + " "
    wrapped = frame.wrap(text, indent, " " * (len(indent) + 2), min(frame.width or WRAP, WRAP))
    return "\n".join(wrapped)


def _size(value: Optional[int]) -> str:
    return format_bytes(value) if value is not None else "unknown"
