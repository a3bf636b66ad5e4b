"""Golden check output for every hand-made fixture host.

Each host's JSON (and text) output is compared with ``tests/golden/check/<host>.*``.
After an intended change, regenerate with ``STRATA_UPDATE_GOLDEN=1 python -m pytest
tests/test_golden.py`` and review the diff like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import HOSTS, REPO, run_cli

GOLDEN = REPO / "tests" / "golden" / "check"
UPDATE = os.environ.get("STRATA_UPDATE_GOLDEN") == "1"
HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []


def _compare(path: Path, actual: str) -> None:
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        if not UPDATE:
            pytest.fail(f"{path} did not exist; written now, review and commit it")
    assert actual == path.read_text(), f"{path} differs; rerun with STRATA_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("host", HOST_NAMES)
def test_golden_json(host: str) -> None:
    result = run_cli(["check", "--root", str(HOSTS / host), "--format", "json"])
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.exit_code
    assert result.exit_code in (0, 1), result.stderr
    _compare(GOLDEN / f"{host}.json", result.stdout)


@pytest.mark.parametrize("host", HOST_NAMES)
def test_golden_text(host: str) -> None:
    result = run_cli(["check", "--root", str(HOSTS / host), "-v"], env={"NO_COLOR": "1"})
    _compare(GOLDEN / f"{host}.txt", result.stdout)
