"""Fleet formats for ``check``: Prometheus textfile metrics and node-feature-discovery labels.

``--format prometheus`` writes what node_exporter's textfile collector reads
(``--collector.textfile.directory``); ``--format nfd`` writes a feature file for
node-feature-discovery's local source (``/etc/kubernetes/node-feature-discovery/features.d/``).
With ``--output FILE`` the file is replaced atomically (a temporary file in the same
directory, then a rename), so neither reader ever sees half a file. See docs/fleet.md.
"""

from __future__ import annotations

import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from strata_doctor import __version__
from strata_doctor.context import HostContext
from strata_doctor.model import CheckResult, Severity

PREFIX = "strata_doctor"
NFD_PREFIX = "strata-doctor."


def emit(fmt: str, ctx: HostContext, results: Sequence[CheckResult], code: int,
         output: Optional[str]) -> None:
    """Render ``fmt`` (``prometheus`` or ``nfd``) to stdout, or atomically to ``output``."""
    text = to_prometheus(ctx, results, code) if fmt == "prometheus" else to_nfd(ctx, results, code)
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)


def write_atomic(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` under doctor/output/files.py's rule (``-`` is standard
    output; folders, FIFOs, devices and symlinks are refused): a temporary file in the same
    directory, fsync, rename; mode 0644, as the collector may run as another user."""
    from strata_doctor.output.files import write_text

    write_text(path, text, 0o644)


# -- facts both formats share -------------------------------------------------
def gpu_node(ctx: HostContext) -> Tuple[Optional[str], Optional[int]]:
    """The compute GPU's address and NUMA node (None, None without a GPU)."""
    placement = ctx.placement
    if placement is None:
        return None, None
    return placement.gpu.address, placement.node


def _counts(results: Sequence[CheckResult]) -> Dict[str, int]:
    counts = {s.label: 0 for s in Severity}
    for result in results:
        for finding in result.findings:
            counts[finding.severity.label] += 1
    counts["crashed"] = sum(1 for r in results if r.crash)
    return counts


# -- Prometheus -----------------------------------------------------------------
def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


def _metric(lines: List[str], name: str, kind: str, help_text: str,
            samples: Sequence[Tuple[str, float]]) -> None:
    lines.append(f"# HELP {PREFIX}_{name} {help_text}")
    lines.append(f"# TYPE {PREFIX}_{name} {kind}")
    for labels, value in samples:
        number = str(int(value)) if float(value).is_integer() else repr(float(value))
        lines.append(f"{PREFIX}_{name}{labels} {number}")


def to_prometheus(ctx: HostContext, results: Sequence[CheckResult], code: int) -> str:
    """node_exporter textfile-collector metrics; no timestamps (the collector adds mtime)."""
    lines: List[str] = []
    _metric(lines, "ready", "gauge", "1 when the host is ready for the engine (check exit code 0).",
            [("", 1 if code == 0 else 0)])
    _metric(lines, "exit_code", "gauge", "Exit code of strata-doctor check (0 ready, 1 findings, 3 crash).",
            [("", code)])
    _metric(lines, "finding", "gauge",
            "One series per finding of the last check, labelled by check, id and severity.",
            [(_labels(check=f.check, id=f.id, severity=f.severity.label), 1)
             for r in results for f in r.findings])
    _metric(lines, "findings", "gauge", "Findings of the last check by severity.",
            [(_labels(severity=k), v) for k, v in _counts(results).items()])
    _metric(lines, "check_status", "gauge", "1 for each check's status (ok, info, warning, error, "
            "skipped, crashed).", [(_labels(check=r.check, status=_status(r)), 1) for r in results])
    address, node = gpu_node(ctx)
    if address is not None and node is not None:
        _metric(lines, "gpu_numa_node", "gauge", "NUMA node of the compute GPU.",
                [(_labels(gpu=address), node)])
    headroom = ctx.arena_headroom
    if headroom is not None:
        _metric(lines, "arena_headroom_bytes", "gauge",
                "Bytes left on the planned nodes after arena, K/V and headroom (negative: short).",
                [(_labels(nodes=headroom[0]), headroom[1])])
    _metric(lines, "info", "gauge", "strata-doctor version.", [(_labels(version=__version__), 1)])
    return "\n".join(lines) + "\n"


def _status(result: CheckResult) -> str:
    if result.crash:
        return "crashed"
    if result.skip:
        return "skipped"
    return result.worst.label


# -- node-feature-discovery ---------------------------------------------------
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def _nfd_value(value: str) -> str:
    # Kubernetes label values: at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric.
    cleaned = _LABEL_VALUE.sub("_", value)[:63].strip("_.-")
    return cleaned


def to_nfd(ctx: HostContext, results: Sequence[CheckResult], code: int) -> str:
    """A feature file for node-feature-discovery's local source: ``name=value`` lines,
    which NFD publishes as ``feature.node.kubernetes.io/strata-doctor.<name>`` labels."""
    counts = _counts(results)
    labels: Dict[str, str] = {
        "ready": "true" if code == 0 else "false",
        "errors": str(counts["error"]),
        "warnings": str(counts["warning"]),
        "numa-nodes": str(len(ctx.numa.nodes)),
    }
    labels.update(_gpu_labels(ctx))
    headroom = ctx.arena_headroom
    if headroom is not None:
        labels["arena-fits"] = "true" if headroom[1] >= 0 else "false"
    failing = sorted({f.check for r in results for f in r.findings if f.severity >= Severity.ERROR})
    if failing:
        labels["failing"] = _nfd_value(".".join(failing))
    lines = [f"# strata-doctor {__version__}: check exit code {code}"]
    lines += [f"{NFD_PREFIX}{name}={value}" for name, value in labels.items()]
    return "\n".join(lines) + "\n"


def _gpu_labels(ctx: HostContext) -> Dict[str, str]:
    """Whether the host has a compute GPU, and its node and address when known."""
    address, node = gpu_node(ctx)
    labels = {"gpu": "true" if address else "false"}
    if node is not None:
        labels["gpu-numa-node"] = str(node)
    if address:
        labels["gpu-address"] = _nfd_value(address.replace(":", "-"))
    return labels
