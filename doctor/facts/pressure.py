"""Memory pressure (PSI): ``/proc/pressure/memory``, what systemd-oomd's pressure
watches act on."""

from typing import Dict, List, NamedTuple, Tuple

from strata_doctor.root import Root

PRESSURE_MEMORY = "/proc/pressure/memory"


class Pressure(NamedTuple):
    """One PSI line: ``some`` or ``full`` with its averages (percent) and total (µs)."""

    kind: str
    """``some`` (at least one task stalled) or ``full`` (all non-idle tasks stalled)."""
    avg10: float
    """Percent of the last 10 s."""
    avg60: float
    """Percent of the last 60 s."""
    avg300: float
    """Percent of the last 300 s."""
    total: int
    """Stall time since boot, in microseconds."""


def parse_pressure(text: str) -> Tuple[Pressure, ...]:
    """Parse ``/proc/pressure/memory`` (or a cgroup's ``memory.pressure``)."""
    rows: List[Pressure] = []
    for line in text.replace("\0", "").splitlines():
        words = line.split()
        if not words or words[0] not in ("some", "full"):
            continue
        values: Dict[str, str] = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        try:
            rows.append(Pressure(words[0], float(values.get("avg10", "0")),
                                 float(values.get("avg60", "0")), float(values.get("avg300", "0")),
                                 int(values.get("total", "0"))))
        except ValueError:
            continue
    return tuple(rows)


def read_pressure(root: Root) -> Tuple[Tuple[Pressure, ...], str]:
    """(the host's memory pressure rows, why they could not be read: empty when they were)."""
    text = root.read(PRESSURE_MEMORY)
    if text is not None:
        return parse_pressure(text), ""
    return (), ("kernel without PSI (/proc/pressure/memory " + (root.reads.get(PRESSURE_MEMORY) or "missing")
                + "): oomd's pressure monitoring cannot work")
