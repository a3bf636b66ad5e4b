"""numa-plan's text and JSON on the GPU servers and desktops of tests/fixtures/hosts, held to
tests/golden/numa-plan/<host>.{txt,json}; ``STRATA_UPDATE_GOLDEN=1`` rewrites them for review."""

from __future__ import annotations

import pytest

from tests.conftest import HOSTS, REPO, compare_golden, run_cli

GOLDEN = REPO / "tests" / "golden" / "numa-plan"
PLAN_HOSTS = ("mi210-8x", "mi300x-8x", "radeon-apu-desktop")
SUFFIX = {"text": "txt", "json": "json"}


@pytest.mark.parametrize("fmt", sorted(SUFFIX))
@pytest.mark.parametrize("host", PLAN_HOSTS)
def test_golden(host: str, fmt: str) -> None:
    result = run_cli(["numa-plan", "--root", str(HOSTS / host), "--format", fmt])
    assert result.exit_code == 0, result.stderr
    compare_golden(GOLDEN / f"{host}.{SUFFIX[fmt]}", result.stdout)
