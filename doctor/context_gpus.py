"""The engine's GPU as the engine names it: its environment's device selection
(CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES), its instances' GPUs.

A part of :class:`~strata_doctor.context.HostContext`, which inherits it: its facts are read
once per host, on first use, like the rest of the context's. A method that needs another of
the context's facts declares it under ``TYPE_CHECKING`` as a read-only property (as
``context_gpus.py`` does ``engine_pid``), which the context's own cached property fills.
"""

from functools import cached_property
from typing import TYPE_CHECKING, Optional

from strata_doctor.facts.environ import EngineEnviron, read_process_environ
from strata_doctor.root import Root


class EngineGpuFacts:
    """The engine's GPU as the engine names it: its environment's device selection
    (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES), its instances' GPUs."""

    root: Root
    if TYPE_CHECKING:  # HostContext's own facts that this part reads
        @property
        def engine_pid(self) -> Optional[int]: ...

    @cached_property
    def engine_environ(self) -> Optional[EngineEnviron]:
        """The engine's GPU, OpenMP and thread-count variables (facts/environ.py) from the
        running engine's ``/proc/PID/environ``; None when no engine runs or it cannot be read."""
        pid = self.engine_pid
        return read_process_environ(self.root, pid) if pid is not None else None
