"""check's text a person can act on: each row names the id ``--ignore`` takes, points at
``strata-doctor explain``, fits a terminal's width (never wrapped into a pipe), and the
map's boxes fit one too (docs/exit-codes.md#text-output)."""

from __future__ import annotations

import json
import re
from typing import List, Optional

import pytest

from strata_doctor.config import load_config
from strata_doctor.context import HostContext
from strata_doctor.model import CheckResult
from strata_doctor.output import text as render
from strata_doctor.output.hostmap import build_map
from strata_doctor.output.map import to_text as map_text
from strata_doctor.registry import all_checks, run_checks
from strata_doctor.root import Root
from tests.conftest import HOSTS, run_cli

SEED = HOSTS / "seed-box"
WRAPPED_HOSTS = ["seed-box", "epyc-nps4", "desktop-1s", "xeon-snc2", "hidden-node", "two-page-sizes"]
ROW = re.compile(r"^([✓i!✗?]) (\S+)\s")


def _rows(text: str) -> List[str]:
    """The rows of ``check``'s text: the lines that start with a mark."""
    return [line for line in text.splitlines() if ROW.match(line)]


def _check(*args: str) -> str:
    return run_cli(["check", "--root", str(SEED), *args], env={"NO_COLOR": "1"}).stdout


def test_every_row_that_is_not_ok_shows_the_finding_id_json_gives() -> None:
    data = json.loads(run_cli(["check", "--root", str(SEED), "--format", "json"]).stdout)
    wanted = {f"{f['check']}/{f['id']}" for f in data["findings"] if f["severity"] != "ok"}
    assert "numa-binding/unbound" in wanted and len(wanted) >= 5
    shown = {ROW.match(row).group(2) for row in _rows(_check())  # type: ignore[union-attr]
             if not row.startswith(("✓", "?"))}
    assert shown == wanted
    ok_rows = [row for row in _rows(_check()) if row.startswith("✓")]
    assert ok_rows and all("/" not in ROW.match(row).group(2) for row in ok_rows)  # type: ignore[union-attr]


def test_ignoring_the_id_a_row_shows_silences_exactly_that_row() -> None:
    before = _rows(_check())
    row = next(r for r in before if r.startswith("✗ numa-binding/unbound "))
    after = _rows(_check("--ignore", "numa-binding/unbound"))
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 1
    assert changed[0][0] == row
    assert changed[0][1] == "i" + row[1:] + " (ignored)"


def test_the_pointer_is_the_explain_command_and_question_marks_mean_skipped() -> None:
    text = _check()
    lines = text.splitlines()
    assert "docs/checks/" not in text
    for number, line in enumerate(lines):
        match = ROW.match(line)
        if match and match.group(1) in "i!✗":
            assert lines[number + 1].strip() == f"→ more: strata-doctor explain {match.group(2)}"
        if line.startswith("?"):
            assert " skipped: " in line
    assert not [line for line in lines if line.strip().startswith("?") and not line.startswith("?")]
    verbose = _check("-v").splitlines()
    ok = next(n for n, line in enumerate(verbose) if line.startswith("✓ numa-topology "))
    pointer = next(line for line in verbose[ok + 1:] if "→ more:" in line)
    assert pointer.strip() == "→ more: strata-doctor explain numa-topology/layout"


@pytest.mark.parametrize(("is_terminal", "columns", "width"), [
    (False, 60, None), (False, 0, None), (True, 60, 60), (True, 132, 132), (True, 5, render.MIN_WIDTH),
    (True, 0, 80),
])
def test_the_width_is_the_terminals_and_none_for_a_pipe(is_terminal: bool, columns: int,
                                                         width: Optional[int]) -> None:
    assert render.wrap_width(is_terminal, columns) == width


def test_no_wrapping_into_a_pipe_even_with_columns_set() -> None:
    result = run_cli(["check", "--root", str(SEED)], env={"NO_COLOR": "1", "COLUMNS": "60"})
    row = next(line for line in result.stdout.splitlines() if line.startswith("✗ oomd/trap-chain"))
    assert len(row) > 300 and row.endswith("(NRestarts=7)")


def _results(host: str) -> List[CheckResult]:
    root = Root(str(HOSTS / host))
    return run_checks(HostContext(root, load_config(root, None)), all_checks()[0], ())


def _squeezed(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("host", WRAPPED_HOSTS)
@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("verbose", [False, True])
def test_every_line_fits_the_width_and_nothing_is_lost(host: str, width: int, verbose: bool) -> None:
    results = _results(host)
    whole = render.to_text(results, 1, render.TextStyle(False), verbose)
    wrapped = render.to_text(results, 1, render.TextStyle(False, width), verbose)
    too_long = [line for line in wrapped.splitlines() if len(line) > width]
    assert not too_long
    assert _squeezed(wrapped) == _squeezed(whole)
    assert len(wrapped.splitlines()) > len(whole.splitlines())


def test_a_wide_terminal_keeps_the_column_and_a_narrow_one_puts_the_text_under_the_mark() -> None:
    results = _results("seed-box")
    wide = render.to_text(results, 1, render.TextStyle(False, 120)).splitlines()
    row = next(n for n, line in enumerate(wide) if line.startswith("✗ numa-binding/unbound"))
    column = wide[row].index("strata.service")
    assert wide[row + 1].startswith(" " * column) and wide[row + 1][column] != " "
    narrow = render.to_text(results, 1, render.TextStyle(False, 60)).splitlines()
    row = narrow.index("✗ numa-binding/unbound")
    assert narrow[row + 1].startswith("    strata.service is not bound")


@pytest.mark.parametrize("host", ["seed-box", "xeon-snc2", "epyc-nps4", "small-no-gpu", "hidden-node"])
def test_the_map_fits_60_columns_with_every_node_and_gpu(host: str) -> None:
    root = Root(str(HOSTS / host))
    picture = build_map(HostContext(root, load_config(root, None)))
    text = map_text(picture, False, 60)
    lines = text.splitlines()
    assert not [line for line in lines if len(line) > 60]
    for first, last in (("┌", "┐"), ("│", "│"), ("└", "┘")):  # every box closed on its right
        assert all(line.endswith(last) for line in lines if line.startswith(first))
    for node in picture.nodes:
        assert f"─ node {node.id} " in text
        if len(picture.nodes) > 1:  # its row of the distance table
            assert any(line.startswith(f"node{node.id} ") for line in lines)
    for gpu in picture.gpus:
        assert gpu.address in text
    boxes = str.maketrans("", "", "─│┌┐└┘")
    # The headline and the boxes hold the same words, in the same order, wrapped.
    assert _squeezed(text.split("\ndistances")[0].translate(boxes)) == \
        _squeezed(map_text(picture).split("\ndistances")[0].translate(boxes))
    plain = map_text(picture, True, 60)
    assert plain.isascii() and not [line for line in plain.splitlines() if len(line) > 60]
