"""``strata-doctor explain``: the packaged copy of docs/checks, a page or one finding's rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple, Type

import pytest

from strata_doctor import registry
from strata_doctor.check import Check
from strata_doctor.checks import BUILTIN
from strata_doctor.model import Crash
from tests.conftest import REPO, run_cli, usage_error

PAGES = REPO / "docs" / "checks"
FINDINGS = [(cls.id, finding) for cls in BUILTIN for finding in cls.findings]


@pytest.mark.parametrize("check_id", sorted(cls.id for cls in BUILTIN))
def test_explain_prints_the_checks_page_as_docs_checks_has_it(check_id: str) -> None:
    result = run_cli(["explain", check_id])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (PAGES / f"{check_id}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("check_id, finding", FINDINGS)
def test_explain_a_finding_gives_the_title_and_its_rows(check_id: str, finding: str) -> None:
    result = run_cli(["explain", f"{check_id}/{finding}"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"# {check_id}\n\n**"), out
    assert "## Findings\n| id | severity | when |\n|---|---|---|\n" in out, out
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert rows and all(f"`{finding}`" in row.split("|")[1] for row in rows), out
    page_rows = [line for line in (PAGES / f"{check_id}.md").read_text().splitlines()
                 if line.startswith("| ") and f"`{finding}`" in line.split("|")[1]]
    assert rows == page_rows
    assert out.endswith(f"The whole page: strata-doctor explain {check_id}\n")
    assert "## What it reads" not in out


def test_explain_alone_lists_every_check_and_its_finding_ids() -> None:
    result = run_cli(["explain"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    for cls in BUILTIN:
        head = next(i for i, line in enumerate(lines) if line.split()[:1] == [cls.id])
        assert cls.title in lines[head]
        listed = " ".join(lines[head + 1:head + 1 + len(cls.findings)])
        assert all(f in listed.replace(",", " ").split() for f in cls.findings), (cls.id, listed)
    assert "strata-doctor explain CHECK" in lines[-1]


@pytest.mark.parametrize("topic, says", [
    ("numa-bindng", "explain numa-bindng: unknown check 'numa-bindng'; did you mean 'numa-binding'?"),
    ("swap/of", "explain swap/of: unknown finding 'of' of swap; did you mean 'off'?"),
    ("bogus", "explain bogus: unknown check 'bogus' (known: arena-fit, "),
    ("swap/", "explain swap/: unknown finding '' of swap (known: swappable, "),
])
def test_unknown_ids_are_one_line_with_the_closest(topic: str, says: str) -> None:
    assert usage_error(["explain", topic]).startswith(f"strata-doctor: error: {says}")


class _Plugged(Check):
    """Checks something of its own."""

    id = "plugged-in"
    title = "A plugged-in check"
    findings = ("fine",)
    doc = "https://example.org/plugged-in"


def _with_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    def plugins() -> Tuple[List[Type[Check]], List[Crash]]:
        return [_Plugged], [Crash("broken.plugin", "failed to load: ImportError: no module")]

    monkeypatch.setattr(registry, "plugin_checks", plugins)


def test_a_plugin_without_a_page_is_explained_by_its_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_plugins(monkeypatch)
    out = run_cli(["explain", "plugged-in"]).stdout
    assert out.startswith("# plugged-in\n\n**A plugged-in check**\n\nChecks something of its own.\n")
    assert "`fine`" in out and "has no page" in out
    assert out.endswith("Its page, as the plug-in names it: https://example.org/plugged-in\n")
    broken = run_cli(["explain", "broken.plugin"])
    assert broken.exit_code == 0, broken.stderr
    assert broken.stdout == ("# broken.plugin\n\nA plug-in: failed to load: ImportError: no module. "
                             "strata-doctor has no page for it.\n")
    listed = run_cli(["explain"]).stdout
    assert "plugged-in" in listed and "(failed to load: ImportError: no module)" in listed
    assert "failed to load: failed" not in listed


def test_a_page_prints_where_the_output_cannot_encode_its_symbols() -> None:
    env = dict(os.environ, PYTHONIOENCODING="latin-1")
    out = subprocess.run([sys.executable, "-m", "strata_doctor", "explain", "arena-fit/fits"],
                         capture_output=True, env=env, cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr
    assert b"headroom <= the node's MemTotal" in out.stdout  # the page's "≤", as ASCII


def test_an_ordinary_editable_install_reads_the_checkouts_pages(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``pip install -e .`` (not strict) imports doctor/ itself, where no pages/ folder is:
    the pages are then docs/checks beside it."""
    import importlib.resources

    monkeypatch.setattr(importlib.resources, "files", lambda package: tmp_path)
    result = run_cli(["explain", "swap"])
    assert result.stdout == (PAGES / "swap.md").read_text(encoding="utf-8")


def test_a_builtin_whose_page_is_missing_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from strata_doctor.cli import explain

    monkeypatch.setattr(explain, "_page_folders", lambda: [tmp_path])
    result = run_cli(["explain", "swap/off"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ("# swap\n\nThis installation lacks the page of the built-in check swap "
                             "(strata_doctor/pages/swap.md, from docs/checks in the source).\n")
