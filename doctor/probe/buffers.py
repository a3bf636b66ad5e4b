"""The probe's buffers: mappings bound to one node, and where their pages really are.

Every buffer a run takes is held here until it is freed, so the run can give all of them
back whatever happens (an error, Ctrl-C).
"""

from __future__ import annotations

from typing import Dict

from strata_doctor.probe.system import System


class Buffers:
    """The mappings a run holds, each bound to one node."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.maps: Dict[int, int] = {}
        """Live mappings: address -> size. Emptied by :meth:`free_all`."""

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
