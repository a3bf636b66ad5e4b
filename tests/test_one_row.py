"""One check, one verdict: no check says "ok" in one row and something else in the next.

arena-fit used to print ``✓ arena-fit ... 9.07 GiB to spare`` right above ``! arena-fit
... 20.00 GiB less than it needs`` on the seed box. Now its one row is the worst finding
with the other as its detail, and the runner folds any check's ok finding into its worst
one the same way (registry.one_row), on every fixture host and every corpus snapshot.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Dict, List, Set

import pytest

from strata_doctor.model import Evidence, Finding, Severity
from strata_doctor.registry import one_row
from tests.conftest import HOSTS, run_cli
from tests.corpus import SNAPSHOTS, Corpus

HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []
SEED_ENGINE = ("--arena", "46.84GiB", "--kv", "3.09GiB")


def _mixed(data: Dict[str, object]) -> List[str]:
    """The checks of a JSON document with an ok finding beside a warning or an error."""
    severities: Dict[str, Set[str]] = defaultdict(set)
    for finding in data["findings"]:  # type: ignore[attr-defined]
        severities[finding["check"]].add(finding["severity"])
    return sorted(check for check, seen in severities.items() if "ok" in seen and seen & {"warning", "error"})


@pytest.mark.parametrize("host", HOST_NAMES)
def test_no_check_says_ok_beside_a_problem_on_a_fixture_host(host: str) -> None:
    result = run_cli(["check", "--root", str(HOSTS / host), "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    assert _mixed(json.loads(result.stdout)) == []


@pytest.mark.corpus
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_no_check_says_ok_beside_a_problem_on_a_real_host(corpus: Corpus, name: str) -> None:
    result = run_cli(["check", "--root", str(corpus.root(name)), *SEED_ENGINE, "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    assert _mixed(json.loads(result.stdout)) == []


def test_arena_fit_on_the_seed_box_is_one_warning_with_both_numbers() -> None:
    result = run_cli(["check", "arena-fit", "--root", str(HOSTS / "seed-box"), "--format", "json"])
    findings = json.loads(result.stdout)["findings"]
    assert [(f["id"], f["severity"]) for f in findings] == [("low-free", "warning")]
    summary, detail = findings[0]["summary"], findings[0]["detail"]
    # The capacity and what is free now, each redone from node 1's meminfo and numa_maps:
    # 46.84 + 3.09 + 4.00 = 53.93 of 63.00 GiB; MemFree 7.52 + 26.41 held = 33.93 GiB.
    assert "= 53.93 GiB fits node 1 (63.00 GiB), but only 33.93 GiB of it is free" in summary
    assert "20.00 GiB less than it needs" in summary
    assert "Its MemTotal leaves 9.07 GiB to spare." in detail
    text = run_cli(["check", "arena-fit", "--root", str(HOSTS / "seed-box")], env={"NO_COLOR": "1"}).stdout
    rows = [line for line in text.splitlines() if "arena-fit" in line and not line.startswith(" ")]
    assert [row[:1] for row in rows] == ["!"]


def _finding(fid: str, severity: Severity, summary: str, detail: str = "", source: str = "") -> Finding:
    evidence = (Evidence(source, "v"),) if source else ()
    return Finding("demo", fid, severity, summary, detail=detail, evidence=evidence)


def test_an_ok_finding_becomes_the_detail_of_the_worst() -> None:
    fine = _finding("fits", Severity.OK, "pool 24,000 fits", "It fits.", "/proc/meminfo")
    note = _finding("note", Severity.INFO, "a note")
    bad = _finding("wrong-node", Severity.WARNING, "pool on node 0", "Move it.", "/sys/x")
    folded = one_row([fine, note, bad])
    assert [f.id for f in folded] == ["note", "wrong-node"]
    assert folded[1].detail == "Move it. The rest is fine: pool 24,000 fits. It fits."
    assert [e.source for e in folded[1].evidence] == ["/sys/x", "/proc/meminfo"]
    assert folded[0] == note


def test_findings_all_ok_or_none_ok_are_kept() -> None:
    oks = [_finding("a", Severity.OK, "a"), _finding("b", Severity.OK, "b")]
    problems = [_finding("c", Severity.INFO, "c"), _finding("d", Severity.ERROR, "d")]
    assert one_row(oks) == tuple(oks)
    assert one_row(problems) == tuple(problems)
    assert one_row([]) == ()


def test_an_ok_finding_beside_an_info_one_is_kept() -> None:
    """An info row is no verdict against the ok one: 6 CPUs on performance beside 2 whose
    governor cannot be read are two facts, not a contradiction."""
    fine = _finding("performance", Severity.OK, "6 of all 8 CPUs run the performance policy")
    note = _finding("unknown-governor", Severity.INFO, "2 CPUs have an empty governor")
    assert one_row([fine, note]) == (fine, note)
