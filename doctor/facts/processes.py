"""The process table, from ``/proc/PID/status`` and ``/proc/PID/stat`` through the root
(a process's ``numa_maps`` has its own reader, in ``facts/numa_maps.py``).

Reading procfs through the root (rather than asking the live kernel through a library)
means a captured host replays its processes exactly, and a bundle records them.
"""

import re
from functools import lru_cache
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.parse import (
    is_plain,
    parse_cpulist,
    parse_int,
    parse_status,
)
from strata_doctor.root import Root

CLOCK_TICKS = 100  # USER_HZ on every mainstream architecture
# The scan reads thousands of status files: pick out only the lines it uses. Text with
# line breaks other than \n (or NULs) goes through parse_status, which they would change.
_STATUS_KEYS = re.compile(r"\n[^\S\n]*(Name|PPid|Uid|HugetlbPages|Cpus_allowed_list)[^\S\n]*:(.*)")


class ProcessInfo(NamedTuple):
    """One process, from ``/proc/PID/status`` and ``/proc/PID/stat`` (a named tuple: the
    scan builds thousands, and a tuple is quicker to build than a frozen dataclass)."""

    pid: int
    name: str
    """``Name:`` (the comm, at most 15 characters)."""
    ppid: int
    """``PPid:``; 2 marks a kernel thread."""
    uid: Optional[int]
    """Real user id (``Uid:`` first field)."""
    cpus_allowed: FrozenSet[int]
    """``Cpus_allowed_list:``."""
    hugetlb_bytes: int
    """``HugetlbPages:`` in bytes (0 on kernels without the line)."""
    cpu_seconds: float
    """utime + stime from ``stat``, in seconds."""
    start_seconds: float
    """starttime from ``stat``, in seconds after boot."""

    @property
    def kernel_thread(self) -> bool:
        """Kernel threads (children of kthreadd) cannot be moved and are not counted."""
        return self.pid == 2 or self.ppid == 2

    def cpu_share(self, uptime: float) -> float:
        """Average CPUs used since the process started."""
        alive = uptime - self.start_seconds
        return self.cpu_seconds / alive if alive > 0 else 0.0


def read_processes(root: Root) -> Tuple[ProcessInfo, ...]:
    """Every process under ``/proc`` that could be read, in pid order."""
    result: List[ProcessInfo] = []
    pids = sorted(int(name) for name in root.listdir("/proc") if name.isdigit())
    for pid in pids:
        status_text = root.read(f"/proc/{pid}/status")
        if status_text is not None:
            result.append(parse_process(pid, status_text, root.read(f"/proc/{pid}/stat") or ""))
    return tuple(result)


def parse_process(pid: int, status_text: str, stat_text: str) -> ProcessInfo:
    """Build a :class:`ProcessInfo` from the text of ``status`` and ``stat``."""
    status = _status_fields(status_text)
    uid_words = status.get("Uid", "").split()
    hugetlb = _kb_value(status.get("HugetlbPages", "0 kB"))
    cpu, start = _parse_stat(stat_text)
    return ProcessInfo(
        pid,
        status.get("Name", ""),
        _int(status.get("PPid")) or 0,
        _int(uid_words[0]) if uid_words else None,
        parse_cpulist(status.get("Cpus_allowed_list", "")),
        hugetlb,
        cpu,
        start,
    )


@lru_cache(maxsize=1024)  # a few parents and users own most processes
def _int(text: Optional[str]) -> Optional[int]:
    # parse_int, with plain digits (nearly every value) converted without its cleaning.
    if text is not None and text.isdigit() and text.isascii() and len(text) < 40:
        return int(text)
    return parse_int(text)


@lru_cache(maxsize=1024)  # most processes have "0 kB"
def _kb_value(text: str) -> int:
    # parse_meminfo's reading of one "N kB" value, without building a dict per process.
    words = text.split()
    if not words or not (words[0].isascii() and words[0].isdigit() and len(words[0]) <= 64):
        return 0
    value = int(words[0])
    return value * 1024 if len(words) > 1 and words[1].lower() == "kb" else value


def _status_fields(text: str) -> Dict[str, str]:
    if not is_plain(text, also="\0"):  # a name beyond ASCII, or line breaks other than \n
        return parse_status(text)
    # A leading "\n" lets the first line match too; the pattern's literal "\n" is fast.
    return {key: value.strip() for key, value in _STATUS_KEYS.findall("\n" + text)}


def _parse_stat(text: str) -> Tuple[float, float]:
    # The comm field may hold spaces and parentheses: split after the last ')'.
    _, _, rest = text.rpartition(")")
    fields = rest.split(None, 20)  # the 20 fields it uses, not the 30 after them
    if len(fields) < 20:
        return 0.0, 0.0
    return (_tick(fields[11]) + _tick(fields[12])) / CLOCK_TICKS, _tick(fields[19]) / CLOCK_TICKS


def _tick(field: str) -> int:
    # An unsigned 64-bit count in the kernel: anything longer (400 digits) is garbage, and
    # dividing it would overflow a float.
    return int(field) if field.isdecimal() and len(field) <= 20 else 0


def read_uptime(root: Root) -> Optional[float]:
    """Seconds since boot, from ``/proc/uptime``."""
    words = (root.read("/proc/uptime") or "").split()
    try:
        return float(words[0]) if words else None
    except ValueError:
        return None


def find_engine_pid(root: Root, processes: Sequence[ProcessInfo], unit: str) -> Optional[int]:
    """The engine's PID when it is not a loaded system unit (e.g. run from a desktop).

    Looks for a process whose command line names the unit's stem (``strata``) or the
    seed's ``serve/server.py``; the one with the most hugetlb pages, then the oldest, wins.
    """
    stem = unit.rsplit(".", 1)[0]
    own = _own_lineage(root, processes)
    found: List[Tuple[int, float, int]] = []
    for proc in processes:
        if proc.kernel_thread or proc.pid in own:
            continue
        verdict = engine_cmdline(root.read(f"/proc/{proc.pid}/cmdline") or "", stem)
        if verdict is False:
            continue
        if verdict or proc.name == stem:
            found.append((-proc.hugetlb_bytes, proc.start_seconds, proc.pid))
    return min(found)[2] if found else None


def engine_cmdline(cmdline: str, stem: str) -> Optional[bool]:
    """What a command line says to :func:`find_engine_pid`: True when it names the engine
    (the unit's ``stem`` as a word, or ``serve/server.py``), False when it is strata-doctor
    itself (never the engine), None when it says neither. Only the command lines where it
    says something are bundled (docs/report.md)."""
    text = cmdline.replace("\0", " ").strip()
    if "strata-doctor" in text or "strata_doctor" in text:
        return False
    if _stem_word(stem).search(text) or "serve/server.py" in text:
        return True
    return None


@lru_cache(maxsize=8)
def _stem_word(stem: str) -> "re.Pattern[str]":
    return re.compile(rf"(^|[/\s]){re.escape(stem)}([\s.:_-]|$)")


def _own_lineage(root: Root, processes: Sequence[ProcessInfo]) -> FrozenSet[int]:
    """On a live host, this process and its ancestors: a shell or unit that runs the
    doctor (``strata-vm-runner``) is not the engine, even if its name says strata."""
    if not root.live:
        return frozenset()
    import os

    parents = {p.pid: p.ppid for p in processes}
    lineage, pid = set(), os.getpid()
    while pid > 1 and pid not in lineage:
        lineage.add(pid)
        pid = parents.get(pid, 0)
    return frozenset(lineage)
