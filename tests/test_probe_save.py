"""probe --save asks whether it can write before it measures; a run shorter than the default
says its figures may read low; a one-node host has nothing to compare; --output takes the
output. The measuring part is test_probe.py's fake: no real probe runs here."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Callable, List, Optional

import pytest

from strata_doctor.cli import probe as cli_probe
from strata_doctor.facts import saved_probe as probe_data
from strata_doctor.facts.probe_result import Cell
from strata_doctor.probe import plan as probe_plan
from strata_doctor.probe.system import NodeInfo
from tests.conftest import run_cli
from tests.test_probe import FakeSystem, GiB, sample_result, two_nodes

SHORT = "--seconds 0.1 is shorter than the default 10: each cell measured only briefly"
FAST = ["probe", "--size", "8MiB", "--seconds", "0.1", "--no-gpu"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., List[FakeSystem]]:
    made: List[FakeSystem] = []

    def make(nodes: Optional[List[NodeInfo]] = None) -> List[FakeSystem]:
        def factory() -> FakeSystem:
            made.append(FakeSystem(nodes or two_nodes()))
            return made[-1]
        monkeypatch.setattr("strata_doctor.probe.system.System", factory)
        monkeypatch.setattr(cli_probe, "SAVE_ROOT", str(tmp_path))
        return made
    return make


def test_run_notes_say_the_default_below_it() -> None:
    assert probe_plan.run_notes(10.0) == () and probe_plan.run_notes(60.0) == ()
    (note,) = probe_plan.run_notes(2.0)
    assert note.startswith("--seconds 2 is shorter than the default 10:") and "read low" in note


def test_a_short_run_warns_on_stderr_and_in_the_result(fake: Callable[..., object]) -> None:
    fake()
    result = run_cli([*FAST, "--format", "json"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"strata-doctor: warning: {SHORT}")
    assert any(note.startswith(SHORT) for note in json.loads(result.stdout)["notes"])


def test_a_default_run_does_not_warn() -> None:
    plan = probe_plan.make_plan(FakeSystem(two_nodes()), 8 << 20, 10.0)
    assert not any("shorter than the default" in n for n in plan.notes)


@pytest.mark.parametrize("how", ["chmod", "access"])
def test_save_refused_before_measuring_names_the_fix(fake: Callable[..., List[FakeSystem]],
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     how: str) -> None:
    made = fake()
    lib = tmp_path / "var/lib"
    lib.mkdir(parents=True)
    if how == "access":  # the answer of os.access as a user who may not write there
        monkeypatch.setattr(cli_probe, "_writable", lambda fd: False)
    elif os.geteuid() == 0:
        pytest.skip("root writes any folder: a mode of 0555 stops no one")
    lib.chmod(0o555)
    try:
        result = run_cli([*FAST, "--save"])
    finally:
        lib.chmod(0o755)
    assert result.exit_code == 2
    assert made == []  # refused before the system was even opened: nothing measured
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"strata-doctor: error: cannot save {tmp_path}/var/lib/strata-doctor/probe.json: {lib}: "
        "Permission denied; run as root, or keep the result with --format json --output FILE"]
    assert sorted(os.listdir(lib)) == []  # nothing made


def test_save_refusal_is_none_where_it_can_write(tmp_path: Path) -> None:
    assert cli_probe.save_refusal(tmp_path) is None
    assert list(tmp_path.iterdir()) == []  # asked, nothing made


def test_a_file_in_the_folders_place_is_refused_before_measuring(fake: Callable[..., List[FakeSystem]],
                                                                 tmp_path: Path) -> None:
    made = fake()
    (tmp_path / "var").write_text("not a folder")
    result = run_cli([*FAST, "--save"])
    assert result.exit_code == 2 and made == [] and result.stdout == ""
    assert result.stderr.startswith(
        f"strata-doctor: error: cannot save {tmp_path}/var/lib/strata-doctor/probe.json: ")
    assert result.stderr.count("\n") == 1


def test_a_failed_save_keeps_the_figures_and_says_why(fake: Callable[..., object],
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A save that fails after the measurement (the folder changed since it was asked)."""
    fake()
    monkeypatch.setattr(cli_probe, "save_refusal", lambda root: None)
    (tmp_path / "var").write_text("not a folder")
    result = run_cli(["probe", "--size", "8MiB", "--seconds", "0.1", "--no-gpu", "--save"])
    assert result.exit_code == 2
    assert "Read bandwidth (GB/s)" in result.stdout
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        f"strata-doctor: error: cannot save {tmp_path}/var/lib/strata-doctor/probe.json: ")


def test_output_writes_the_result_to_a_file(fake: Callable[..., object], tmp_path: Path) -> None:
    fake()
    out = tmp_path / "probe.json"
    result = run_cli([*FAST, "--format", "json", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert json.loads(out.read_text())["schema"] == "strata-doctor/probe/1"


def test_output_to_a_fifo_and_dev_null(fake: Callable[..., object], tmp_path: Path) -> None:
    fake()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: List[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = run_cli([*FAST, "--output", str(fifo)])
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert b"Read bandwidth (GB/s)" in got[0] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert run_cli([*FAST, "--output", os.devnull]).exit_code == 0


def test_output_refuses_a_folder_before_measuring(fake: Callable[..., List[FakeSystem]],
                                                  tmp_path: Path) -> None:
    made = fake()
    result = run_cli([*FAST, "--output", str(tmp_path)])
    assert result.exit_code == 2 and made == []
    assert result.stderr.splitlines() == [
        f"strata-doctor: error: --output {tmp_path}: is a folder, not a regular file; refusing to replace it"]


def test_one_node_has_nothing_to_compare() -> None:
    one = sample_result()._replace(cells=(Cell(0, 0, 61.04, 88.46, 1.0, 22),))
    text = probe_data.to_text(one)
    assert "CPU node      mem 0" not in text  # no matrix of one cell
    assert "One NUMA node (node 0): nothing to compare, no memory is remote" in text
    assert "Read bandwidth: 61.0 GB/s (22 threads); idle latency: 88.5 ns per dependent load" in text


def test_one_node_on_the_command_line(fake: Callable[..., object]) -> None:
    fake([NodeInfo(0, (0, 1), 16 * GiB, 8 * GiB)])
    result = run_cli(FAST)
    assert result.exit_code == 0, result.output
    assert "nothing to compare" in result.stdout and "mem 0" not in result.stdout


def test_thread_counts_are_words() -> None:
    two = probe_data.to_text(sample_result())
    assert "22 threads of the CPU node" in two and "(s)" not in two
    single = sample_result()._replace(cells=tuple(c._replace(threads=1) for c in sample_result().cells))
    assert "1 thread of the CPU node" in probe_data.to_text(single)
