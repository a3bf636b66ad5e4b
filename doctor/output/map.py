"""Draw a :class:`~strata_doctor.output.hostmap.HostMap`: boxes for the terminal, a Mermaid
flowchart for Markdown (the report); ``output/map_json.py`` gives it as JSON (``strata-doctor/map/v1``).

Pure: the map in, text out. Box drawing characters under a stream that can encode them,
ASCII otherwise (the same stand-ins as check's marks, ``render.ASCII``). The Mermaid keeps
to the basic ``flowchart`` subset GitHub and GitLab render: ``subgraph``, rectangles,
``---``, ``-.->`` and ``==>`` links with quoted labels, ``classDef``.
"""

from __future__ import annotations

import re
import textwrap
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from strata_doctor.facts.parse import format_bytes, format_cpulist
from strata_doctor.output.hostmap import ArenaPlace, HostMap, MapGpu, MapNode
from strata_doctor.output.text import ASCII

BOX = {"h": "─", "v": "│", "tl": "┌", "tr": "┐", "bl": "└", "br": "┘"}
BOX_ASCII = {"─": "-", "│": "|", "┌": "+", "┐": "+", "└": "+", "┘": "+"}
"""The box drawing characters' ASCII stand-ins, beside :data:`render.ASCII`'s."""
_TO_ASCII = str.maketrans(dict[str, Union[str, int, None]]({**ASCII, **BOX_ASCII}))
GLYPHS = "".join(BOX.values()) + "→"
"""Every symbol the text picture uses: a stream that cannot encode them gets ASCII."""
LABEL = 8  # width of the labels inside a node's box ("memory  ")
WRAP = 100  # the engine section's long lines wrap here
ENTITIES = {"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;", ";": "#59;"}
"""Characters of host text that Mermaid would read as syntax, as its entity codes."""
MAX_LINKS = 28  # distance links in the Mermaid: every pair of 8 nodes


# -- text -----------------------------------------------------------------------
def to_text(host: HostMap, ascii_only: bool = False) -> str:
    """The picture for a terminal: sockets holding their nodes, each node with its CPUs,
    memory, GPUs, the engine now and the plan; then distances, the engine and the fix."""
    lines = [_headline(host)]
    boxes = _node_boxes(host)
    if boxes:
        lines.extend(["", *boxes])
    lines.extend(_distance_table(host.nodes))
    lines.extend(_engine_lines(host))
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
    return f"no compute GPU ({aside})" if aside else "no GPU"


def _count(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"


def _node_boxes(host: HostMap) -> List[str]:
    """Sockets holding their nodes, then nodes of no socket, then GPUs of no known node;
    every node box as wide as the widest, so that the picture lines up."""
    contents = {node.id: _node_lines(host, node) for node in host.nodes}
    lost = [_gpu_lines(gpu) for gpu in _lost_gpus(host)]
    width = max([len(line) for lines in [*contents.values(), *lost] for line in lines], default=0)
    lines = _socket_boxes(host, contents, width)
    for node in host.nodes:
        if node.socket is None:
            title = f"node {node.id}" + (" (memory only)" if node.memory_only else "")
            lines.extend(_box(title, contents[node.id], width + 4))
    for gpu_lines in lost:
        lines.extend(_box("GPU on no known node", gpu_lines, width + 4))
    return lines


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


def _distance_table(nodes: Sequence[MapNode]) -> List[str]:
    if len(nodes) < 2:
        return []
    names = [f"node{n.id}" for n in nodes]
    first = len("distances") + 1
    width = max(len(name) for name in names) + 2
    head = "distances".ljust(first) + "".join(name.rjust(width) for name in names)
    rows = [
        f"node{n.id}".ljust(first) + "".join(("?" if d is None else str(d)).rjust(width)
                                             for _, d in n.distances)
        for n in nodes
    ]
    return ["", head, *rows]


def _engine_lines(host: HostMap) -> List[str]:
    engine, plan = host.engine, host.plan
    lines = ["", f"engine  {engine.unit}, {engine.state}"]
    if engine.source != "none":
        cpus = format_cpulist(engine.cpus) if engine.cpus else "any (no limit)"
        lines.append(_item("now", f"{engine.source}: CPUs {cpus}, memory {engine.memory}"))
    if plan.binds:
        nodes = ",".join(str(n) for n in plan.nodes)
        lines.append(_item("plan", f"{' '.join(plan.numactl)}: CPUs {plan.cpulist}, memory "
                                   f"{plan.policy} on node(s) {nodes}"))
    else:
        lines.append(_item("plan", "no binding"))
    lines.extend(_item("", f"- {reason}") for reason in plan.reasons)
    lines.append(_item("arena", _arena_text(host.arena, host.arena_hint)))
    lines.append(_item("fix", host.fix))
    width = max((len(c.what) for c in host.changes), default=0) + 2
    lines.extend(_item("", f"{c.what.ljust(width)}{c.now} → {c.after}") for c in host.changes)
    return lines


def _arena_text(arena: Optional[ArenaPlace], hint: str) -> str:
    """Where the arena would sit and whether it fits there, in one line."""
    if arena is None:
        return f"size not configured ({hint})"
    where = f"node(s) {arena.nodes}" if arena.nodes != "all" else "the host's memory"
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


def _item(label: str, text: str) -> str:
    indent = " " * 2 + label.ljust(LABEL - 1) + " "
    wrapped = textwrap.wrap(text, WRAP, initial_indent=indent, subsequent_indent=" " * (len(indent) + 2),
                            break_on_hyphens=False, break_long_words=False)
    return "\n".join(wrapped) if wrapped else indent.rstrip()


def _size(value: Optional[int]) -> str:
    return format_bytes(value) if value is not None else "unknown"


# -- Mermaid --------------------------------------------------------------------
def to_mermaid(host: HostMap) -> str:
    """A Mermaid ``flowchart`` of the same picture, without the fence."""
    ids = {n.id for n in host.nodes}
    out = ["flowchart TB", *_mermaid_nodes(host), *_mermaid_gpus(host, ids)]
    out.extend(f'  node{a} ---|"{_escape(text)}"| node{b}' for a, b, text in _distance_links(host))
    out.extend(_mermaid_engine(host, ids))
    out.extend(_mermaid_classes(host, ids))
    return "\n".join(out) + "\n"


def _mermaid_nodes(host: HostMap) -> List[str]:
    """Nodes inside their socket's subgraph, then nodes of no socket."""
    out = []
    for socket in sorted({n.socket for n in host.nodes if n.socket is not None}):
        out.append(f'  subgraph socket{socket}["socket {socket}"]')
        out.extend(f"    {_mermaid_node(host, n)}" for n in host.nodes if n.socket == socket)
        out.append("  end")
    out.extend(f"  {_mermaid_node(host, n)}" for n in host.nodes if n.socket is None)
    return out


def _mermaid_gpus(host: HostMap, ids: Set[int]) -> List[str]:
    """Every GPU's box, then its link to the node it is on."""
    out = []
    for gpu in host.gpus:
        label = [f"GPU {gpu.address}", gpu.model, f"PCIe {gpu.link}" if gpu.link else "PCIe link unknown"]
        out.append(f"  {gpu_id(gpu)}{_label(label + _roles(gpu))}")
    out.extend(f"  {gpu_id(gpu)} --- node{gpu.node}" for gpu in host.gpus if gpu.node in ids)
    return out


def _mermaid_engine(host: HostMap, ids: Set[int]) -> List[str]:
    """The engine's box, where it runs now (dotted) and where the plan puts it (thick)."""
    engine, plan = host.engine, host.plan
    label = [engine.unit, engine.state]
    if host.changes:
        label.append("fix: bind to node(s) " + ",".join(str(n) for n in plan.nodes))
    out = [f"  engine{_label(label)}"]
    for node in host.nodes:
        if node.engine_bytes is not None and (node.engine_cpus or node.engine_bytes):
            now = f"now: {_count(len(node.engine_cpus), 'CPU')}, {format_bytes(node.engine_bytes)}"
            out.append(f'  engine -.->|"{_escape(now)}"| node{node.id}')
    if plan.binds:
        text = _escape("plan: " + " ".join(plan.numactl))
        out.extend(f'  engine ==>|"{text}"| node{n}' for n in _planned_nodes(host, ids))
    return out


def _planned_nodes(host: HostMap, ids: Set[int]) -> List[int]:
    return [n for n in sorted(set(host.plan.nodes) | set(host.plan.cpu_nodes)) if n in ids]


def _mermaid_classes(host: HostMap, ids: Set[int]) -> List[str]:
    """Thick borders on the planned nodes and on the compute GPU."""
    out = []
    planned = [f"node{n}" for n in _planned_nodes(host, ids)]
    compute = [gpu_id(g) for g in host.gpus if g.compute]
    if planned:
        out += ["  classDef planned stroke-width:3px", f"  class {','.join(planned)} planned"]
    if compute:
        out += ["  classDef compute stroke-width:3px", f"  class {','.join(compute)} compute"]
    return out


def _mermaid_node(host: HostMap, node: MapNode) -> str:
    label = [f"node {node.id}" + (" (memory only)" if node.memory_only else "")]
    if node.cpus:
        label.append(f"CPUs {format_cpulist(node.cpus)}")
        label.append(_cores(node))
    label.append(f"{format_bytes(node.memory_total)}, {_size(node.memory_free)} free"
                 if node.memory_total is not None else "memory unknown")
    planned = [what for what, on in (("arena", node.arena), ("expert pool", node.pool)) if on]
    if planned:
        label.append("plan: " + " and ".join(planned))
    return f"node{node.id}{_label(label)}"


def gpu_id(gpu: MapGpu) -> str:
    """A Mermaid node id for a GPU: letters, digits and underscores only."""
    return "gpu_" + re.sub(r"[^0-9A-Za-z]", "_", gpu.address)


def _label(lines: Iterable[str]) -> str:
    return '["' + "<br/>".join(_escape(line) for line in lines) + '"]'


def _escape(text: str) -> str:
    """Text safe inside a quoted Mermaid label: :data:`ENTITIES` and anything beyond ASCII
    as entity codes (``#quot;``, ``#233;``)."""
    text = to_ascii(" ".join(text.split()))
    return "".join(ENTITIES.get(char, char) if char.isascii() else f"#{ord(char)};" for char in text)


def _distance_links(host: HostMap) -> List[Tuple[int, int, str]]:
    """Every pair of nodes, up to :data:`MAX_LINKS` (Mermaid refuses a diagram of more than
    500 links); beyond that only the pairs that touch the planned nodes or the compute
    GPU's node, the ones that matter to the engine (the text and JSON keep every one)."""
    pairs = _distance_pairs(host.nodes)
    if len(pairs) <= MAX_LINKS:
        return pairs
    near = set(host.plan.nodes) | set(host.plan.cpu_nodes) | {g.node for g in host.gpus if g.compute}
    pairs = [pair for pair in pairs if pair[0] in near or pair[1] in near]
    return pairs if len(pairs) <= MAX_LINKS else []


def _distance_pairs(nodes: Sequence[MapNode]) -> List[Tuple[int, int, str]]:
    rows = {n.id: dict(n.distances) for n in nodes}
    pairs = []
    for a in nodes:
        for b in nodes:
            if a.id < b.id:
                there, back = rows[a.id].get(b.id), rows[b.id].get(a.id)
                if there is None and back is None:
                    continue
                text = str(there) if there == back else f"{there if there is not None else '?'}/" \
                    f"{back if back is not None else '?'}"
                pairs.append((a.id, b.id, f"distance {text}"))
    return pairs
