"""What names this machine and its people: the values redaction must replace before a
report leaves the host.

Read through a fresh :class:`~strata_doctor.root.Root` over the same tree, so none of these
files is recorded as read by the checks and none ends up in a bundle.
"""

import os
from typing import NamedTuple, Optional, Tuple

from strata_doctor.root import Root

IDENTITY_FILES: Tuple[Tuple[str, str], ...] = (
    ("/proc/sys/kernel/hostname", "host"),
    ("/etc/hostname", "host"),
    ("/proc/sys/kernel/domainname", "domain"),
    ("/etc/machine-id", "machine-id"),
    ("/var/lib/dbus/machine-id", "machine-id"),
    ("/sys/class/dmi/id/product_serial", "serial"),
    ("/sys/class/dmi/id/board_serial", "serial"),
    ("/sys/class/dmi/id/chassis_serial", "serial"),
    ("/sys/class/dmi/id/product_uuid", "uuid"),
    ("/sys/class/dmi/id/board_asset_tag", "serial"),
    ("/sys/class/dmi/id/chassis_asset_tag", "serial"),
)
"""Files that name this machine or its owner, and the kind of value each holds."""
LOGIN_VARIABLES = ("USER", "LOGNAME", "SUDO_USER")
"""Environment variables that name the person running the doctor on a live host."""


class HostIdentity(NamedTuple):
    """The machine's names, ids and serials, and its people, as the host holds them."""

    values: Tuple[Tuple[str, Optional[str]], ...]
    """(kind, value) of each of :data:`IDENTITY_FILES`, in that order; None when unreadable."""
    hosts: str
    """``/etc/hosts``; empty when unreadable."""
    passwd: str
    """``/etc/passwd``; empty when unreadable."""
    live_names: Tuple[Tuple[str, str], ...] = ()
    """On the live host only: (``host``, the kernel's node name), then (``user``, name) for
    each of :data:`LOGIN_VARIABLES` that is set."""
    home: Optional[str] = None
    """On the live host only: the home folder of the person running the doctor."""


def read_identity(root: Root) -> HostIdentity:
    """The identity of the host under ``root``, read without recording it in ``root``."""
    private = Root(root.base)
    values = tuple((kind, private.read_value(path)) for path, kind in IDENTITY_FILES)
    identity = HostIdentity(values, private.read("/etc/hosts") or "", private.read("/etc/passwd") or "")
    if not private.live:
        return identity
    names = [("host", os.uname().nodename)]
    names += [("user", os.environ[v]) for v in LOGIN_VARIABLES if os.environ.get(v)]
    return identity._replace(live_names=tuple(names), home=os.path.expanduser("~"))
