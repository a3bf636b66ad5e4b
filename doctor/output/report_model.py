"""What ``strata-doctor report`` shows, as data: the sections of :class:`Report`.

Built by ``output/report.py`` from a host's facts and the check results, rendered to
Markdown by ``templates/report.md.j2`` or to JSON with :func:`dataclasses.asdict`, which
is why these are frozen dataclasses: the field order is the JSON's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

COMMAND_LINES = 60  # raw command output shown per command in the evidence block

@dataclass(frozen=True)
class GpuLine:
    """One GPU as the Hardware section shows it."""

    address: str
    """PCI address, ``0000:84:00.0``."""
    model: str
    """Marketing name from nvidia-smi, else the vendor and PCI ids."""
    ids: str
    """``vendor:device`` PCI ids."""
    memory: Optional[str]
    """Memory size as nvidia-smi reports it (``11264 MiB``), when known."""
    driver: Optional[str]
    """Bound kernel driver."""
    node: Optional[int]
    """NUMA node the doctor placed it on."""
    node_source: str
    """How the node was decided (``numa_node``, ``local_cpulist``...)."""
    link: Optional[str]
    """PCIe link now, and its maximum when lower (``2.5 GT/s x16 (max 8.0 GT/s x16)``)."""
    compute: bool
    """Whether this is the compute GPU."""
    role: str
    """Why it is the compute GPU, or ``boot display``, or ''."""


@dataclass(frozen=True)
class NodeLine:
    """One NUMA node's CPUs and memory."""

    id: int
    """Node id."""
    cpus: str
    """Online CPUs as a cpulist."""
    cores: Optional[int]
    """Physical cores among them; None when the tree shows no core (no sibling list, no
    core id)."""
    threads: int
    """Hardware threads (online CPUs)."""
    memory_total_bytes: Optional[int]
    """MemTotal of the node."""
    memory_free_bytes: Optional[int]
    """MemFree of the node."""
    memory_only: bool
    """True for a node with memory and no CPUs (CXL, HBM, GPU memory)."""


@dataclass(frozen=True)
class Hardware:
    """The Hardware section: GPUs, CPUs per node, RAM and NUMA distances."""

    gpus: Tuple[GpuLine, ...]
    """Every display-class PCI function, the compute GPU first."""
    cpu_model: Optional[str]
    """CPU model name."""
    sockets: int
    """Physical packages."""
    cores: Optional[int]
    """Physical cores, all nodes; None when the tree shows no core."""
    threads: int
    """Online hardware threads, all nodes."""
    isa: Tuple[str, ...]
    """Expert-kernel ISA extensions offered, by display name."""
    isa_family: str
    """``x86``, ``arm64``, ``arm`` (a 32-bit kernel), another architecture's name, or empty
    when /proc/cpuinfo could not be read: which ISA the line names."""
    pci_functions: int
    """PCI functions the tree lists; 0 means its GPUs are unknown, not absent."""
    nodes: Tuple[NodeLine, ...]
    """NUMA nodes in id order."""
    memory_total_bytes: Optional[int]
    """All RAM (``MemTotal`` of /proc/meminfo)."""
    distances: Tuple[Tuple[int, Tuple[Optional[int], ...]], ...]
    """(node id, distances to each node in ``nodes`` order)."""
    system: Optional[str]
    """Vendor and product from DMI, when the firmware names them."""


@dataclass(frozen=True)
class EngineLine:
    """The engine's settings and its binding, configured and in effect."""

    arena_bytes: Optional[int]
    """Pinned expert arena."""
    kv_bytes: int
    """Pinned K/V cache."""
    pinned_bytes: Optional[int]
    """Arena plus K/V."""
    headroom_bytes: int
    """Memory kept free beside them."""
    unit: str
    """Engine systemd unit."""
    workers: Optional[int]
    """Expert-pool threads, when set."""
    hugepages: str
    """``auto``, ``hugetlb`` or ``thp``."""
    numa: str
    """``auto``, ``off`` or a node id."""
    config_source: Optional[str]
    """The config file the settings came from."""
    planned: Optional[str]
    """The recommended numactl line; None when there is nothing to bind."""
    configured: Optional[bool]
    """Whether unit files on disk bind the engine as planned."""
    effective: Optional[bool]
    """Whether the running engine or loaded unit follows the plan; None when unknown."""
    unit_state: Optional[str]
    """``ActiveState/SubState`` from systemd, or why it is unknown."""


@dataclass(frozen=True)
class MemoryState:
    """Hugepages, THP and systemd-oomd: the seed's MAP_HUGETLB and oomd trap."""

    nr_hugepages: Optional[int]
    """``/proc/sys/vm/nr_hugepages``."""
    hugepage_bytes: Optional[int]
    """Default hugepage size (``Hugepagesize``)."""
    hugepages_free: Optional[int]
    """``HugePages_Free``."""
    hugepages_reserved: Optional[int]
    """``HugePages_Rsvd``."""
    per_node: Tuple[Tuple[int, int], ...]
    """(node, hugepages of the default size) from the node's hugepages directory."""
    thp_enabled: Optional[str]
    """Selected mode of ``transparent_hugepage/enabled``."""
    thp_defrag: Optional[str]
    """Selected mode of ``transparent_hugepage/defrag``."""
    oomd: str
    """systemd-oomd's state (``active``, ``inactive``...) or why it is unknown."""
    unit_oom_policy: Optional[str]
    """The engine unit's ManagedOOM settings, when systemd showed them."""


@dataclass(frozen=True)
class FindingLine:
    """One finding, as the report lists it."""

    check: str
    """The check's id."""
    id: str
    """The finding's id."""
    severity: str
    """``ok``, ``info``, ``warning`` or ``error``."""
    mark: str
    """The text output's mark for the severity."""
    summary: str
    """One line."""
    detail: str
    """Why, in a few sentences."""
    ignored: bool
    """Downgraded with ``--ignore``."""
    fix: Optional[str]
    """The fix's summary."""
    fix_steps: Tuple[str, ...]
    """Steps left to the operator."""
    evidence: Tuple[Tuple[str, str], ...]
    """(source, value) pairs."""


@dataclass(frozen=True)
class CheckLine:
    """A check that produced no findings: skipped or crashed."""

    check: str
    """The check's id."""
    status: str
    """``skipped`` or ``crashed``."""
    reason: str
    """Why."""


@dataclass(frozen=True)
class Versions:
    """Software versions the maintainers ask for first."""

    kernel: Optional[str]
    """``/proc/sys/kernel/osrelease``."""
    distribution: Optional[str]
    """``PRETTY_NAME`` of ``/etc/os-release``."""
    systemd: Optional[str]
    """From ``systemctl --version``."""
    nvidia_driver: Optional[str]
    """From ``nvidia-smi``."""
    cuda: Optional[str]
    """The CUDA version the driver supports, from ``nvidia-smi``."""
    strata_doctor: str
    """This tool's version."""
    python: str
    """The Python running it."""


@dataclass(frozen=True)
class CommandLine:
    """A command the run used, with its raw output for the evidence block."""

    display: str
    """``$ systemctl show ...``."""
    outcome: str
    """``exit 0``, ``not found``, ``timed out``..."""
    output: str
    """stdout, shortened to :data:`COMMAND_LINES` lines."""


@dataclass(frozen=True)
class MissingProgram:
    """A program not found on the host (or not captured), named once however many of its
    command lines were asked for (``nvidia-smi`` runs three ways)."""

    program: str
    """The program's name, ``nvidia-smi``."""
    commands: Tuple[str, ...]
    """The command lines of it that were not found, when others of it were; empty when none
    of them was."""


@dataclass(frozen=True)
class Report:
    """Everything the report shows, before redaction and rendering."""

    verdict: str
    """One line: ready or not, and the worst finding."""
    ready: bool
    """Whether the check exit code is 0."""
    exit_code: int
    """The check exit code."""
    hardware: Hardware
    """GPUs, CPUs, RAM, NUMA distances."""
    engine: EngineLine
    """Engine settings and binding."""
    memory: MemoryState
    """Hugepage, THP and oomd state."""
    findings: Tuple[FindingLine, ...]
    """Every finding, worst first."""
    other_checks: Tuple[CheckLine, ...]
    """Checks that were skipped or crashed."""
    versions: Versions
    """Kernel, distribution, systemd, driver, CUDA, this tool."""
    commands: Tuple[CommandLine, ...]
    """Commands run (or replayed), with output."""
    unreadable: Tuple[Tuple[str, str], ...]
    """(host path or command, reason) for what exists and could not be read: a permission
    refused, an I/O error, a command that failed or timed out (:func:`unreadable_items`)."""
    root_would_add: Tuple[str, ...]
    """What could not be read without root, one line each."""
    live: bool
    """Whether this is the live host (not a captured tree)."""
    measured: Optional[str] = None
    """The saved ``strata-doctor probe`` matrix as text (and why check ignores it, if it
    does); None when the host has none."""
    host_map: Optional[str] = None
    """The host as a Mermaid flowchart, as ``strata-doctor map --format mermaid`` draws it
    (docs/map.md); None when the configuration names a node the host lacks."""
    absent: Tuple[Tuple[str, str], ...] = ()
    """(host path, reason) for each path looked for and not on the host (an optional file
    such as ``/etc/strata-doctor.yaml``): answers, not read failures (:func:`absent_items`)."""
    missing_programs: Tuple[MissingProgram, ...] = ()
    """Programs the checks or the report would run and the host lacks, one each."""

