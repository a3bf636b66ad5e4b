"""The preflight drop-in (fix --preflight): `check --quiet --fail-on error` before every engine
start prints nothing on a ready host and, on a host that is not, one journal line per error
naming the finding and the command that fixes it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import List

from tests.conftest import copy_host, run_cli

DROPIN = "etc/systemd/system/strata.service.d/60-strata-doctor-preflight.conf"
LINE = re.compile(
    r"^strata-doctor: error: (?P<check>[a-z0-9-]+)/(?P<id>[a-z0-9-]+): .+"
    r" \(fix: strata-doctor fix --only (?P<fix>[a-z0-9-]+) --apply\)$"
)


def _preflight_args(root: Path) -> List[str]:
    text = (root / DROPIN).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStartPre="))
    words = shlex.split(line.partition("=")[2].lstrip("-"))
    assert Path(words[0]).is_absolute() and Path(words[0]).name == "strata-doctor", words
    assert words[1] == "check"
    return words[1:]


def test_preflight_is_quiet_when_ready_and_names_each_error(two_node_host: Path, tmp_path: Path) -> None:
    fixed = copy_host(two_node_host, tmp_path / "fixed")
    applied = run_cli(["fix", "--root", str(fixed), "--preflight", "--apply", "--yes"])
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    args = _preflight_args(fixed)
    assert args == ["check", "--quiet", "--fail-on", "error"]

    ready = run_cli([*args, "--root", str(fixed)])
    assert ready.exit_code == 0
    assert ready.stdout == "" and ready.stderr == ""

    failing = run_cli([*args, "--root", str(two_node_host)])
    assert failing.exit_code == 1
    lines = failing.stdout.splitlines()
    data = json.loads(run_cli(["check", "--root", str(two_node_host), "--format", "json"]).stdout)
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert len(lines) == len(errors) >= 1
    for line, finding in zip(lines, errors):
        match = LINE.match(line)
        assert match, line
        assert (match["check"], match["id"]) == (finding["check"], finding["id"])
        assert match["fix"] == finding["check"]


def test_preflight_names_the_script_by_its_absolute_path(two_node_host: Path, preflight_script: Path) -> None:
    """systemd searches no virtual environment: ExecStartPre= names the installed script."""
    assert run_cli(["fix", "--root", str(two_node_host), "--preflight", "--apply"]).exit_code == 0
    text = (two_node_host / DROPIN).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStartPre="))
    assert line == f"ExecStartPre={preflight_script} check --quiet --fail-on error"


def test_preflight_script_from_this_machine_is_said(two_node_host: Path, preflight_script: Path) -> None:
    plan = run_cli(["fix", "--root", str(two_node_host), "--preflight"])
    assert plan.exit_code == 0
    assert f"note: --preflight: {preflight_script} is not inside {two_node_host}; the path is taken " \
        "from this machine" in plan.stdout


def test_preflight_script_inside_the_root_is_used_quietly(two_node_host: Path) -> None:
    script = two_node_host / "usr/local/bin/strata-doctor"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    plan = run_cli(["fix", "--root", str(two_node_host), "--preflight"],
                   env={"STRATA_DOCTOR_SCRIPT": "/usr/local/bin/strata-doctor"})
    assert plan.exit_code == 0
    assert "ExecStartPre=/usr/local/bin/strata-doctor check" in plan.stdout
    assert "taken from this machine" not in plan.stdout


def test_preflight_refuses_a_script_that_is_not_there(two_node_host: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "strata-doctor"
    result = run_cli(["fix", "--root", str(two_node_host), "--preflight", "--apply"],
                     env={"STRATA_DOCTOR_SCRIPT": str(missing)})
    assert result.exit_code == 2
    assert f"--preflight: {missing} is not an executable file" in result.stderr
    assert not (two_node_host / DROPIN).exists()
