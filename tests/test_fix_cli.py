"""The ``fix`` command's contract: preview changes nothing, options, privileges, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_fix_hosts import make_host, snapshot


def test_preview_changes_nothing(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)
    result = run_cli(["fix", "--root", str(tree)])
    assert result.exit_code == 0, result.stderr
    assert "+++ b/etc/systemd/system/strata.service.d/60-strata-doctor-numa.conf" in result.stdout
    assert "$ systemctl daemon-reload" in result.stdout
    assert "needs a restart of strata.service" in result.stdout
    assert snapshot(tree) == original


def test_plan_as_json(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    result = run_cli(["fix", "--root", str(tree), "--format", "json", "--reserve-node"])
    data = json.loads(result.stdout)
    plan = data["plan"]
    assert plan["schema"] == "strata-doctor/fix-plan/v1" and data["applied"] is False
    paths = {f["path"]: f for f in plan["files"]}
    assert paths["/usr/local/bin/strata-numa"]["mode"] == "0755"
    assert paths["/etc/systemd/system/strata.slice"]["status"] == "create"
    assert [a["kind"] for a in plan["actions"]] == ["daemon-reload"]
    assert plan["takes_effect"] == "restart" and plan["problems"] == []


def test_numa_off_and_numa_node(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    off = json.loads(run_cli(["fix", "--root", str(tree), "--format", "json", "--numa", "off"]).stdout)
    assert off["plan"]["files"] == []
    zero = json.loads(run_cli(["fix", "--root", str(tree), "--format", "json", "--numa", "0"]).stdout)
    dropin = next(f for f in zero["plan"]["files"] if f["path"].endswith("60-strata-doctor-numa.conf"))
    assert "NUMAMask=0\nCPUAffinity=0-3\n" in dropin["content"]
    bad = run_cli(["fix", "--root", str(tree), "--numa", "near"])
    assert bad.exit_code == 2


def test_only_and_skip(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    skipped = json.loads(run_cli(["fix", "--root", str(tree), "--format", "json",
                                  "--skip", "numa-binding"]).stdout)
    assert skipped["plan"]["files"] == []
    assert any("left alone" in n for n in skipped["plan"]["notes"])
    only = json.loads(run_cli(["fix", "--root", str(tree), "--format", "json",
                               "--only", "numa-binding/unbound"]).stdout)
    assert len(only["plan"]["files"]) == 2


def test_apply_and_revert_exclude_each_other(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    result = run_cli(["fix", "--root", str(tree), "--apply", "--revert"])
    assert result.exit_code == 2 and "exclude" in result.stderr


def test_changing_the_live_host_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for flag in ("--apply", "--revert"):
        result = run_cli(["fix", flag])
        assert result.exit_code == 2
        assert "needs root" in result.stderr and "--root DIR" in result.stderr


def test_unknown_unit_stops_the_apply(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    (tree / ".strata-doctor/commands/systemctl-show-engine.service.txt").write_text(
        "Id=engine.service\nLoadState=not-found\nActiveState=inactive\nMainPID=0\n")
    original = snapshot(tree)
    result = run_cli(["fix", "--root", str(tree), "--apply", "--unit", "engine.service"])
    assert result.exit_code == 2 and "not known to systemd" in result.stderr
    assert snapshot(tree) == original


def test_missing_numactl_stops_an_apply_that_needs_it(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-239")
    (tree / "usr/bin/numactl").unlink()
    original = snapshot(tree)
    result = run_cli(["fix", "--root", str(tree), "--apply"])
    assert result.exit_code == 2 and "numactl is not installed" in result.stderr
    assert snapshot(tree) == original


def test_apply_output_shows_before_and_after(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    result = run_cli(["fix", "--root", str(tree), "--apply", "--format", "json"])
    data = json.loads(result.stdout)
    assert data["applied"] is True and data["exit_code"] == 0
    rows = {row["check"]: row for row in data["transitions"]}
    assert rows["numa-binding"]["before"] == "error unbound"
    assert rows["numa-binding"]["after"] == "info configured"
    assert rows["numa-topology"]["before"] == rows["numa-topology"]["after"]
    assert data["skipped_actions"] == [f"systemctl daemon-reload (writing into {tree})"]


def test_check_does_not_import_jinja2(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    code = ("import sys; from strata_doctor.cli import main\n"
            "try:\n    main(['check', '--root', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "assert 'jinja2' not in sys.modules, 'check imported jinja2'")
    subprocess.run([sys.executable, "-c", code, str(tree)], check=True, capture_output=True)
