"""The last line of a test run says how many tests read real hardware (tests/conftest.py):
the corpus snapshots of ../shared/corpus and the comparisons with lstopo, or why none ran."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.conftest import REPO

MARKED = '''
import pytest

@pytest.mark.corpus
def test_corpus_one(): pass

@pytest.mark.corpus
def test_corpus_two(): assert False, "a failed test ran too"

@pytest.mark.corpus
def test_corpus_skipped(): pytest.skip("not counted")

@pytest.mark.lstopo
def test_lstopo_one(): pass

def test_plain(): pass
'''
ALL_SKIP = '''
import pytest

@pytest.mark.corpus
def test_corpus(): pytest.skip("absent")

@pytest.mark.lstopo
def test_lstopo(): pytest.skip("absent")
'''
NO_CORPUS = '''
from pathlib import Path
import tests.conftest
tests.conftest.SHARED = Path("/nonexistent/shared")
'''


def run_inner(folder: Path, *args: str, path: str = "") -> List[str]:
    """pytest over ``folder`` with this project's conftest as a plugin; its output lines."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if path:
        env["PATH"] = path
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(folder),
         "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", *args, str(folder)],
        capture_output=True, text=True, cwd=REPO, env=env, check=False,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.stdout.rstrip("\n").splitlines()


XDIST = importlib.util.find_spec("xdist") is not None
WORKERS = [
    [],
    # The oldest-versions run has no pytest-xdist: the one-process case still runs there.
    pytest.param(["-n", "2"], marks=pytest.mark.skipif(not XDIST, reason="pytest-xdist is not installed")),
]

@pytest.mark.parametrize("workers", WORKERS, ids=["one process", "xdist"])
def test_the_last_line_counts_the_tests_that_ran(tmp_path: Path, workers: List[str]) -> None:
    (tmp_path / "test_marked.py").write_text(MARKED)
    lines = run_inner(tmp_path, *workers)
    assert lines[-2].startswith("1 failed, 3 passed, 1 skipped"), lines[-2:]
    assert lines[-1] == "real hardware: 2 corpus tests ran, 1 lstopo comparison ran", lines[-3:]


@pytest.mark.parametrize("workers", WORKERS, ids=["one process", "xdist"])
def test_none_ran_and_why(tmp_path: Path, workers: List[str]) -> None:
    (tmp_path / "conftest.py").write_text(NO_CORPUS)
    (tmp_path / "test_skipped.py").write_text(ALL_SKIP)
    no_lstopo = tmp_path / "bin"
    no_lstopo.mkdir()
    lines = run_inner(tmp_path, *workers, path=str(no_lstopo))
    assert lines[-1] == (
        "real hardware: 0 corpus tests ran: /nonexistent/shared/corpus is absent (the real host "
        "snapshots; see README.md), 0 lstopo comparisons ran: lstopo-no-graphics is not installed "
        "(apt install hwloc-nox)"
    ), lines[-3:]


def test_a_run_without_such_tests_adds_no_line(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_plain(): pass\n")
    lines = run_inner(tmp_path)
    assert "1 passed" in lines[-1], lines[-2:]
