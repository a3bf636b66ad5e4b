"""Whether the tree shows a hypervisor, shows bare metal, or shows neither."""

from typing import NamedTuple

from strata_doctor.facts.cpu_arch import CpuArch
from strata_doctor.facts.cpu_policy import Virtualization

POWERVM = "PowerVM LPAR"
""":attr:`CpuArch.platform_guest` of a pSeries partition that names a real machine."""


class HostKind(NamedTuple):
    """What the tree shows of a hypervisor under the NUMA nodes, and from what."""

    kind: str
    """``lpar`` (an IBM pSeries partition under PowerVM), ``guest`` (any other virtual
    machine), ``bare-metal``, or ``unknown`` when nothing in the tree tells."""
    why: str = ""
    """For ``unknown``, what is missing; empty otherwise."""


def host_kind(virt: Virtualization, arch: CpuArch) -> HostKind:
    """A guest when any sign says so; bare metal only on a sign of it (``systemd-detect-virt``
    saying ``none``, x86 flags without ``hypervisor``, a PowerNV platform); else unknown,
    since the ``hypervisor`` flag is x86's and says nothing on arm, POWER or ia64."""
    if virt.name == POWERVM or virt.detected == "powervm":
        return HostKind("lpar")
    if virt.virtual:
        return HostKind("guest")
    if virt.detected == "none" or arch.arch == "x86" or arch.platform == "PowerNV":
        return HostKind("bare-metal")  # PowerNV: Linux on the machine's own OPAL firmware
    if arch.unread:
        return HostKind("unknown", f"/proc/cpuinfo cannot be read ({arch.unread}) and "
                        "systemd-detect-virt --vm gave no answer")
    return HostKind("unknown", f"{_ARCH_NAMES.get(arch.arch, 'this CPU')} has no hypervisor flag to show "
                    "(that flag is x86's) and systemd-detect-virt --vm gave no answer")


_ARCH_NAMES = {"arm64": "an arm64 CPU", "arm": "an arm CPU", "ppc": "a POWER or PowerPC CPU",
               "ia64": "an ia64 CPU", "s390": "an s390 CPU"}
