"""NUMA topologies for the real-kernel test bed, as data, turned into QEMU arguments.

Each topology says what QEMU is told (nodes, their CPUs and memory, the distance
matrix, where the stand-in GPU sits) so that the tests can compare it with what
``strata-doctor check`` reads back from the guest kernel.

No emulated device carries NVIDIA's vendor id, so a display-class device stands in
for the compute GPU and the tests select it with ``--gpu ADDRESS``.  A ``pxb-pcie``
expander bus carries a ``numa_node`` property, which the guest sees through ACPI
``_PXM`` as the device's ``numa_node``; devices on the main ``pcie.0`` bus show -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

MiB = 1024 * 1024


@dataclass(frozen=True)
class Node:
    """One guest NUMA node: its id, the vCPU ids on it and its RAM in MiB."""

    id: int
    cpus: Tuple[int, ...]
    memory_mib: int


@dataclass(frozen=True)
class Gpu:
    """The display-class PCI function that stands in for the compute GPU.

    ``numa_node`` is the node of the pxb-pcie expander bus it sits behind, or
    ``None`` to put it on the main bus, which carries no NUMA information (the
    guest shows ``numa_node`` -1).  ``address`` is the PCI address the guest
    firmware gives it (the expander's ``bus_nr`` plus one, behind a root port).
    """

    address: str
    qemu_device: str = "bochs-display"
    vendor: str = "0x1234"
    device: str = "0x1111"
    numa_node: Optional[int] = None
    bus_nr: int = 0x83


@dataclass(frozen=True)
class Topology:
    """A guest machine: nodes, distances, the stand-in GPU and what it models."""

    name: str
    description: str
    nodes: Tuple[Node, ...]
    distances: Dict[Tuple[int, int], int]
    gpu: Gpu
    sockets: int = 2
    boot_display: bool = True
    extra_kernel_args: Tuple[str, ...] = field(default_factory=tuple)

    @property
    def cpu_count(self) -> int:
        return sum(len(n.cpus) for n in self.nodes)

    @property
    def memory_mib(self) -> int:
        return sum(n.memory_mib for n in self.nodes)

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def distance(self, a: int, b: int) -> int:
        """The distance QEMU is told for a -> b (10 locally, symmetric otherwise)."""
        if a == b:
            return 10
        if (a, b) in self.distances:
            return self.distances[(a, b)]
        return self.distances[(b, a)]

    def distance_row(self, a: int) -> Dict[str, int]:
        """Row ``a`` of the matrix in the shape of the check JSON: {"0": 10, "1": 21}."""
        return {str(n.id): self.distance(a, n.id) for n in self.nodes}

    def all_cpus(self) -> List[int]:
        return sorted(c for n in self.nodes for c in n.cpus)

    def qemu_args(self) -> List[str]:
        """The machine part of the QEMU command line (no kernel, initrd or serial)."""
        cores = max(1, self.cpu_count // self.sockets)
        args = [
            "-machine", "q35",
            "-accel", "tcg",
            "-m", f"{self.memory_mib}M",
            "-smp", f"{self.cpu_count},sockets={self.sockets},cores={cores},threads=1",
        ]
        for n in self.nodes:
            args += ["-object", f"memory-backend-ram,id=m{n.id},size={n.memory_mib}M"]
        for n in self.nodes:
            spec = f"node,nodeid={n.id},memdev=m{n.id}"
            for cpu in n.cpus:
                spec += f",cpus={cpu}"
            args += ["-numa", spec]
        ids = [n.id for n in self.nodes]
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                args += ["-numa", f"dist,src={a},dst={b},val={self.distance(a, b)}"]
                args += ["-numa", f"dist,src={b},dst={a},val={self.distance(b, a)}"]
        if self.boot_display:
            # The desktop's display adapter (the seed's GT 710) on the main bus.
            args += ["-device", "VGA,bus=pcie.0,addr=0x2"]
        gpu = self.gpu
        if gpu.numa_node is None:
            bus, slot = gpu.address.split(":")[1:3]
            dev = int(slot.split(".")[0], 16)
            if int(bus, 16) != 0:
                raise ValueError(f"{self.name}: a GPU without a node must sit on bus 00")
            args += ["-device", f"{gpu.qemu_device},bus=pcie.0,addr={dev:#x}"]
        else:
            args += [
                "-device",
                f"pxb-pcie,id=pxb{gpu.numa_node},bus_nr={gpu.bus_nr},"
                f"numa_node={gpu.numa_node},bus=pcie.0,addr=0x8",
                "-device", f"pcie-root-port,id=rp{gpu.numa_node},bus=pxb{gpu.numa_node},chassis=1",
                "-device", f"{gpu.qemu_device},bus=rp{gpu.numa_node},addr=0x0",
            ]
        return args


def _nodes(*spec: Tuple[int, Tuple[int, ...], int]) -> Tuple[Node, ...]:
    return tuple(Node(i, cpus, mem) for i, cpus, mem in spec)


SEED = Topology(
    name="seed",
    description=(
        "The seed report's shape: two sockets, one node each, distance 10/21; the boot "
        "display on the main bus and the compute GPU behind a PCIe expander on node 1 "
        "(at 84:00.0, like the report's GTX 1080 Ti)."
    ),
    nodes=_nodes((0, (0, 1), 1280), (1, (2, 3), 1280)),
    distances={(0, 1): 21},
    gpu=Gpu(address="0000:84:00.0", numa_node=1),
)

MIRROR = Topology(
    name="mirror",
    description=(
        "The seed's mirror: the same two nodes, the compute GPU behind an expander on node 0."
    ),
    nodes=_nodes((0, (0,), 1024), (1, (1,), 1024)),
    distances={(0, 1): 21},
    gpu=Gpu(address="0000:84:00.0", numa_node=0),
)

SNC = Topology(
    name="snc",
    description=(
        "Two sockets with sub-NUMA clustering: four nodes, 11 between the two halves of a "
        "socket and 21 across sockets; the GPU on node 1, whose socket is nodes 0 and 1."
    ),
    nodes=_nodes((0, (0,), 640), (1, (1,), 640), (2, (2,), 640), (3, (3,), 640)),
    distances={
        (0, 1): 11, (2, 3): 11,
        (0, 2): 21, (0, 3): 21, (1, 2): 21, (1, 3): 21,
    },
    gpu=Gpu(address="0000:84:00.0", numa_node=1),
)

MEMORY_ONLY = Topology(
    name="memory-only",
    description=(
        "Two CPU nodes plus node 2 with memory and no CPUs (as a CXL expander or GPU "
        "memory shows up); the GPU on node 1.  Node 2 must never be picked for CPUs."
    ),
    nodes=_nodes((0, (0,), 1024), (1, (1,), 1024), (2, (), 512)),
    distances={(0, 1): 21, (0, 2): 17, (1, 2): 28},
    gpu=Gpu(address="0000:84:00.0", numa_node=1),
    sockets=2,
)

NO_NUMA_INFO = Topology(
    name="no-numa-info",
    description=(
        "Two nodes, the GPU on the main bus, for which the firmware gives no proximity "
        "domain: the guest shows numa_node -1, as in most VMs and many single-socket boards."
    ),
    nodes=_nodes((0, (0,), 1024), (1, (1,), 1024)),
    distances={(0, 1): 21},
    gpu=Gpu(address="0000:00:05.0", numa_node=None),
)

TOPOLOGIES: Dict[str, Topology] = {
    t.name: t for t in (SEED, MIRROR, SNC, MEMORY_ONLY, NO_NUMA_INFO)
}
