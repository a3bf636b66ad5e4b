"""rocm-smi's view of AMD GPUs, captured as commands (docs/capture-layout.md): each GPU's
product name and PCI bus (``--showproductname --showbus``) and its NUMA node and links
(``--showtopo``), with the one parser of each.

rocm-smi prints one ``GPU[i]<TAB><TAB>: Field: <TABS>value`` line per field and GPU, between
banner lines of ``=``; the field names' case changed between ROCm 5 (``Card series``) and 6
(``Card Series``), so they are matched without it.
"""

import re
from typing import Dict, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import parse_int
from strata_doctor.root import Command, Root

ROCM_SMI_PRODUCT = Command("rocm-smi-showproductname",
                           ("rocm-smi", "--showproductname", "--showbus"), timeout=10.0)
"""Each GPU's ``Card Series`` (the model), ``Node ID`` (its KFD node) and ``PCI Bus``."""
ROCM_SMI_TOPO = Command("rocm-smi-showtopo", ("rocm-smi", "--showtopo"), timeout=10.0)
"""The GPUs' link types and weights between each other and each GPU's ``Numa Node``."""

# Indices and nodes are small: a run of digits longer than nine is garbage, and bounding it
# keeps int() from refusing a hostile capture's thousands of digits.
_LINE = re.compile(r"^GPU\[([0-9]{1,9})\]\s*:\s*(.+?):\s*(.*?)\s*$")


class RocmGpu(NamedTuple):
    """What rocm-smi says of one GPU."""

    card: int
    """The ``GPU[i]`` index rocm-smi numbers it by."""
    series: Optional[str] = None
    """``Card Series``: the product name (``AMD Instinct MI210``)."""
    bus: Optional[str] = None
    """``PCI Bus``: the full PCI address, lower case."""
    kfd_node: Optional[int] = None
    """``Node ID``: its node in the KFD topology (ROCm 6)."""
    numa_node: Optional[int] = None
    """``(Topology) Numa Node`` from ``--showtopo``."""


def _fields(text: str) -> Dict[int, Dict[str, str]]:
    """``GPU[i] : Field: value`` lines as {i: {field in lower case: value}}."""
    out: Dict[int, Dict[str, str]] = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            index, field, value = match.groups()
            out.setdefault(int(index), {}).setdefault(field.strip().lower(), value)
    return out


def parse_rocm_product(text: str) -> Tuple[RocmGpu, ...]:
    """``rocm-smi --showproductname --showbus`` into one row per GPU; a GPU with neither a
    series nor a bus is left out (a ``Not supported`` line alone)."""
    rows = []
    for index, fields in sorted(_fields(text).items()):
        series = fields.get("card series")
        bus = fields.get("pci bus")
        if series in (None, "", "N/A") and bus is None:
            continue
        rows.append(RocmGpu(index, series or None, bus.lower() if bus else None,
                            parse_int(fields.get("node id"))))
    return tuple(rows)


def parse_rocm_topo_nodes(text: str) -> Dict[int, int]:
    """``rocm-smi --showtopo``'s ``(Topology) Numa Node`` of each GPU index; -1 (no
    firmware locality) is kept as the kernel wrote it."""
    nodes: Dict[int, int] = {}
    for index, fields in _fields(text).items():
        value = fields.get("(topology) numa node")
        if value is not None and re.fullmatch(r"-?[0-9]{1,9}", value):
            nodes[index] = int(value)
    return nodes


def read_rocm_gpus(root: Root) -> Tuple[RocmGpu, ...]:
    """rocm-smi's GPUs, with ``--showtopo``'s nodes when that was captured too; none when
    rocm-smi is not installed or failed."""
    product = root.run(ROCM_SMI_PRODUCT)
    if not product.ok:
        return ()
    topo = root.run(ROCM_SMI_TOPO)
    nodes = parse_rocm_topo_nodes(topo.stdout) if topo.ok else {}
    return tuple(g._replace(numa_node=nodes.get(g.card)) for g in parse_rocm_product(product.stdout))
