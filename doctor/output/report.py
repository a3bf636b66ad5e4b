"""``strata-doctor report``: the check results as a bug report in the seed report's shape.

The report is data first (:class:`~strata_doctor.output.report_model.Report`), rendered to
Markdown by ``templates/report.md.j2`` or to JSON (the check JSON plus a ``report``
section). Every fact it shows (versions, the hugepage and THP state, nvidia-smi) comes
from the host's :class:`~strata_doctor.context.HostContext`, whose readers read it through
the Root, so a bundle replays the report as well as the checks; nothing here reads the host.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from typing import List, Optional, Sequence, Set, Tuple

from strata_doctor import __version__
from strata_doctor.config import EngineConfig
from strata_doctor.context import HostContext
from strata_doctor.facts.gpu import normalize_address
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.model import CheckResult, Finding, Severity
from strata_doctor.output.provenance import (
    absent_items,
    command_line,
    missing_programs,
    root_would_add,
    unreadable_items,
)
from strata_doctor.output.report_model import (
    CheckLine,
    EngineLine,
    FindingLine,
    GpuLine,
    Hardware,
    MemoryState,
    NodeLine,
    Report,
    Versions,
)
from strata_doctor.output.text import EXIT_CRASH, EXIT_READY
from strata_doctor.root import Root
from strata_doctor.rules.binding import numactl_line
from strata_doctor.rules.gpu import place_gpu
from strata_doctor.rules.isa import arm_cpu_name, arm_isa

ISA_NAMES = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16",
             "avx512_vnni": "AVX-512 VNNI", "amx_tile": "AMX", "amx_bf16": "AMX BF16"}
HOME_PARENTS = ("home", "Users")


def build_report(ctx: HostContext, results: Sequence[CheckResult], code: int) -> Report:
    """Collect the report's data from the context's facts and the check results."""
    report = Report(
        verdict=verdict_line(results, code),
        ready=code == EXIT_READY,
        exit_code=code,
        hardware=read_hardware(ctx),
        engine=engine_line(ctx),
        memory=memory_state(ctx),
        findings=_finding_lines(results),
        other_checks=tuple(_other_checks(results)),
        versions=read_versions(ctx),
        commands=(),
        unreadable=(),
        root_would_add=(),
        live=ctx.root.live,
        measured=measured_text(ctx),
        host_map=host_map(ctx),
    )
    # Commands and unreadable paths last: every read above must be in them.
    return _with_provenance(report, ctx.root)


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
    from strata_doctor.output.map_mermaid import to_mermaid

    try:
        return to_mermaid(build_map(ctx))
    except PlanError:  # numa: N names no node; the checks say so
        return None



def _with_provenance(report: Report, root: Root) -> Report:
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
    problems = _problems(results)
    if code == EXIT_CRASH:
        crashed = ", ".join(r.check for r in results if r.crash)
        return f"A check crashed ({crashed}); the other checks still ran"
    if code != EXIT_READY and problems:
        more = len(problems) - 1
        tail = f" (+{more} more problem{_plural(more)})" if more else ""
        return f"Not ready: {problems[0].check}: {problems[0].summary}{tail}"
    if problems:
        return f"Ready, with {len(problems):,} warning{_plural(len(problems))}: {problems[0].summary}"
    return f"Ready: {len(results):,} checks found nothing to fix"


def _problems(results: Sequence[CheckResult]) -> List[Finding]:
    """Warnings and errors, worst first (in check order within a severity)."""
    findings = sorted((f for r in results for f in r.findings), key=lambda f: -f.severity)
    return [f for f in findings if f.severity >= Severity.WARNING]


def _plural(count: int) -> str:
    return "s" if count > 1 else ""


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
    numa, cpu, arch = ctx.numa, ctx.cpu, ctx.cpu_arch
    online = numa.online_cpus or frozenset().union(*(n.cpus for n in numa.nodes))
    ids = [n.id for n in numa.nodes]
    return Hardware(
        gpus=gpu_lines(ctx),
        cpu_model=cpu.model or (arm_cpu_name(arch) if arch.arm_cores else None),
        sockets=cpu.sockets,
        cores=cpu.core_count(frozenset(online)) if online else 0,
        threads=len(online),
        isa=(arm_isa(arch.features) if arch.arch in ("arm64", "arm")
             else tuple(ISA_NAMES.get(flag, flag) for flag in cpu.expert_isa)),
        # x86 flags without vendor_id (a hand-written cpuinfo) still name x86's ISA
        isa_family="x86" if cpu.expert_isa and arch.arch == "other" else arch.arch,
        pci_functions=len(ctx.pci_addresses),
        nodes=node_lines(ctx),
        memory_total_bytes=_memory_total(ctx),
        distances=tuple((n.id, tuple(n.distance_to(o) for o in ids)) for n in numa.nodes),
        system=ctx.dmi_system.name,
    )


def node_lines(ctx: HostContext) -> Tuple[NodeLine, ...]:
    """Every NUMA node's CPUs, cores and memory, in id order."""
    cpu = ctx.cpu
    return tuple(
        NodeLine(n.id, format_cpulist(n.cpus), cpu.core_count(n.cpus) if n.cpus else 0, len(n.cpus),
                 n.memory_total, n.memory_free, n.memory_only)
        for n in ctx.numa.nodes
    )


def _memory_total(ctx: HostContext) -> Optional[int]:
    """``MemTotal`` of /proc/meminfo, else the nodes' sum; None when neither says."""
    return ctx.meminfo.get("MemTotal") or sum(n.memory_total or 0 for n in ctx.numa.nodes) or None


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
        planned = numactl_line(plan)
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



# -- versions -------------------------------------------------------------------
def read_versions(ctx: HostContext) -> Versions:
    """Kernel, distribution, systemd, NVIDIA driver and CUDA, this tool."""
    software = ctx.software_versions
    return Versions(
        kernel=software.kernel,
        distribution=ctx.os_release.pretty_name,
        systemd=software.systemd,
        nvidia_driver=software.nvidia_driver,
        cuda=software.cuda,
        strata_doctor=__version__,
        python=".".join(str(v) for v in sys.version_info[:3]),
    )
