"""``oomctl dump``: systemd-oomd's own view of its settings and the cgroups it watches,
with the percent and time-span parsers its rows and the unit settings share."""

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from strata_doctor.root import Command

OOMCTL_DUMP = Command("oomctl-dump", ("oomctl", "dump"))


def parse_percent(text: str) -> Optional[float]:
    """``50%`` or ``50.00%`` -> 50.0; also permille (``‰``) and permyriad (``‱``)."""
    text = text.strip()
    for suffix, scale in (("%", 1.0), ("‰", 0.1), ("‱", 0.01)):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * scale
            except ValueError:
                return None
    return None


_SPAN_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "": 1.0, "s": 1.0, "sec": 1.0,
    "second": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
}


def parse_timespan(text: str) -> Optional[float]:
    """A systemd time span (``20s``, ``1min 30s``, ``30``) in seconds; None when garbage."""
    total = 0.0
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)", text.strip().lower())
    if not parts or re.sub(r"[0-9.\sa-z]", "", text.lower()):
        return None
    for number, unit in parts:
        if unit not in _SPAN_UNITS:
            return None
        total += float(number) * _SPAN_UNITS[unit]
    return total


class Watched(NamedTuple):
    """A cgroup systemd-oomd watches."""

    path: str
    """cgroup path, ``/`` for the root."""
    kind: str
    """``memory-pressure`` or ``swap``."""
    limit: Optional[float] = None
    """Pressure limit in percent (memory-pressure only)."""
    duration: Optional[float] = None
    """Seconds above the limit before it acts (memory-pressure only)."""
    source: str = ""
    """Where this came from (``oomctl dump``, ``systemctl show UNIT``, a unit file)."""


class OomctlDump(NamedTuple):
    """``oomctl dump``: oomd's own view of its settings and watched cgroups."""

    swap_used_limit: Optional[float]
    """``Swap Used Limit`` in percent."""
    pressure_limit: Optional[float]
    """``Default Memory Pressure Limit`` in percent."""
    pressure_duration: Optional[float]
    """``Default Memory Pressure Duration`` in seconds."""
    watched: Tuple[Watched, ...]
    """Every watched cgroup."""


def parse_oomctl_dump(text: str) -> OomctlDump:
    """Parse ``oomctl dump`` (systemd 247 and later; older 'Memory Pressure Limit' rows and
    newer 'Memory Pressure Duration' rows both read)."""
    header: Dict[str, str] = {}
    watched: List[Watched] = []
    section = ""
    current: Optional[Dict[str, str]] = None
    for raw in text.replace("\0", "").splitlines():
        line = raw.strip()
        if not line:
            continue
        indented = raw[0].isspace()
        if not indented and line.endswith("CGroups:"):
            _add_watched(watched, section, current)
            section, current = line, None
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if not indented:
            header[key] = value
        elif key == "Path" and section:
            _add_watched(watched, section, current)
            current = {"Path": value}
        elif current is not None:
            current[key] = value
    _add_watched(watched, section, current)
    return OomctlDump(
        parse_percent(header.get("Swap Used Limit", "")),
        parse_percent(header.get("Default Memory Pressure Limit", "")),
        _optional_span(header, "Default Memory Pressure Duration"),
        tuple(watched),
    )


def _add_watched(watched: List[Watched], section: str, rows: Optional[Dict[str, str]]) -> None:
    """One cgroup's rows of a ``... CGroups:`` section, once its next one (or the end) is seen."""
    if rows is None or "Path" not in rows:
        return
    kind = "swap" if section.startswith("Swap") else "memory-pressure"
    limit = parse_percent(rows.get("Memory Pressure Limit", "")) if kind != "swap" else None
    watched.append(Watched(rows["Path"], kind, limit, _optional_span(rows, "Memory Pressure Duration"),
                           "oomctl dump"))


def _optional_span(rows: Dict[str, str], key: str) -> Optional[float]:
    # A row that is absent is no duration; one that is there but garbage is None as well.
    return parse_timespan(rows[key]) if key in rows else None
