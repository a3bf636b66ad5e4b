"""The preflight drop-in (fix --preflight): `check --quiet --fail-on error` before every engine
start prints nothing on a ready host and, on a host that is not, one journal line per error
naming the finding and the command that fixes it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import List

from tests.conftest import run_cli

DROPIN = "etc/systemd/system/strata.service.d/60-strata-doctor-preflight.conf"
LINE = re.compile(
    r"^strata-doctor: error: (?P<check>[a-z0-9-]+)/(?P<id>[a-z0-9-]+): .+"
    r" \(fix: strata-doctor fix --only (?P<fix>[a-z0-9-]+) --apply\)$"
)


def _preflight_args(root: Path) -> List[str]:
    text = (root / DROPIN).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStartPre="))
    words = shlex.split(line.partition("=")[2].lstrip("-"))
    assert words[:2] == ["strata-doctor", "check"]
    return words[1:]


def test_preflight_is_quiet_when_ready_and_names_each_error(two_node_host: Path, tmp_path: Path) -> None:
    fixed = Path(shutil.copytree(two_node_host, tmp_path / "fixed", symlinks=True))
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
