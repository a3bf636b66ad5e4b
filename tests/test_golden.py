"""Golden check output for every hand-made fixture host.

Each host's JSON (and text) output is compared with ``tests/golden/check/<host>.*``.
After an intended change, regenerate with ``STRATA_UPDATE_GOLDEN=1 python -m pytest
tests/test_golden.py`` and review the diff like code.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import HOSTS, REPO, compare_golden, run_cli

GOLDEN = REPO / "tests" / "golden" / "check"
HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []


@pytest.mark.parametrize("host", HOST_NAMES)
def test_golden_json(host: str) -> None:
    result = run_cli(["check", "--root", str(HOSTS / host), "--format", "json"])
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.exit_code
    assert result.exit_code in (0, 1), result.stderr
    compare_golden(GOLDEN / f"{host}.json", result.stdout)


@pytest.mark.parametrize("host", HOST_NAMES)
def test_golden_text(host: str) -> None:
    result = run_cli(["check", "--root", str(HOSTS / host), "-v"], env={"NO_COLOR": "1"})
    compare_golden(GOLDEN / f"{host}.txt", result.stdout)
