"""The host as a report names it: software versions, the distribution, the system's maker.

A part of :class:`~strata_doctor.context.HostContext`, which inherits it. Only the report
asks for these: their module is imported when it does, not on check's start-up path.
"""

from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strata_doctor.facts.host import DmiSystem, OsRelease, SoftwareVersions
    from strata_doctor.root import Root


class ReportFacts:
    """The report's facts about the host as a whole (doctor/facts/host.py)."""

    root: "Root"

    @cached_property
    def software_versions(self) -> "SoftwareVersions":
        """Kernel, systemd, NVIDIA driver and CUDA versions."""
        from strata_doctor.facts.host import read_software_versions

        return read_software_versions(self.root)

    @cached_property
    def os_release(self) -> "OsRelease":
        """The distribution, from os-release(5)."""
        from strata_doctor.facts.host import read_os_release

        return read_os_release(self.root)

    @cached_property
    def dmi_system(self) -> "DmiSystem":
        """The system's vendor and product name from DMI."""
        from strata_doctor.facts.host import read_dmi_system

        return read_dmi_system(self.root)
