"""Golden check output for variants: a fixture host replayed with other engine settings.

A variant is a config file in ``tests/fixtures/variants/`` (``<host>-<change>.yaml``)
that changes one setting of the host's own; it shows a finding the host itself does not
(more workers than CPUs, a node chosen by the user). Regenerate as for
``tests/test_golden.py``.
"""

from __future__ import annotations

import json
from typing import List

import pytest

from tests.conftest import HOSTS, REPO, compare_golden, run_cli

VARIANTS = REPO / "tests" / "fixtures" / "variants"
GOLDEN = REPO / "tests" / "golden" / "variant"
# variant -> (host, the checks it is about)
CASES = {
    "seed-box-workers-88": ("seed-box", ("expert-workers",)),
    "seed-box-numa-0": ("seed-box", ("numa-binding", "arena-fit", "page-cache")),
}


def _args(variant: str) -> List[str]:
    host, checks = CASES[variant]
    config = (VARIANTS / f"{variant}.yaml").relative_to(REPO)  # evidence names it as given
    return ["check", *checks, "--root", str(HOSTS / host), "--config", str(config)]


def test_every_variant_file_has_a_case() -> None:
    assert sorted(p.stem for p in VARIANTS.glob("*.yaml")) == sorted(CASES)


@pytest.mark.parametrize("variant", sorted(CASES))
def test_variant_golden(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = run_cli([*_args(variant), "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert {f["check"] for f in data["findings"]} <= set(CASES[variant][1])
    compare_golden(GOLDEN / f"{variant}.json", result.stdout)
    text = run_cli([*_args(variant), "-v"], env={"NO_COLOR": "1"})
    compare_golden(GOLDEN / f"{variant}.txt", text.stdout)


def test_workers_above_the_nodes_cpus_is_a_warning_with_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    data = json.loads(run_cli([*_args("seed-box-workers-88"), "--format", "json"]).stdout)
    (found,) = data["findings"]
    assert (found["id"], found["severity"]) == ("oversubscribed", "warning")
    assert "node 1's 22 physical cores (44 CPUs: 22-43,66-87)" in found["summary"]
    assert found["summary"].endswith("use 20 or 21")


def test_a_chosen_node_is_not_called_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    data = json.loads(run_cli([*_args("seed-box-numa-0"), "--format", "json"]).stdout)
    binding = [f for f in data["findings"] if f["check"] == "numa-binding"]
    assert binding and "the chosen node 0 (the GPU is on node 1)" in binding[0]["summary"]
    assert "the GPU's node 0" not in json.dumps(data)
