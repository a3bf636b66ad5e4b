"""CPUs the scheduler keeps apart: ``isolcpus=``, ``nohz_full=``, ``rcu_nocbs=`` and
``idle=`` on the kernel command line, ``/sys/devices/system/cpu/isolated`` and
``nohz_full``, and systemd's default CPU affinity (``systemd.cpu_affinity=`` on the command
line, ``CPUAffinity=`` in ``/etc/systemd/system.conf`` and its drop-ins).

Parsers are pure functions on strings; :func:`read_isolation` takes a
:class:`~strata_doctor.root.Root`.
"""

from typing import FrozenSet, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.parse import parse_cpulist
from strata_doctor.facts.unitfile import parse_ini
from strata_doctor.root import Root

CMDLINE = "/proc/cmdline"
ISOLATED = "/sys/devices/system/cpu/isolated"
NOHZ_FULL = "/sys/devices/system/cpu/nohz_full"
SYSTEM_CONF = "/etc/systemd/system.conf"
SYSTEM_CONF_DIRS = ("/usr/lib/systemd/system.conf.d", "/run/systemd/system.conf.d",
                    "/etc/systemd/system.conf.d")
"""Drop-in folders of system.conf; systemd sorts their ``*.conf`` files by name across all
three, a file in /etc hiding one of the same name further down."""

ISOLCPUS_FLAGS = ("nohz", "domain", "managed_irq")
"""The flags ``isolcpus=`` knows (kernel/sched/isolation.c)."""


class Isolcpus(NamedTuple):
    """One ``isolcpus=`` value: ``[flag,]...<cpu-list>``."""

    word: str
    """As written: ``isolcpus=managed_irq,0-4,11-79``."""
    cpus: FrozenSet[int]
    flags: Tuple[str, ...]
    """The flags before the CPU list, as written."""

    @property
    def domain(self) -> bool:
        """Whether it takes its CPUs out of the scheduler's domains (no load balancing):
        the ``domain`` flag, or no flag at all, as the kernel reads it; ``managed_irq`` or
        ``nohz`` alone leave the CPUs balanced."""
        known = [f for f in self.flags if f in ISOLCPUS_FLAGS]
        return "domain" in known or not known


class CmdlineIsolation(NamedTuple):
    """What a kernel command line says about isolated CPUs and systemd's affinity."""

    isolcpus: Optional[Isolcpus] = None
    nohz_full: Optional[Tuple[str, FrozenSet[int]]] = None
    """(word, CPUs) of ``nohz_full=``."""
    rcu_nocbs: Optional[Tuple[str, FrozenSet[int]]] = None
    """(word, CPUs) of ``rcu_nocbs=``."""
    cpu_affinity: Optional[Tuple[str, FrozenSet[int]]] = None
    """(word, CPUs) of ``systemd.cpu_affinity=``."""
    idle: Optional[str] = None
    """``idle=`` (``poll``, ``halt``, ``nomwait``) as written."""


def parse_isolation_cmdline(text: str) -> CmdlineIsolation:
    """The isolation words of ``/proc/cmdline``; the last of each word wins, as the kernel
    and systemd read them."""
    found = CmdlineIsolation()
    for word in text.replace("\0", " ").split():
        key, sep, value = word.partition("=")
        if not sep:
            continue
        if key == "isolcpus":
            found = found._replace(isolcpus=parse_isolcpus(word))
        elif key == "nohz_full":
            found = found._replace(nohz_full=(word, parse_cpu_set(value)))
        elif key == "rcu_nocbs":
            found = found._replace(rcu_nocbs=(word, parse_cpu_set(value)))
        elif key == "systemd.cpu_affinity":
            found = found._replace(cpu_affinity=(word, parse_cpu_set(value)))
        elif key == "idle":
            found = found._replace(idle=value)
    return found


def parse_isolcpus(word: str) -> Isolcpus:
    """``isolcpus=managed_irq,domain,0-4`` as flags and CPUs: the flags are the leading
    parts that start with a letter, the rest is the CPU list."""
    value = word.partition("=")[2]
    parts = value.split(",")
    flags: List[str] = []
    while parts and parts[0][:1].isalpha():
        flags.append(parts.pop(0))
    return Isolcpus(word, parse_cpulist(",".join(parts)), tuple(flags))


def parse_cpu_set(value: str) -> FrozenSet[int]:
    """A CPU set as systemd writes one (``CPUAffinity=0 1 4-7``, or commas): blanks and
    commas both separate."""
    return parse_cpulist(",".join(value.replace(",", " ").split()))


def parse_sysfs_cpus(text: str) -> FrozenSet[int]:
    """``cpu/isolated`` or ``cpu/nohz_full``: a cpulist, empty when none; ``(null)`` (padded
    to the CPU count) is what ``nohz_full`` says when the kernel never made the mask."""
    cleaned = text.strip()
    return frozenset() if cleaned in ("", "(null)") else parse_cpulist(cleaned)


def parse_system_conf_affinity(text: str) -> Optional[str]:
    """The last ``CPUAffinity=`` of ``[Manager]`` in system.conf (or a drop-in), as
    written; ``""`` for an empty assignment (a reset), None when it sets none."""
    value: Optional[str] = None
    for section, key, setting in parse_ini(text):
        if section == "Manager" and key == "CPUAffinity":
            value = setting
    return value


class SystemdAffinity(NamedTuple):
    """systemd's default CPU affinity for every unit: where it came from and its CPUs."""

    source: str
    """The file (or ``/proc/cmdline``) that sets it."""
    setting: str
    """As written: ``systemd.cpu_affinity=5,6,7`` or ``CPUAffinity=0 1 2``."""
    cpus: FrozenSet[int]


class IsolationFacts(NamedTuple):
    """Isolated CPUs and systemd's default affinity on one host."""

    cmdline: Optional[CmdlineIsolation]
    """None when ``/proc/cmdline`` is absent or unreadable."""
    isolated: Optional[FrozenSet[int]]
    """``cpu/isolated``: CPUs out of the scheduler's domains; None when absent."""
    nohz_full: Optional[FrozenSet[int]]
    """``cpu/nohz_full``; None when absent (a kernel without NO_HZ_FULL)."""
    affinity: Optional[SystemdAffinity]
    """The affinity systemd gives every unit that sets none; None when nothing sets one."""
    conf_files: Tuple[str, ...] = ()
    """The system.conf files read, in the order systemd applies them."""

    @property
    def domain_isolated(self) -> Optional[FrozenSet[int]]:
        """CPUs the scheduler does not balance onto: ``cpu/isolated`` (the kernel's own
        answer), else ``isolcpus=`` with the domain flag; None when neither file says."""
        if self.isolated is not None:
            return self.isolated
        if self.cmdline is None:
            return None
        iso = self.cmdline.isolcpus
        return iso.cpus if iso is not None and iso.domain else frozenset()

    @property
    def isolated_source(self) -> str:
        """Where :attr:`domain_isolated` comes from, said as the host says it."""
        iso = self.cmdline.isolcpus if self.cmdline is not None else None
        if iso is not None and iso.domain:
            return iso.word
        return ISOLATED


def read_isolation(root: Root) -> IsolationFacts:
    """The isolation facts of a host, each file read through ``root``."""
    cmdline_text = root.read(CMDLINE)
    cmdline = parse_isolation_cmdline(cmdline_text) if cmdline_text is not None else None
    isolated_text, nohz_text = root.read(ISOLATED), root.read(NOHZ_FULL)
    conf_files = [SYSTEM_CONF, *_dropins(root)]
    affinity: Optional[SystemdAffinity] = None
    for path in conf_files:
        setting = parse_system_conf_affinity(root.read(path) or "")
        if setting is not None:  # an empty assignment resets what came before
            affinity = SystemdAffinity(path, f"CPUAffinity={setting}", parse_cpu_set(setting)) \
                if setting else None
    if cmdline is not None and cmdline.cpu_affinity is not None:
        word, cpus = cmdline.cpu_affinity  # systemd reads the command line after its files
        affinity = SystemdAffinity(CMDLINE, word, cpus)
    return IsolationFacts(
        cmdline,
        parse_sysfs_cpus(isolated_text) if isolated_text is not None else None,
        parse_sysfs_cpus(nohz_text) if nohz_text is not None else None,
        affinity if affinity is None or affinity.cpus else None,
        tuple(p for p in conf_files if root.exists(p)),
    )


def _dropins(root: Root) -> List[str]:
    """``system.conf.d/*.conf`` sorted by name, /etc's hiding the same name below it."""
    by_name = {}
    for folder in SYSTEM_CONF_DIRS:
        for name in root.listdir(folder):
            if name.endswith(".conf"):
                by_name[name] = f"{folder}/{name}"
    return [by_name[name] for name in sorted(by_name)]
