"""Renderers for check results: text for people, JSON for programs.

JSON goes to stdout alone; its schema is ``strata-doctor/check/v1`` (docs/json-schema.md).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from strata_doctor import __version__
from strata_doctor.context import HostContext
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.model import CheckResult, Finding, Fix, Severity
from strata_doctor.rules.gpu import place_gpu

SCHEMA = "strata-doctor/check/v1"
EXIT_READY, EXIT_FINDINGS, EXIT_USAGE, EXIT_CRASH = 0, 1, 2, 3
MARKS = {Severity.OK: "✓", Severity.INFO: "i", Severity.WARNING: "!", Severity.ERROR: "✗"}
COLORS = {Severity.OK: "green", Severity.INFO: "blue", Severity.WARNING: "yellow", Severity.ERROR: "red"}
# What a stream whose encoding lacks a symbol gets instead (PYTHONIOENCODING=latin-1, a C
# locale): the marks and the arrows of the text and the report; anything else becomes '?'.
ASCII = {
    "✓": "+", "✗": "x", "→": "->", "←": "<-", "—": "--", "–": "-", "≥": ">=", "≤": "<=",
    "≈": "~", "×": "x", "…": "...", "·": "*", "•": "*", "‘": "'", "’": "'", "“": '"', "”": '"',
}
ASCII_ERRORS = "strata-doctor-ascii"


def ascii_marks(error: UnicodeError) -> Tuple[str, int]:
    """A codecs error handler: the ASCII stand-in of each character the stream cannot encode."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII.get(char, "?") for char in text), error.end


def fit_stream(stream: Any) -> bool:
    """Make a text stream write :data:`ASCII` stand-ins for the symbols its encoding lacks,
    instead of raising UnicodeEncodeError. True when it had to."""
    import codecs

    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "".join(ASCII).encode(encoding)
        return False
    except UnicodeEncodeError:
        pass
    except LookupError:  # an encoding Python does not know: leave the stream alone
        return False
    try:
        codecs.lookup_error(ASCII_ERRORS)
    except LookupError:
        codecs.register_error(ASCII_ERRORS, ascii_marks)
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None:
        return False
    reconfigure(errors=ASCII_ERRORS)
    return True


def exit_code(results: Sequence[CheckResult], fail_on: Severity) -> int:
    """0 ready, 1 a finding at or above ``fail_on``, 3 a check crashed."""
    if any(r.crash for r in results):
        return EXIT_CRASH
    if any(f.severity >= fail_on for r in results for f in r.findings):
        return EXIT_FINDINGS
    return EXIT_READY


# -- JSON ---------------------------------------------------------------------
def to_json_data(ctx: HostContext, results: Sequence[CheckResult], code: int) -> Dict[str, Any]:
    """The whole check result as plain data."""
    return {
        "schema": SCHEMA,
        "version": __version__,
        "ready": code == EXIT_READY,
        "exit_code": code,
        "engine": engine_data(ctx),
        "facts": facts_data(ctx),
        "checks": [check_data(r) for r in results],
        "findings": [finding_data(f) for r in results for f in r.findings],
    }


def to_json(ctx: HostContext, results: Sequence[CheckResult], code: int) -> str:
    """Serialise with sorted keys so equal hosts give equal bytes."""
    import json  # imported here, like textwrap below: `check --quiet` needs neither

    return json.dumps(to_json_data(ctx, results, code), indent=2, sort_keys=True) + "\n"


def engine_data(ctx: HostContext) -> Dict[str, Any]:
    """The engine settings in effect."""
    c = ctx.config
    return {
        "arena_bytes": c.arena_bytes,
        "kv_bytes": c.kv_bytes,
        "headroom_bytes": c.headroom_bytes,
        "unit": c.unit,
        "workers": c.workers,
        "hugepages": c.hugepages,
        "numa": c.numa,
    }


def facts_data(ctx: HostContext) -> Dict[str, Any]:
    """Facts the checks read in this run (facts nobody needed are not read)."""
    cache = vars(ctx)
    facts: Dict[str, Any] = {}
    for name, render in FACT_RENDERERS.items():
        if name in cache:
            facts[name] = render(ctx)
    if "gpus" in cache:
        facts["gpus"] = gpus_data(ctx)
    return facts


def numa_data(ctx: HostContext) -> Dict[str, Any]:
    """``facts.numa``."""
    numa = ctx.numa
    return {
        "nodes": [
            {
                "id": n.id,
                "cpus": sorted(n.cpus),
                "memory_total_bytes": n.memory_total,
                "memory_free_bytes": n.memory_free,
                "distances": {str(o): d for o, d in n.distances},
                "memory_only": n.memory_only,
                "cpus_source": n.cpus_source,
            }
            for n in numa.nodes
        ],
        "online_cpus": format_cpulist(numa.online_cpus),
        "offline_cpus": format_cpulist(numa.offline_cpus),
        "quirks": list(numa.quirks),
    }


def cpu_data(ctx: HostContext) -> Dict[str, Any]:
    """``facts.cpu``."""
    cpu = ctx.cpu
    return {
        "model": cpu.model,
        "sockets": cpu.sockets,
        "expert_isa": list(cpu.expert_isa),
    }


def gpus_data(ctx: HostContext) -> List[Dict[str, Any]]:
    """``facts.gpus``."""
    placement = ctx.placement
    compute = placement.gpu.address if placement else None
    rows = []
    for gpu in ctx.gpus:
        chosen = gpu.address == compute
        node, source, _ = place_gpu(gpu, ctx.numa)
        rows.append({
            "address": gpu.address,
            "vendor": f"{gpu.vendor:04x}" if gpu.vendor is not None else None,
            "device": f"{gpu.device:04x}" if gpu.device is not None else None,
            "class": f"{gpu.pci_class:06x}",
            "driver": gpu.driver,
            "numa_node": node,
            "numa_node_raw": gpu.numa_node_raw,
            "numa_node_source": source,
            "local_cpus": sorted(gpu.local_cpus),
            "boot_vga": gpu.boot_vga,
            "compute": chosen,
            "choice_reason": placement.choice_reason if chosen and placement else None,
            "link": {
                "current_speed": gpu.link.current_speed,
                "max_speed": gpu.link.max_speed,
                "current_width": gpu.link.current_width,
                "max_width": gpu.link.max_width,
            },
        })
    return rows


def hugepages_facts(ctx: HostContext) -> Dict[str, Any]:
    """``facts.hugepages`` (doctor/facts/hugepages.py)."""
    from strata_doctor.facts.hugepages import hugepages_data

    return hugepages_data(ctx.hugepages)


def thp_facts(ctx: HostContext) -> Dict[str, Any]:
    """``facts.thp`` (doctor/facts/hugepages.py)."""
    from strata_doctor.facts.thp import thp_data

    return thp_data(ctx.thp)


def oomd_facts(ctx: HostContext) -> Dict[str, Any]:
    """``facts.oomd`` (doctor/facts/oomd.py)."""
    from strata_doctor.facts.oomd import oomd_data

    return oomd_data(ctx.oomd)


FACT_RENDERERS = {"numa": numa_data, "cpu": cpu_data, "hugepages": hugepages_facts, "thp": thp_facts,
                  "oomd": oomd_facts}
"""Fact sections by the HostContext attribute that holds them; extend to add a section."""


def check_data(result: CheckResult) -> Dict[str, Any]:
    """One row of ``checks``."""
    if result.crash:
        status, reason = "crashed", result.crash.error
    elif result.skip:
        status, reason = "skipped", result.skip.reason
    else:
        status, reason = result.worst.label, None
    return {"id": result.check, "title": result.title, "status": status, "reason": reason}


def finding_data(finding: Finding) -> Dict[str, Any]:
    """One row of ``findings``."""
    return {
        "id": finding.id,
        "check": finding.check,
        "severity": finding.severity.label,
        "ignored": finding.ignored,
        "summary": finding.summary,
        "detail": finding.detail,
        "evidence": [{"source": e.source, "value": e.value} for e in finding.evidence],
        "fix": fix_data(finding.fix) if finding.fix else None,
        "doc": finding.doc,
    }


def fix_data(fix: Fix) -> Dict[str, Any]:
    """A proposed fix as data (paths and actions, not rendered contents)."""
    return {
        "summary": fix.summary,
        "files": [{"path": f.path, "template": f.template, "mode": f"{f.mode:04o}"} for f in fix.files],
        "actions": [{"kind": a.kind, "target": a.target, "value": a.value} for a in fix.actions],
        "manual": [m.text for m in fix.manual],
        "takes_effect": fix.takes_effect,
    }


# -- text ---------------------------------------------------------------------
class TextStyle:
    """Marks and optional colour for terminal output."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def mark(self, severity: Optional[Severity], text: str) -> str:
        """Colour ``text`` by severity (None: skipped or crashed) when colour is on."""
        if not self.color:
            return text
        import click

        if severity is None:
            return click.style(text, fg="magenta")
        return click.style(text, fg=COLORS[severity], bold=severity >= Severity.WARNING)


def to_text(
    results: Sequence[CheckResult], code: int, style: TextStyle, verbose: bool = False
) -> str:
    """flutter-doctor-like lines: a mark, the check id, the finding's summary."""
    width = max((len(r.check) for r in results), default=10)
    lines: List[str] = []
    for result in results:
        lines.extend(_result_lines(result, width, style, verbose))
    lines.append("")
    lines.append(_tally(results, code))
    return "\n".join(lines) + "\n"


def _result_lines(result: CheckResult, width: int, style: TextStyle, verbose: bool) -> List[str]:
    label = result.check.ljust(width)
    if result.crash:
        return [style.mark(None, "✗") + f" {label}  crashed: {result.crash.error}"]
    if result.skip:
        return [style.mark(None, "?") + f" {label}  skipped: {result.skip.reason}"]
    lines = []
    for finding in result.findings:
        mark = style.mark(finding.severity, MARKS[finding.severity])
        suffix = " (ignored)" if finding.ignored else ""
        lines.append(f"{mark} {label}  {finding.summary}{suffix}")
        if verbose:
            lines.extend(_verbose_lines(finding, width))
    return lines


def _verbose_lines(finding: Finding, width: int) -> List[str]:
    import textwrap

    indent = " " * (width + 4)
    lines = []
    if finding.detail:
        lines.extend(textwrap.wrap(finding.detail, 96, initial_indent=indent, subsequent_indent=indent))
    for ev in finding.evidence:
        lines.append(f"{indent}· {ev.source}: {ev.value}")
    if finding.fix:
        lines.append(f"{indent}→ fix: {finding.fix.summary} (strata-doctor fix --only {finding.check})")
    if finding.doc:
        lines.append(f"{indent}? {finding.doc}")
    return lines


TALLY_WORDS = (("error", "errors"), ("warning", "warnings"), ("info", "info"), ("ok", "ok"),
               ("skipped", "skipped"), ("crashed", "crashed"))
"""The tally's keys in order, each with its plural ("2 errors", "3 info", "2 skipped")."""


def _tally(results: Sequence[CheckResult], code: int) -> str:
    """The last line: the checks counted by their worst finding (or skipped, crashed), the verdict."""
    counts: Dict[str, int] = {}
    for result in results:
        key = "crashed" if result.crash else "skipped" if result.skip else result.worst.label
        counts[key] = counts.get(key, 0) + 1
    parts = [f"{counts[k]} {plural if counts[k] != 1 else k}" for k, plural in TALLY_WORDS if counts.get(k)]
    verdict = {EXIT_READY: "ready", EXIT_FINDINGS: "not ready", EXIT_CRASH: "a check crashed"}[code]
    return f"{', '.join(parts)}: {verdict} (exit {code})"


def quiet_lines(results: Sequence[CheckResult], fail_on: Severity) -> List[str]:
    """One line per finding at or above ``fail_on`` and per crash, for ``--quiet``."""
    lines = []
    for result in results:
        if result.crash:
            lines.append(f"strata-doctor: {result.check} crashed: {result.crash.error}")
        for f in result.findings:
            if f.severity >= fail_on:
                hint = f" (fix: strata-doctor fix --only {f.check} --apply)" if f.fix else ""
                lines.append(f"strata-doctor: {f.severity.label}: {f.check}/{f.id}: {f.summary}{hint}")
    return lines
