"""The host map as a Mermaid ``flowchart`` for Markdown (the report), beside the terminal's
boxes of ``output/map.py``.

Pure: the map in, text out. It keeps to the basic ``flowchart`` subset GitHub and GitLab
render: ``subgraph``, rectangles, ``---``, ``-.->`` and ``==>`` links with quoted labels,
``classDef``.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Sequence, Set, Tuple

from strata_doctor.facts.parse import format_bytes, format_cpulist, format_nodes
from strata_doctor.output.hostmap import HostMap, MapGpu, MapNode
from strata_doctor.output.map import _cores, _count, _roles, _size, to_ascii

ENTITIES = {"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;", ";": "#59;"}
"""Characters of host text that Mermaid would read as syntax, as its entity codes."""
MAX_LINKS = 28  # distance links in the Mermaid: every pair of 8 nodes


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
        label.append("fix: bind to " + format_nodes(plan.nodes))
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
