"""A stream that cannot encode the marks gets ASCII ones, from check, fix, report and map
alike (cli/options.py ascii_only; docs/exit-codes.md#text-output), with the same exit code.

Run as the console script runs, in a child process: click writes UTF-8 to a stream that
says ASCII, and the C locale turns on Python's UTF-8 mode, so only a real process shows
what a reader of PYTHONIOENCODING=ascii or LC_ALL=C gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

from strata_doctor.cli.options import ascii_only, stream_encoding
from strata_doctor.output.text import MARK_SYMBOLS, encodes_marks, to_plain
from tests.conftest import HOSTS

SEED = str(HOSTS / "seed-box")
COMMANDS = [["check", "-v"], ["fix"], ["report"], ["map"]]
UTF8 = {"LC_ALL": "C.UTF-8"}


def _run(args: List[str], env: Dict[str, str]) -> Tuple[int, bytes, bytes]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONIOENCODING", "PYTHONUTF8", "LC_ALL", "LC_CTYPE", "LANG", "COLUMNS")}
    proc = subprocess.run([sys.executable, "-m", "strata_doctor", *args, "--root", SEED],
                          env={**base, "NO_COLOR": "1", **env}, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def in_utf8() -> Dict[str, Tuple[int, bytes, bytes]]:
    return {args[0]: _run(args, UTF8) for args in COMMANDS}


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C"}, {"LC_ALL": "POSIX"}],
                         ids=["PYTHONIOENCODING=ascii", "LC_ALL=C", "LC_ALL=POSIX"])
@pytest.mark.parametrize("args", COMMANDS, ids=[args[0] for args in COMMANDS])
def test_ascii_streams_get_ascii_marks_and_the_same_exit_code(
        args: List[str], env: Dict[str, str], in_utf8: Dict[str, Tuple[int, bytes, bytes]]) -> None:
    code, out, err = _run(args, env)
    utf8_code, utf8_out, _ = in_utf8[args[0]]
    assert code == utf8_code, err.decode(errors="replace")
    assert out and out.isascii(), [line for line in out.splitlines() if not line.isascii()][:3]
    assert err.isascii()
    # The same words, each mark replaced by its stand-in (a stand-in wider than its mark,
    # "->" for "→", may move where a detail paragraph wraps).
    assert "".join(out.decode("ascii").split()) == "".join(to_plain(utf8_out.decode("utf-8")).split())


def test_utf8_keeps_the_marks(in_utf8: Dict[str, Tuple[int, bytes, bytes]]) -> None:
    check = in_utf8["check"][1].decode("utf-8")
    assert "✓ numa-topology" in check and "✗ numa-binding/unbound" in check and "→ more:" in check
    assert "┌─ socket 0" in in_utf8["map"][1].decode("utf-8")
    assert "→" in in_utf8["fix"][1].decode("utf-8") or "✓" in in_utf8["report"][1].decode("utf-8")


def test_the_ascii_marks_say_what_the_others_do() -> None:
    assert to_plain("✓ ok ✗ error → fix · source") == "+ ok x error -> fix * source"
    assert to_plain("┌─┐│└┘ é") == "+-+|++ ?"
    assert encodes_marks("utf-8") and not encodes_marks("ascii") and not encodes_marks("latin-1")
    assert not encodes_marks("no-such-codec")
    assert all(mark in MARK_SYMBOLS for mark in "✓✗→·")


class _Stream:
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding


def test_a_stream_other_than_standard_output_is_taken_at_its_word() -> None:
    assert stream_encoding(_Stream("latin-1")) == "latin-1"
    assert ascii_only(_Stream("latin-1")) and ascii_only(_Stream("ascii"))
    assert not ascii_only(_Stream("utf-8"))
