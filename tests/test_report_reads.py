"""The output layer reads nothing from the host: once a host's facts are computed, building
the report, its JSON and its map asks the Root for nothing more."""

from __future__ import annotations

from typing import Any, Callable, List

import pytest

from strata_doctor.config import load_config
from strata_doctor.context import HostContext
from strata_doctor.model import Severity
from strata_doctor.output import json as render_json
from strata_doctor.output import text as render
from strata_doctor.output.hostmap import build_map
from strata_doctor.output.report import build_report, private_values, protected_words
from strata_doctor.registry import builtin_checks, run_checks
from strata_doctor.root import Root
from tests.conftest import HOSTS

HOST_ACCESS = ("read_bytes", "read", "read_value", "exists", "is_dir", "listdir", "readlink",
               "link_name", "file_size", "stat", "run", "run_all")
"""Every Root method that reads a host file, lists a folder or runs a command."""
REPORT_FACTS = (
    "numa", "cpu", "gpus", "placement", "smi_query", "meminfo", "dmi_system", "os_release",
    "software_versions", "unit", "binding_plan", "binding_state", "engine_process", "hugepages",
    "thp", "oomd", "oomd_active", "saved_probe", "arena_headroom", "pci_addresses", "cpu_arch",
)
"""The HostContext facts the report, its JSON and its map show."""


def _watch(root: Root, calls: List[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in HOST_ACCESS:
        method = getattr(root, name)

        def counted(*args: Any, _name: str = name, _method: Callable[..., Any] = method) -> Any:
            calls.append(f"{_name}{args}")
            return _method(*args)

        monkeypatch.setattr(root, name, counted)


@pytest.mark.skipif(not (HOSTS / "seed-box").is_dir(), reason="no fixture hosts")
def test_the_report_reads_nothing_once_the_facts_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    root = Root(str(HOSTS / "seed-box"))
    ctx = HostContext(root, load_config(root, None))
    results = run_checks(ctx, builtin_checks(), ())
    code = render.exit_code(results, Severity.ERROR)
    for name in REPORT_FACTS:
        getattr(ctx, name)
    records = (dict(root.reads), dict(root.commands), dict(root.probes), dict(root.stats))
    calls: List[str] = []
    _watch(root, calls, monkeypatch)

    report = build_report(ctx, results, code)
    render_json.to_json_data(ctx, results, code)
    build_map(ctx)
    protected_words(ctx, results)
    private_values(ctx)

    assert calls == []
    assert (dict(root.reads), dict(root.commands), dict(root.probes), dict(root.stats)) == records
    assert report.versions.kernel and report.hardware.nodes
