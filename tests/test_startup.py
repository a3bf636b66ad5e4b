"""What a replayed check imports, and that the cheap plug-in look-up still finds plug-ins."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from strata_doctor.registry import ENTRY_POINT_GROUP, _group_may_be_declared, plugin_checks

HEAVY = ("jinja2", "yaml", "psutil", "subprocess", "concurrent.futures", "importlib.metadata")


def _modules_after(code: str) -> set[str]:
    code += "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_replayed_check_imports_nothing_heavy(two_node_host: Path) -> None:
    if _group_may_be_declared():
        pytest.skip("a plug-in is installed here: importlib.metadata is needed")
    baseline = _modules_after("pass")
    code = textwrap.dedent(f"""
        from strata_doctor.cli import main
        try:
            main(["check", "--root", {str(two_node_host)!r}, "--quiet"])
        except SystemExit:
            pass
    """)
    loaded = _modules_after(code) - baseline
    assert not [m for m in HEAVY if m in loaded]


def test_plugins_are_still_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "demo_strata_plugin.py").write_text(textwrap.dedent("""
        from strata_doctor.registry import Check

        class DemoCheck(Check):
            '''A demo.'''
            id = "demo-plugin"
            title = "Demo"

            def run(self, ctx):
                return iter(())
    """))
    info = tmp_path / "demo_strata_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-strata-plugin\nVersion: 1.0\n")
    entry = "demo-plugin = demo_strata_plugin:DemoCheck"
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _group_may_be_declared()
    found, failed = plugin_checks()
    assert [c.id for c in found] == ["demo-plugin"] and failed == []
