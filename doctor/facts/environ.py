"""The engine's environment: the variables that choose its GPU and shape its threads, from
``/proc/PID/environ`` and the unit's ``Environment=`` (``systemctl show``).

Only the variables the checks weigh are kept (:data:`ENGINE_VARIABLES`): an environment
carries credentials no name shows, and a bundle keeps these values alone.
"""

import re
import shlex
from typing import Dict, NamedTuple, Optional

from strata_doctor.root import Root

ENGINE_VARIABLES = re.compile(
    r"(CUDA_[A-Z0-9_]+|HIP_[A-Z0-9_]+|ROCR_[A-Z0-9_]+|HSA_[A-Z0-9_]+|GPU_DEVICE_ORDINAL"
    r"|OMP_[A-Z0-9_]+|GOMP_[A-Z0-9_]+|KMP_[A-Z0-9_]+|NCCL_[A-Z0-9_]+|[A-Z0-9_]*_NUM_THREADS"
    r"|STRATA_[A-Z0-9_]+|container)"
)
"""Names whose values the checks read: the GPU runtimes' device selection and ordering,
OpenMP's and NCCL's settings, thread counts, and the engine's own (``STRATA_*``);
``container`` is systemd's container marker."""


class EngineEnviron(NamedTuple):
    """Engine variables and where they were read."""

    values: Dict[str, str]
    """Name -> value, for the names :data:`ENGINE_VARIABLES` matches."""
    source: str
    """Where they came from: ``/proc/PID/environ`` or ``Environment= in UNIT``."""


def engine_variable(name: str) -> bool:
    """Whether ``name`` is one the checks read (and a bundle may keep the value of)."""
    return ENGINE_VARIABLES.fullmatch(name) is not None


def parse_environ(data: bytes) -> Dict[str, str]:
    """``/proc/PID/environ`` (NUL-separated ``NAME=value``) -> the engine variables in it;
    an entry without ``=`` or with a name that is not an engine variable is passed over."""
    found: Dict[str, str] = {}
    for item in data.split(b"\0"):
        name, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and engine_variable(name):
            found[name] = value
    return found


def parse_unit_environment(value: str) -> Dict[str, str]:
    """``systemctl show``'s ``Environment=`` value (space-separated assignments, each
    quoted where it holds a space) -> the engine variables in it; unbalanced quotes give
    what the words before them say."""
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    found: Dict[str, str] = {}
    for word in words:
        name, sep, rest = word.partition("=")
        if sep and engine_variable(name):
            found[name] = rest
    return found


def read_process_environ(root: Root, pid: int) -> Optional[EngineEnviron]:
    """The engine variables of process ``pid``; None when its environ cannot be read."""
    path = f"/proc/{pid}/environ"
    data = root.read_bytes(path)
    if data is None:
        return None
    return EngineEnviron(parse_environ(data), path)
