"""``strata-doctor report``: the check results as a bug report in the seed report's shape.

The report is data first (:class:`Report`), rendered to Markdown by
``templates/report.md.j2`` or to JSON (the check JSON plus a ``report`` section). Every
extra fact it shows (versions, the hugepage and THP state, nvidia-smi) is read through
the host's Root, so a bundle replays the report as well as the checks.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from strata_doctor import __version__
from strata_doctor.config import EngineConfig
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import DETECT_VIRT
from strata_doctor.facts.engine import SYSTEMD_VERSION, command_outcome
from strata_doctor.facts.gpu import NVIDIA_SMI_QUERY, normalize_address
from strata_doctor.facts.meminfo import parse_meminfo
from strata_doctor.facts.oomd import OOMD_ACTIVE
from strata_doctor.facts.parse import (
    format_bytes,
    format_cpulist,
    parse_key_values,
)
from strata_doctor.model import CheckResult, Finding, Severity
from strata_doctor.output.text import EXIT_CRASH, EXIT_READY
from strata_doctor.root import Command, CommandResult, Root
from strata_doctor.rules.binding import numactl_line
from strata_doctor.rules.gpu import place_gpu

REPORT_SCHEMA = "strata-doctor/report/v1"
NVIDIA_SMI = Command("nvidia-smi", ("nvidia-smi",), timeout=10.0)
REPORT_COMMANDS = (NVIDIA_SMI, NVIDIA_SMI_QUERY, SYSTEMD_VERSION, OOMD_ACTIVE)
"""Commands the report runs (pcie-link shares the query; its rows are read as
``ctx.smi_query``); recorded and bundled like the checks' own."""

ISA_NAMES = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16",
             "avx512_vnni": "AVX-512 VNNI", "amx_tile": "AMX", "amx_bf16": "AMX BF16"}
HOME_PARENTS = ("home", "Users")
COMMAND_LINES = 60  # raw command output shown per command in the evidence block
ABSENT_REASONS = frozenset({"missing", "not a link", os.strerror(errno.ENOENT), os.strerror(errno.ENOTDIR)})
"""Reasons Root records for a path that is not on the host (``readlink`` of a file that is
no link among them): an answer about the host, never a read failure."""
STATUS_ANSWERS = frozenset({OOMD_ACTIVE.key, DETECT_VIRT.key})
"""Commands whose exit status is part of their answer: ``systemctl is-active`` prints
``inactive`` and exits 3, ``systemd-detect-virt --vm`` prints ``none`` and exits 1."""


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
    cores: int
    """Physical cores among them."""
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
    cores: int
    """Physical cores, all nodes."""
    threads: int
    """Online hardware threads, all nodes."""
    isa: Tuple[str, ...]
    """Expert-kernel ISA extensions offered, by display name."""
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


def build_report(ctx: HostContext, results: Sequence[CheckResult], code: int) -> Report:
    """Collect the report's data; reads the few extra facts through ``ctx.root``."""
    root = ctx.root
    root.run_all(REPORT_COMMANDS)
    findings = _finding_lines(results)
    report = Report(
        verdict=verdict_line(results, code),
        ready=code == EXIT_READY,
        exit_code=code,
        hardware=read_hardware(ctx),
        engine=engine_line(ctx),
        memory=memory_state(ctx),
        findings=findings,
        other_checks=tuple(_other_checks(results)),
        versions=read_versions(root),
        commands=(),
        unreadable=(),
        root_would_add=(),
        live=root.live,
        measured=measured_text(ctx),
        host_map=host_map(ctx),
    )
    # Commands and unreadable paths last: every read above must be in them.
    return _with_provenance(report, root)


def measured_text(ctx: HostContext) -> Optional[str]:
    """The saved probe matrix (read through ``ctx``, so a bundle carries the file)."""
    from strata_doctor.facts.saved_probe import to_text

    saved = ctx.saved_probe
    if saved is None:
        return None
    if saved.result is None:
        return f"{saved.path}: not used: {saved.unused}"
    text = to_text(saved.result)
    if saved.unused:
        text += f"Not used by check: {saved.unused}.\n"
    return text


def host_map(ctx: HostContext) -> Optional[str]:
    """The Mermaid picture of the host (docs/map.md), its GPUs named as nvidia-smi names them."""
    from strata_doctor.api import PlanError
    from strata_doctor.output.hostmap import build_map
    from strata_doctor.output.map import to_mermaid

    try:
        return to_mermaid(build_map(ctx))
    except PlanError:  # numa: N names no node; the checks say so
        return None


def _with_provenance(report: Report, root: Root) -> Report:
    from dataclasses import replace

    return replace(
        report,
        commands=tuple(command_line(r) for _, r in sorted(root.commands.items())),
        unreadable=tuple(unreadable_items(root)),
        root_would_add=tuple(root_would_add(root)),
        absent=tuple(absent_items(root)),
        missing_programs=tuple(missing_programs(root)),
    )


# -- verdict and findings -------------------------------------------------------
def verdict_line(results: Sequence[CheckResult], code: int) -> str:
    """``Not ready: <worst finding>`` / ``Ready: ...`` / ``A check crashed: ...``."""
    findings = sorted((f for r in results for f in r.findings), key=lambda f: -f.severity)
    problems = [f for f in findings if f.severity >= Severity.WARNING]
    if code == EXIT_CRASH:
        crashed = ", ".join(r.check for r in results if r.crash)
        return f"A check crashed ({crashed}); the other checks still ran"
    if code != EXIT_READY and problems:
        more = len(problems) - 1
        tail = f" (+{more} more problem{'s' if more > 1 else ''})" if more else ""
        return f"Not ready: {problems[0].check}: {problems[0].summary}{tail}"
    if problems:
        return f"Ready, with {len(problems)} warning{'s' if len(problems) > 1 else ''}: {problems[0].summary}"
    return f"Ready: {len(results)} checks found nothing to fix"


def _finding_lines(results: Sequence[CheckResult]) -> Tuple[FindingLine, ...]:
    findings = [f for r in results for f in r.findings]
    ordered = sorted(enumerate(findings), key=lambda pair: (-pair[1].severity, pair[0]))
    return tuple(finding_line(f) for _, f in ordered)


def finding_line(finding: Finding) -> FindingLine:
    """One finding as report data."""
    from strata_doctor.output.text import MARKS

    fix = finding.fix
    return FindingLine(
        check=finding.check,
        id=finding.id,
        severity=finding.severity.label,
        mark=MARKS[finding.severity],
        summary=finding.summary,
        detail=finding.detail,
        ignored=finding.ignored,
        fix=fix.summary if fix else None,
        fix_steps=tuple(step.text for step in fix.manual) + tuple(  # a unit restart is an action now
            f"Restart {a.target} when convenient: the changes apply at its next start."
            for a in fix.actions if a.kind == "restart-unit") if fix else (),
        evidence=tuple((e.source, e.value) for e in finding.evidence),
    )


def _other_checks(results: Sequence[CheckResult]) -> List[CheckLine]:
    rows = []
    for result in results:
        if result.crash:
            rows.append(CheckLine(result.check, "crashed", result.crash.error))
        elif result.skip:
            rows.append(CheckLine(result.check, "skipped", result.skip.reason))
    return rows


# -- hardware -------------------------------------------------------------------
def read_hardware(ctx: HostContext) -> Hardware:
    """The Hardware section from the context's facts and nvidia-smi."""
    numa, cpu = ctx.numa, ctx.cpu
    nodes = tuple(
        NodeLine(n.id, format_cpulist(n.cpus), cpu.cores_in(n.cpus) if n.cpus else 0, len(n.cpus),
                 n.memory_total, n.memory_free, n.memory_only)
        for n in numa.nodes
    )
    online = numa.online_cpus or frozenset().union(*(n.cpus for n in numa.nodes))
    meminfo = parse_meminfo(ctx.root.read("/proc/meminfo") or "")
    total = meminfo.get("MemTotal") or sum(n.memory_total or 0 for n in numa.nodes) or None
    ids = [n.id for n in numa.nodes]
    distances = tuple((n.id, tuple(n.distance_to(o) for o in ids)) for n in numa.nodes)
    return Hardware(
        gpus=gpu_lines(ctx),
        cpu_model=cpu.model,
        sockets=cpu.sockets,
        cores=cpu.cores_in(frozenset(online)) if online else 0,
        threads=len(online),
        isa=tuple(ISA_NAMES.get(flag, flag) for flag in cpu.expert_isa),
        nodes=nodes,
        memory_total_bytes=total,
        distances=distances,
        system=_system_name(ctx.root),
    )


def _system_name(root: Root) -> Optional[str]:
    words = [root.read_value(f"/sys/class/dmi/id/{name}") for name in ("sys_vendor", "product_name")]
    text = " ".join(w for w in words if w and w.lower() not in ("to be filled by o.e.m.", "default string"))
    return text or None


def private_values(ctx: HostContext) -> List[Tuple[str, str]]:
    """(kind, value) pairs only the report's commands reveal: GPU UUIDs and serials.

    Patterns catch most private strings; a GPU serial is a bare number, so it must be known
    to be replaced.
    """
    values: List[Tuple[str, str]] = []
    for row in ctx.smi_query.values():
        if row.uuid:
            values.append(("uuid", re.sub(r"^(GPU|MIG)-", "", row.uuid)))
        if row.serial:
            values.append(("serial", row.serial))
    return values


def gpu_lines(ctx: HostContext) -> Tuple[GpuLine, ...]:
    """Every GPU, the compute GPU first."""
    smi = ctx.smi_query
    placement = ctx.placement
    compute = placement.gpu.address if placement else None
    lines = []
    for gpu in ctx.gpus:
        chosen = gpu.address == compute
        node, source, _ = place_gpu(gpu, ctx.numa)
        role = (f"compute GPU: {placement.choice_reason}" if chosen and placement
                else "boot display" if gpu.boot_vga else "")
        found = smi.get(normalize_address(gpu.address))
        lines.append(GpuLine(
            address=gpu.address,
            model=found.name if found and found.name else f"{gpu.vendor_name} {gpu.ids}",
            ids=gpu.ids,
            memory=found.memory if found else None,
            driver=gpu.driver,
            node=node,
            node_source=source,
            link=gpu.link.text,  # facts.PcieLink.text: the one way a link is written; "PCIe" is ours
            compute=chosen,
            role=role,
        ))
    lines.sort(key=lambda line: (not line.compute, line.address))
    return tuple(lines)


# -- engine and memory ----------------------------------------------------------
def engine_line(ctx: HostContext) -> EngineLine:
    """The engine's settings, the planned binding and whether it is in place."""
    config: EngineConfig = ctx.config
    plan, state = ctx.binding_plan, ctx.binding_state
    planned = configured = effective = None
    if plan is not None and state is not None:
        planned = numactl_line(plan.mem_nodes, plan.cpu_nodes, plan.policy)
        configured, effective = state.configured, state.effective
    unit = ctx.unit
    unit_state = (f"{unit.get('ActiveState') or '?'}/{unit.get('SubState') or '?'}"
                  if unit.loaded else unit.reason or f"{config.unit} is not loaded")
    return EngineLine(
        arena_bytes=config.arena_bytes,
        kv_bytes=config.kv_bytes,
        pinned_bytes=config.pinned_bytes,
        headroom_bytes=config.headroom_bytes,
        unit=config.unit,
        workers=config.workers,
        hugepages=config.hugepages,
        numa=config.numa,
        config_source=_config_source(ctx),
        planned=planned,
        configured=configured,
        effective=effective,
        unit_state=unit_state,
    )


def _config_source(ctx: HostContext) -> Optional[str]:
    source = ctx.config.source
    if source is None or ctx.root.live:
        return source
    # Under a captured root the default config's real path names the capture folder.
    default = str(ctx.root.path("/etc/strata-doctor.yaml"))
    return "/etc/strata-doctor.yaml" if source == default else os.path.basename(source)


def memory_state(ctx: HostContext) -> MemoryState:
    """Hugepage pool, THP mode and oomd, from the host's facts."""
    hugepages, thp = ctx.hugepages, ctx.thp
    size = hugepages.mem("Hugepagesize")
    per_node: List[Tuple[int, int]] = []
    if size:
        pools = {p.node: p.total for p in hugepages.node_pools if p.size == size}
        per_node = [(node.id, pools[node.id]) for node in ctx.numa.nodes if node.id in pools]
    unit = ctx.unit
    oom_policy = None
    if unit.loaded:
        oom_policy = (f"ManagedOOMMemoryPressure={unit.get('ManagedOOMMemoryPressure') or '?'} "
                      f"ManagedOOMSwap={unit.get('ManagedOOMSwap') or '?'}")
    return MemoryState(
        nr_hugepages=hugepages.nr_hugepages,
        hugepage_bytes=size,
        hugepages_free=hugepages.mem("HugePages_Free"),
        hugepages_reserved=hugepages.mem("HugePages_Rsvd"),
        per_node=tuple(per_node),
        thp_enabled=thp.enabled,
        thp_defrag=thp.defrag,
        oomd=ctx.oomd_active,
        unit_oom_policy=oom_policy,
    )


def protected_words(ctx: HostContext, results: Sequence[CheckResult]) -> List[str]:
    """Words redaction must leave alone: components of every path read, the unit's name,
    and check ids (a host named ``vm`` must not turn ``/proc/sys/vm`` into a placeholder)."""
    words: Set[str] = set()
    for path in ctx.root.reads:
        parts = [part for part in path.split("/") if part]
        # A folder under /home names a person: that one stays private.
        words.update(p for i, p in enumerate(parts) if i == 0 or parts[i - 1] not in HOME_PARENTS)
    unit = ctx.config.unit
    words.update((unit, unit.rsplit(".", 1)[0]))
    for result in results:
        words.update(result.check.split("-"))
    return sorted(words)


# -- versions and provenance ----------------------------------------------------
def read_versions(root: Root) -> Versions:
    """Kernel, distribution, systemd, NVIDIA driver and CUDA, this tool."""
    os_release = root.read("/etc/os-release")
    if os_release is None:
        os_release = root.read("/usr/lib/os-release")
    pretty = parse_key_values(os_release or "").get("PRETTY_NAME", "").strip("\"'") or None
    systemd_line = _stdout(root.run(SYSTEMD_VERSION)).strip().splitlines()
    systemd = systemd_line[0].split(None, 1)[1] if systemd_line and " " in systemd_line[0] else None
    smi = _stdout(root.run(NVIDIA_SMI))
    return Versions(
        kernel=root.read_value("/proc/sys/kernel/osrelease"),
        distribution=pretty,
        systemd=systemd,
        nvidia_driver=_smi_field(smi, "Driver Version"),
        cuda=_smi_field(smi, "CUDA Version"),
        strata_doctor=__version__,
        python=".".join(str(v) for v in sys.version_info[:3]),
    )


def _smi_field(text: str, label: str) -> Optional[str]:
    match = re.search(re.escape(label) + r":\s*([0-9][\w.]*)", text)
    return match.group(1) if match else None


def _stdout(result: CommandResult) -> str:
    return result.stdout if result.ok else ""


def command_line(result: CommandResult) -> CommandLine:
    """A command with its outcome and shortened output."""
    lines = result.stdout.splitlines()
    output = "\n".join(lines[:COMMAND_LINES])
    if len(lines) > COMMAND_LINES:
        output += f"\n... ({len(lines) - COMMAND_LINES} more lines in the bundle)"
    if result.stderr.strip():
        output += ("\n" if output else "") + "stderr: " + result.stderr.strip().splitlines()[0]
    return CommandLine(result.display, command_outcome(result), output)


def unreadable_items(root: Root) -> List[Tuple[str, str]]:
    """(path or command, reason) for each thing that exists and could not be read.

    The one list behind the report's count and ``report --bundle``'s (its manifest's
    ``unreadable``). A path that is not there is no failure (:func:`absent_items`), nor is a
    program the host lacks (:func:`missing_programs`).
    """
    items = [(path, reason) for path, reason in sorted(root.reads.items())
             if reason is not None and reason not in ABSENT_REASONS]
    for _, result in sorted(root.commands.items()):
        failure = command_failure(result)
        if failure is not None:
            items.append((result.display, failure))
    return items


def absent_items(root: Root) -> List[Tuple[str, str]]:
    """(path, reason) for each path looked for and not on the host."""
    return [(path, reason) for path, reason in sorted(root.reads.items())
            if reason is not None and reason in ABSENT_REASONS]


def command_failure(result: CommandResult) -> Optional[str]:
    """Why a command the host has gave nothing to read (``timed out``, ``exit 1: <stderr>``),
    or None when it answered, a non-zero status that is an answer included."""
    if result.missing or result.ok:
        return None
    if result.timed_out:
        return "timed out"
    if result.key in STATUS_ANSWERS and result.stdout.strip():
        return None
    err = result.stderr.strip().splitlines()
    return command_outcome(result) + (f": {err[0]}" if err else "")


def missing_programs(root: Root) -> List[MissingProgram]:
    """Each program with a command line not found, named once, in name order."""
    asked: Dict[str, List[CommandResult]] = {}
    for _, result in sorted(root.commands.items()):
        asked.setdefault(result.argv[0], []).append(result)
    missing = []
    for program, results in sorted(asked.items()):
        gone = [r.display for r in results if r.missing]
        if gone:
            missing.append(MissingProgram(program, () if len(gone) == len(results) else tuple(gone)))
    return missing


def could_not_read(count: int) -> str:
    """The count of :func:`unreadable_items` in words, as the report and ``report --bundle``
    both say it: ``1 path or command could not be read``."""
    plural = "" if count == 1 else "s"
    return f"{count} path{plural} or command{plural} could not be read"


def root_would_add(root: Root) -> List[str]:
    """What the run could not read for want of privileges."""
    denied = [path for path, reason in sorted(root.reads.items()) if reason and "permission" in reason]
    for _, result in sorted(root.commands.items()):
        err = result.stderr.lower()
        if not result.ok and ("permission denied" in err or "access denied" in err):
            denied.append(result.display)
    return denied


def running_as_root() -> bool:
    """Whether this process has root's privileges (always False where there is no euid)."""
    geteuid = getattr(os, "geteuid", None)
    return bool(geteuid is not None and geteuid() == 0)


# -- output ---------------------------------------------------------------------
def report_data(report: Report) -> Dict[str, Any]:
    """The report's own sections as plain data (added to the check JSON)."""
    data = asdict(report)
    data["schema"] = REPORT_SCHEMA
    return data


def render_markdown(report: Report, redaction: Optional[List[str]]) -> str:
    """The Markdown report; ``redaction`` is the redaction summary, None when disabled."""
    from strata_doctor.templates import environment

    env = environment()
    env.filters.update(size=_size, md=markdown_escape, yesno=_yes_no, could_not_read=could_not_read)
    template = env.get_template("report.md.j2")
    text = template.render(
        report=report,
        redaction=redaction,
        as_root=running_as_root(),
    )
    return re.sub(r"\n{3,}", "\n\n", text)


def _size(value: Optional[int]) -> str:
    return format_bytes(value) if value is not None else "unknown"


def _yes_no(value: Optional[bool]) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def markdown_escape(text: str) -> str:
    """Escape the characters that would turn host text into Markdown or HTML markup."""
    return re.sub(r"([\\`*_<>|\[\]])", r"\\\1", text)
