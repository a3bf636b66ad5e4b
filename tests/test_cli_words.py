"""The words of `check`, `fix` and `--help`: plurals, no repeats, honest outcomes, next steps,
colour only where a terminal shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from strata_doctor.cli.options import use_color
from strata_doctor.model import CheckResult, Crash, Finding, Severity, Skip
from strata_doctor.output.text import TextStyle, to_text
from tests.conftest import copy_host, run_cli


def _host(tmp_path: Path, name: str) -> Path:
    return copy_host(name, tmp_path / name)


# -- check: the tally ----------------------------------------------------------------------
def _result(check: str, severity: Severity) -> CheckResult:
    return CheckResult(check, check, findings=(Finding(check, "x", severity, "s"),))


def test_the_tally_counts_in_plural_forms() -> None:
    results = [_result("a", Severity.ERROR), _result("b", Severity.ERROR), _result("c", Severity.WARNING),
               _result("d", Severity.INFO), _result("e", Severity.INFO), _result("f", Severity.OK),
               _result("g", Severity.OK), CheckResult("h", "h", skip=Skip("h", "no GPU")),
               CheckResult("i", "i", skip=Skip("i", "no GPU")),
               CheckResult("j", "j", crash=Crash("j", "ValueError: x"))]
    last = to_text(results, 3, TextStyle(False)).splitlines()[-1]
    assert last == "2 errors, 1 warning, 2 info, 2 ok, 2 skipped, 1 crashed: a check crashed (exit 3)"
    few = [_result("a", Severity.ERROR), _result("b", Severity.WARNING), _result("c", Severity.WARNING)]
    one = to_text(few, 1, TextStyle(False)).splitlines()[-1]
    assert one == "1 error, 2 warnings: not ready (exit 1)"


# -- fix: the plan -------------------------------------------------------------------------
def test_one_restart_step_per_unit_naming_every_fix_that_needs_it(tmp_path: Path) -> None:
    tree = _host(tmp_path, "seed-box")
    plan = json.loads(run_cli(["fix", "--root", str(tree), "--format", "json"]).stdout)["plan"]
    restarts = [m for m in plan["manual"] if m["text"].startswith("Restart strata.service")]
    assert len(restarts) == 1, plan["manual"]
    assert restarts[0]["text"] == ("Restart strata.service when convenient: the changes for "
                                   "numa-binding/unbound and oomd/trap-chain apply at its next start.")
    assert restarts[0]["finding"] == "numa-binding/unbound, oomd/trap-chain"
    text = run_cli(["fix", "--root", str(tree)]).stdout
    assert text.count("Restart strata.service") == 1
    # --restart takes it (once) instead of leaving it to the operator
    asked = json.loads(run_cli(["fix", "--root", str(tree), "--format", "json", "--restart"]).stdout)["plan"]
    assert [a["target"] for a in asked["actions"] if a["kind"] == "restart-unit"] == ["strata.service"]
    assert not any(m["text"].startswith("Restart ") for m in asked["manual"])


def test_a_plan_ends_with_its_next_step(tmp_path: Path) -> None:
    # seed-box: no swap drop-in, as its arena is pinned for the GPU (swap/gpu-pinned)
    four = run_cli(["fix", "--root", str(_host(tmp_path, "seed-box"))]).stdout
    assert "4 files to write; needs a restart of strata.service" in four and "file(s)" not in four
    assert four.splitlines()[-1] == "Next: run this again with --apply to write these 4 files."
    one = run_cli(["fix", "--root", str(_host(tmp_path, "vm-gpu-nonuma"))]).stdout
    assert "\n1 file to write; takes effect at once.\n" in one
    assert one.splitlines()[-1] == "Next: run this again with --apply to write this file."


def test_a_refused_plan_says_so_last(tmp_path: Path) -> None:
    tree = _host(tmp_path, "seed-box")
    numa = tree / "etc/systemd/system/strata.service.d/60-strata-doctor-numa.conf"
    numa.parent.mkdir(parents=True, exist_ok=True)
    numa.write_text("[Service]\n# written by hand\n")
    shown = run_cli(["fix", "--root", str(tree)])
    lines = shown.stdout.splitlines()
    assert lines[-2].startswith("cannot apply: /etc/systemd/system/strata.service.d/60-strata-doctor-numa")
    assert lines[-1] == "Next: solve the problems above; --apply refuses this plan until then."
    # The dry run exits as --apply would (docs/exit-codes.md): 2, with one line naming the problem.
    assert shown.exit_code == 2
    assert shown.stderr.splitlines() == ["strata-doctor: error: " + lines[-2]]
    as_json = run_cli(["fix", "--root", str(tree), "--format", "json"])
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["plan"]["problems"]
    applied = run_cli(["fix", "--root", str(tree), "--apply", "--yes"])
    assert applied.exit_code == shown.exit_code


# -- fix --apply: what happened, and what is next ------------------------------------------
def test_apply_shows_words_once_and_where_the_originals_are(tmp_path: Path) -> None:
    tree = _host(tmp_path, "seed-box")
    applied = run_cli(["fix", "--root", str(tree), "--apply", "--yes"])
    assert applied.exit_code == 0, applied.stderr
    out = applied.stdout
    assert f"Wrote 4 files; the originals are saved in {tree}/var/lib/strata-doctor/applies/0001/.\n" in out
    assert "configured: configured:" not in out
    assert "error trap → info configured: vm.nr_hugepages = 0 in /etc/sysctl.d/81-strata-doctor.conf" in out
    assert "Next:" not in out  # the plan it carried out has no "run with --apply" step
    again = run_cli(["fix", "--root", str(tree), "--apply", "--yes"])
    assert again.exit_code == 0, again.stderr
    assert ("Nothing to change: the fixes for numa-binding, numa-balancing, hugepages and oomd are "
            "already in place; the fix for cpu-frequency/powersave is a step left to you (above); "
            "nothing written.") in again.stdout
    assert "Run `cpupower frequency-set -g performance` as root." in again.stdout
    assert again.stdout.splitlines()[-1].startswith("Next: `strata-doctor check -v` says what the "
                                                    "configured fixes still wait for")
    only = run_cli(["fix", "--root", str(tree), "--only", "oomd"]).stdout
    assert ("Nothing to change: every fix is already in place (oomd); cpu-frequency/powersave is left "
            "alone (--only/--skip).") in only


def test_nothing_to_fix_is_not_called_already_in_place(tmp_path: Path) -> None:
    result = run_cli(["fix", "--root", str(_host(tmp_path, "no-gpu")), "--apply", "--yes"])
    assert result.exit_code == 0, result.stderr
    assert "already in place" not in result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == "Nothing to change: no finding on this host needs a fix; nothing written."
    assert lines[-1] == "Next: `strata-doctor check -v` explains the findings without an automatic fix."


def test_advice_only_fixes_are_left_to_the_operator_not_in_place(tmp_path: Path) -> None:
    result = run_cli(["fix", "--root", str(_host(tmp_path, "container-ro-sys")), "--apply", "--yes"])
    assert result.exit_code == 0, result.stderr
    assert "already in place" not in result.stdout
    assert ("Nothing to change: the fix for swap/swappable is a step left to you (above); nothing written."
            in result.stdout)
    assert "Left to you:\n  - " in result.stdout


# -- colour and help -----------------------------------------------------------------------
class _Tty:
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("env, color", [
    ({"TERM": "xterm-256color"}, True),
    ({"TERM": "dumb"}, False),
    ({"TERM": "xterm", "NO_COLOR": "1"}, False),
    ({"TERM": "xterm", "NO_COLOR": ""}, True),  # no-color.org: present and not empty
])
def test_colour_only_where_a_terminal_shows_it(monkeypatch: pytest.MonkeyPatch, env: Dict[str, str],
                                              color: bool) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert use_color(_Tty()) is color
    assert use_color(object()) is False  # not a terminal


@pytest.mark.parametrize("term, escapes", [("xterm", True), ("dumb", False)])
def test_no_escape_codes_on_a_dumb_terminal(tmp_path: Path, term: str, escapes: bool) -> None:
    """A real pseudo-terminal: click keeps the colour codes there, so only TERM=dumb removes them."""
    pty = pytest.importorskip("pty")
    tree = _host(tmp_path, "seed-box")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = term
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "strata_doctor", "check", "--root", str(tree)],
                              stdin=subprocess.DEVNULL, stdout=secondary, stderr=subprocess.DEVNULL,
                              env=env, timeout=60, check=False)
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(primary)
    out = b"".join(chunks)
    assert proc.returncode == 1 and b"not ready (exit 1)" in out
    assert (b"\x1b[" in out) is escapes


def test_top_level_help_shows_each_command_whole() -> None:
    out = run_cli(["--help"]).stdout.partition("Commands:")[2]
    assert "check" in out and "..." not in out and "…" not in out
    flat = " ".join(out.split())
    assert "check Check this host (or a captured one) for the engine; exit 1 when not ready." in flat
    assert "fix Show how to fix what `check` finds; --apply fixes it, --revert undoes it." in flat
