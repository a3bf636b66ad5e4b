"""The host as a bug report names it: its software versions, its distribution and the
system's name from DMI. Nothing here decides anything about the engine; the report shows
these so a maintainer can tell hosts apart.
"""

import re
from typing import NamedTuple, Optional

from strata_doctor.facts.engine import SYSTEMD_VERSION
from strata_doctor.facts.parse import parse_key_values
from strata_doctor.root import Command, CommandResult, Root

NVIDIA_SMI = Command("nvidia-smi", ("nvidia-smi",), timeout=10.0)
"""The plain ``nvidia-smi`` table: its header names the driver and the CUDA version."""
OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")
"""Where os-release(5) looks, in order: the second only when the first is missing."""
KERNEL_RELEASE = "/proc/sys/kernel/osrelease"
DMI_DIR = "/sys/class/dmi/id"
FIRMWARE_FILLERS = frozenset({"to be filled by o.e.m.", "default string"})
"""What firmware writes into a DMI name the vendor left empty: no name at all."""


class SoftwareVersions(NamedTuple):
    """The versions of the software under the engine, as the host reports them."""

    kernel: Optional[str]
    """``/proc/sys/kernel/osrelease``."""
    systemd: Optional[str]
    """The first line of ``systemctl --version`` after ``systemd``; None when it did not answer."""
    nvidia_driver: Optional[str]
    """``Driver Version`` in ``nvidia-smi``'s header."""
    cuda: Optional[str]
    """``CUDA Version`` in ``nvidia-smi``'s header: the newest CUDA the driver supports."""


class OsRelease(NamedTuple):
    """The distribution, from os-release(5)."""

    pretty_name: Optional[str]
    """``PRETTY_NAME``, unquoted; None when no os-release file names it."""


class DmiSystem(NamedTuple):
    """The system's vendor and product as the firmware names them (``/sys/class/dmi/id``)."""

    vendor: Optional[str]
    """``sys_vendor``."""
    product: Optional[str]
    """``product_name``."""

    @property
    def name(self) -> Optional[str]:
        """Vendor and product in one line, without the fillers of firmware that names
        neither; None when nothing is left."""
        words = (self.vendor, self.product)
        text = " ".join(w for w in words if w and w.lower() not in FIRMWARE_FILLERS)
        return text or None


def read_software_versions(root: Root) -> SoftwareVersions:
    """Kernel, systemd, NVIDIA driver and CUDA versions."""
    root.run_all((NVIDIA_SMI, SYSTEMD_VERSION))  # nvidia-smi is slow: overlap the two
    smi = _stdout(root.run(NVIDIA_SMI))
    return SoftwareVersions(
        kernel=root.read_value(KERNEL_RELEASE),
        systemd=parse_systemd_version(_stdout(root.run(SYSTEMD_VERSION))),
        nvidia_driver=smi_field(smi, "Driver Version"),
        cuda=smi_field(smi, "CUDA Version"),
    )


def read_os_release(root: Root) -> OsRelease:
    """``PRETTY_NAME`` of ``/etc/os-release``, else of ``/usr/lib/os-release``."""
    text = None
    for path in OS_RELEASE_FILES:
        text = root.read(path)
        if text is not None:
            break
    pretty = parse_key_values(text or "").get("PRETTY_NAME", "").strip("\"'") or None
    return OsRelease(pretty)


def read_dmi_system(root: Root) -> DmiSystem:
    """The system's vendor and product name from DMI."""
    return DmiSystem(root.read_value(f"{DMI_DIR}/sys_vendor"), root.read_value(f"{DMI_DIR}/product_name"))


def parse_systemd_version(text: str) -> Optional[str]:
    """``255 (255.4-1ubuntu8)`` from ``systemd 255 (255.4-1ubuntu8)``; None without one."""
    lines = text.strip().splitlines()
    if not lines or " " not in lines[0]:
        return None
    return lines[0].split(None, 1)[1]


def smi_field(text: str, label: str) -> Optional[str]:
    """The version after ``label:`` in nvidia-smi's header (``Driver Version: 550.54``)."""
    match = re.search(re.escape(label) + r":\s*([0-9][\w.]*)", text)
    return match.group(1) if match else None


def _stdout(result: CommandResult) -> str:
    return result.stdout if result.ok else ""
