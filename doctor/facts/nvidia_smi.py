"""nvidia-smi's view of the GPUs: the query of each GPU's model, memory, driver and PCIe
link, and ``nvidia-smi -q``'s persistence mode, captured as commands
(docs/capture-layout.md), with the one parser of each.
"""

import re
from typing import Dict, List, NamedTuple, Optional

from strata_doctor.facts.parse import parse_int
from strata_doctor.root import Command, Root

NVIDIA_SMI_QUERY = Command(
    "nvidia-smi-query",
    ("nvidia-smi",
     "--query-gpu=pci.bus_id,name,memory.total,driver_version,uuid,serial,"
     "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
     "--format=csv,noheader"),
    timeout=10.0,
)
"""The GPU query (docs/report.md lists its fields): parsed by :func:`parse_smi_query` only,
read once per host as ``HostContext.smi_query``; the last four columns are the PCIe link
as the driver sees it."""


NVIDIA_SMI_Q = Command("nvidia-smi-q", ("nvidia-smi", "-q"), timeout=10.0)
"""``nvidia-smi -q``: every GPU's settings, persistence mode among them."""


class SmiGpuState(NamedTuple):
    """What nvidia-smi says of one GPU: its row of :data:`NVIDIA_SMI_QUERY` (model, memory,
    driver, the PCIe link's generation and width now and at most) and its persistence mode."""

    gen_current: Optional[int] = None
    """``pcie.link.gen.current``."""
    gen_max: Optional[int] = None
    """``pcie.link.gen.max``."""
    width_current: Optional[int] = None
    """``pcie.link.width.current``."""
    width_max: Optional[int] = None
    """``pcie.link.width.max``."""
    persistence: Optional[bool] = None
    """``Persistence Mode`` from ``nvidia-smi -q``; None when not captured."""
    name: Optional[str] = None
    """``name``: the marketing name (``NVIDIA GeForce GTX 1080 Ti``)."""
    memory: Optional[str] = None
    """``memory.total`` as printed (``11264 MiB``)."""
    driver: Optional[str] = None
    """``driver_version``."""
    uuid: Optional[str] = None
    """``uuid`` as printed (``GPU-...``): the report only redacts it."""
    serial: Optional[str] = None
    """``serial`` (``[N/A]`` on GeForce boards): the report only redacts it."""

    @property
    def link_known(self) -> bool:
        """Whether the query gave the link's generation and width."""
        return None not in (self.gen_current, self.gen_max, self.width_current, self.width_max)


def smi_address(text: str) -> Optional[str]:
    """``00000000:84:00.0`` (nvidia-smi's 8-digit domain) -> ``0000:84:00.0``."""
    match = re.match(r"^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", text.strip())
    if not match:
        return None
    return f"{int(match.group(1), 16):04x}:{match.group(2).lower()}"


def parse_smi_query(text: str) -> Dict[str, SmiGpuState]:
    """:data:`NVIDIA_SMI_QUERY`'s rows by PCI address: the one parser of that output.

    A row with fewer columns (a capture of an older, shorter query) gives what it has; the
    link needs all ten. Lines that name no PCI address (a header, garbage) are skipped.
    """
    rows: Dict[str, SmiGpuState] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        address = smi_address(fields[0]) if len(fields) >= 2 else None
        if address is None:
            continue
        rows[address] = _smi_row(fields)
    return rows


def _smi_row(fields: List[str]) -> SmiGpuState:
    """One row's columns after the address; an empty column is None."""
    name, memory, driver, uuid, serial = (fields[1:6] + [""] * 5)[:5]
    gen_now, gen_max, width_now, width_max = (
        (parse_int(f) for f in fields[-4:]) if len(fields) >= 10 else (None, None, None, None))
    return SmiGpuState(
        gen_now, gen_max, width_now, width_max, name=name or None, memory=memory or None,
        driver=driver or None, uuid=uuid or None, serial=serial or None,
    )


def parse_smi_persistence(text: str) -> Dict[str, bool]:
    """``Persistence Mode`` of each GPU section (``GPU 00000000:41:00.0``) of ``nvidia-smi -q``."""
    found: Dict[str, bool] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            current = smi_address(line[4:])
            continue
        key, _, value = line.partition(":")
        if current and key.strip() == "Persistence Mode" and value.strip() in ("Enabled", "Disabled"):
            found[current] = value.strip() == "Enabled"
    return found


def read_smi_query(root: Root) -> Dict[str, SmiGpuState]:
    """:data:`NVIDIA_SMI_QUERY`'s row of each GPU, by PCI address (run live, replayed under
    a captured root); empty without nvidia-smi."""
    query = root.run(NVIDIA_SMI_QUERY)
    return parse_smi_query(query.stdout) if query.ok else {}


def read_smi_states(root: Root, query: Dict[str, SmiGpuState]) -> Dict[str, SmiGpuState]:
    """Each GPU's query row (:func:`read_smi_query`'s, read once by the caller) with its
    persistence mode from ``nvidia-smi -q``, by PCI address; empty without nvidia-smi."""
    detail = root.run(NVIDIA_SMI_Q)
    states = dict(query)
    for address, enabled in (parse_smi_persistence(detail.stdout) if detail.ok else {}).items():
        states[address] = states.get(address, SmiGpuState())._replace(persistence=enabled)
    return states
