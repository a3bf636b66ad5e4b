"""Where the host runs and how it maps devices: WSL2, the IOMMU, a container's /dev/shm and policy
rights, the engine's threads.

A part of :class:`~strata_doctor.context.HostContext`, which inherits it: its facts are read
once per host, on first use, like the rest of the context's. A method that needs another of
the context's facts declares it under ``TYPE_CHECKING`` as a read-only property (as
``context_gpus.py`` does ``engine_pid``), which the context's own cached property fills.
"""


class PlatformFacts:
    """Where the host runs and how it maps devices: WSL2, the IOMMU, a container's /dev/shm and
    policy rights, the engine's threads."""
