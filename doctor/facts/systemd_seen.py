"""Whether the tree shows systemd at all, and what shows it.

A sparse capture (sysfs and parts of /proc, no command output) may come from a host that
runs systemd or from one that does not. What systemd would give the engine, such as its
default ``DefaultLimitMEMLOCK=``, is the host's only where something in the tree shows
systemd: systemctl's captured answers, the engine unit's files, ``/run/systemd/system``
(systemd creates it when it boots as PID 1, and ``sd_booted(3)`` tests it), or PID 1's
name.
"""

from typing import NamedTuple, Optional, Sequence

from strata_doctor.facts.parse import parse_status
from strata_doctor.root import Root

RUN_DIR = "/run/systemd/system"
"""Exists only while systemd runs as PID 1 (``sd_booted(3)``)."""
PID1_COMM = "/proc/1/comm"
PID1_STATUS = "/proc/1/status"


class SystemdSeen(NamedTuple):
    """What in the tree shows that systemd manages the host."""

    shown_by: str
    """``systemctl``, the engine unit's first file, ``/run/systemd/system``,
    ``/proc/1/comm`` or ``/proc/1/status``; empty when nothing in the tree shows systemd."""

    @property
    def seen(self) -> bool:
        """Whether anything in the tree shows systemd."""
        return bool(self.shown_by)


def is_systemd_name(text: Optional[str]) -> bool:
    """Whether a process name as ``comm`` holds it is systemd's."""
    return (text or "").strip() == "systemd"


def read_systemd_seen(root: Root, systemctl: bool, unit_files: Sequence[str]) -> SystemdSeen:
    """``systemctl`` is whether systemctl answered (live or captured); ``unit_files`` are
    the engine unit's file and drop-ins found on disk."""
    if systemctl:
        return SystemdSeen("systemctl")
    if unit_files:
        return SystemdSeen(unit_files[0])
    if root.exists(RUN_DIR):
        return SystemdSeen(RUN_DIR)
    if is_systemd_name(root.read(PID1_COMM)):
        return SystemdSeen(PID1_COMM)
    if is_systemd_name(parse_status(root.read(PID1_STATUS) or "").get("Name")):
        return SystemdSeen(PID1_STATUS)
    return SystemdSeen("")
