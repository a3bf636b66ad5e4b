"""The JSON document of check (strata-doctor/check/v1): docs/json-schema.md."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from strata_doctor import __version__
from strata_doctor.context import HostContext
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.model import CheckResult, Finding, Fix
from strata_doctor.output.sizes import sizes_data
from strata_doctor.output.text import EXIT_READY
from strata_doctor.rules.gpu import place_gpu

SCHEMA = "strata-doctor/check/v1"


# -- JSON ---------------------------------------------------------------------
def to_json_data(ctx: HostContext, results: Sequence[CheckResult], code: int) -> Dict[str, Any]:
    """The whole check result as plain data."""
    return {
        "schema": SCHEMA,
        "version": __version__,
        "ready": code == EXIT_READY,
        "exit_code": code,
        "engine": engine_data(ctx),
        "sizes": sizes_data(ctx.config),
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
    """Every fact section, whichever checks ran: the document has the same shape on every
    run (a fact no check needed is read here)."""
    return {
        "numa": numa_data(ctx),
        "cpu": cpu_data(ctx),
        "gpus": gpus_data(ctx),
        "hugepages": hugepages_facts(ctx),
        "thp": thp_facts(ctx),
        "oomd": oomd_facts(ctx),
    }


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
