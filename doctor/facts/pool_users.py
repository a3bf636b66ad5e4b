"""What else on the host may use a hugepage pool: devices whose software maps hugepages
(NEC SX-Aurora vector engines, DPDK's user-space NIC drivers), processes named for DPDK,
and ``vm.hugetlb_shm_group`` (a group allowed SysV SHM_HUGETLB segments).

Read through the root: ``vendor``, ``device``, ``class`` and the ``driver`` link of every
``/sys/bus/pci/devices/ADDR/``, and ``/proc/sys/vm/hugetlb_shm_group``. The hugetlbfs
mounts and the processes holding hugetlb pages are the hugepages fact's own
(``facts/hugepages.py``); the rule that weighs them all is ``rules/pool_users.py``.
"""

from typing import NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.gpu import PCI_DIR
from strata_doctor.facts.parse import parse_int
from strata_doctor.facts.processes import ProcessInfo
from strata_doctor.root import Root

SHM_GROUP = "/proc/sys/vm/hugetlb_shm_group"


VE_VENDOR = 0x1BCF
"""NEC's PCI vendor id: the SX-Aurora vector engines (``1bcf:001c``...)."""


VE_DRIVERS = ("ve_drv",)
"""The vector engine's kernel driver; VEOS maps the pool for the cards' DMA."""


DPDK_DRIVERS = ("vfio-pci", "uio_pci_generic", "igb_uio")
"""Drivers that hand a NIC to a user-space (DPDK) program, which maps hugepages."""


NIC_CLASS = 0x02
"""PCI base class of network controllers."""


class PoolDevice(NamedTuple):
    """A PCI function whose software may map hugepages."""

    address: str
    """PCI address, ``0000:1a:00.0``."""
    vendor: Optional[int]
    """``vendor``."""
    device: Optional[int]
    """``device``."""
    driver: Optional[str]
    """The bound driver, from the ``driver`` link."""
    kind: str
    """``ve`` (a vector engine) or ``dpdk`` (a NIC bound for user space)."""

    @property
    def ids(self) -> str:
        """``1bcf:001c``, or ``?`` for an id sysfs does not give."""
        vendor = "?" if self.vendor is None else f"{self.vendor:04x}"
        device = "?" if self.device is None else f"{self.device:04x}"
        return f"{vendor}:{device}"


class PoolUserFacts(NamedTuple):
    """Signs of other users of the hugepage pools."""

    devices: Tuple[PoolDevice, ...] = ()
    """Vector engines and user-space-bound NICs, by address."""
    dpdk: Tuple[Tuple[int, str], ...] = ()
    """(pid, name) of processes whose name says DPDK (``dpdk-testpmd``...)."""
    shm_group: Optional[int] = None
    """``vm.hugetlb_shm_group``; None when the file is missing or unreadable."""


def device_kind(vendor: Optional[int], driver: Optional[str], pci_class: Optional[int]) -> Optional[str]:
    """``ve``, ``dpdk`` or None: whether a PCI function's software may map hugepages."""
    if vendor == VE_VENDOR or driver in VE_DRIVERS:
        return "ve"
    if driver in DPDK_DRIVERS and pci_class is not None and pci_class >> 16 == NIC_CLASS:
        return "dpdk"
    return None


def dpdk_processes(processes: Sequence[ProcessInfo]) -> Tuple[Tuple[int, str], ...]:
    """(pid, name) of the processes whose name says DPDK, kernel threads left out."""
    return tuple((p.pid, p.name) for p in processes
                 if "dpdk" in p.name.lower() and not p.kernel_thread)


def read_pool_users(root: Root, processes: Sequence[ProcessInfo]) -> PoolUserFacts:
    """Every sign of another user of the pools, read through ``root``."""
    devices = []
    for address in sorted(root.listdir(PCI_DIR)):
        base = f"{PCI_DIR}/{address}"
        vendor = parse_int(root.read(f"{base}/vendor"))
        driver = root.link_name(f"{base}/driver")
        kind = device_kind(vendor, driver, parse_int(root.read(f"{base}/class")))
        if kind is not None:
            devices.append(PoolDevice(address, vendor, parse_int(root.read(f"{base}/device")), driver, kind))
    return PoolUserFacts(tuple(devices), dpdk_processes(processes), parse_int(root.read(SHM_GROUP)))
