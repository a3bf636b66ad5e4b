"""Finding ids are declared: each check lists the ids it may yield (``Check.findings``),
``--ignore``/``--only``/``--skip CHECK/FINDING`` accept only those, every finding a check
yields on a fixture host is declared, and each check's page names exactly its ids.

A new finding id goes in three places: the ``self.finding("id", ...)`` call, the check
class's ``findings`` tuple, and the Findings table of ``docs/checks/<id>.md``.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path
from typing import Dict, List, Set, Type

import pytest

from strata_doctor.check import Check
from strata_doctor.checks import BUILTIN
from strata_doctor.registry import unknown_id
from tests.conftest import HOSTS, REPO, run_cli, usage_error

HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []
BY_ID: Dict[str, Type[Check]] = {cls.id: cls for cls in BUILTIN}
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def _source_of(cls: Type[Check]) -> str:
    """``checks/...`` as in the checkout, whichever install the class was imported from."""
    parts = Path(inspect.getfile(cls)).parts
    below = len(parts) - 1 - parts[::-1].index("checks")
    return "/".join(("checks", *parts[below + 1:]))


def _own_classes(cls: Type[Check]) -> List[type]:
    """The check's class and those it inherits from the checks package (a long check keeps
    some of its words in a module beside it)."""
    return [k for k in cls.__mro__ if k.__module__.startswith("strata_doctor.checks.")]


# -- the declarations ----------------------------------------------------------------
@pytest.mark.parametrize("check_id", sorted(BY_ID))
def test_every_builtin_declares_its_finding_ids(check_id: str) -> None:
    findings = BY_ID[check_id].findings
    assert findings, f"{check_id}: declare its finding ids: findings = (...) in {_source_of(BY_ID[check_id])}"
    assert len(set(findings)) == len(findings), f"{check_id}: a finding id is declared twice: {findings}"
    bad = [f for f in findings if not KEBAB.match(f)]
    assert not bad, f"{check_id}: finding ids are kebab-case: {bad}"


def _literal_ids(node: ast.AST) -> List[str]:
    """The string constants a finding id expression can be: ``"a"``, ``"a" if c else "b"``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literal_ids(node.body) + _literal_ids(node.orelse)
    return []


@pytest.mark.parametrize("check_id", sorted(BY_ID))
def test_every_finding_id_written_in_the_source_is_declared(check_id: str) -> None:
    cls = BY_ID[check_id]
    written: Set[str] = set()
    for klass in _own_classes(cls):
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(klass)))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "finding" and node.args):
                written.update(_literal_ids(node.args[0]))
    missing = sorted(written - set(cls.findings))
    assert not missing, (f"{check_id} yields {missing} but does not declare them: add them to "
                         f"findings in {_source_of(cls)} and to docs/checks/{check_id}.md")


@pytest.mark.parametrize("host", HOST_NAMES)
def test_every_finding_on_a_fixture_host_is_declared(host: str) -> None:
    result = run_cli(["check", "--root", str(HOSTS / host), "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    undeclared = sorted({
        f"{f['check']}/{f['id']}" for f in json.loads(result.stdout)["findings"]
        if f["check"] in BY_ID and f["id"] not in BY_ID[f["check"]].findings
    })
    assert not undeclared, (f"{host}: {undeclared} not declared: add each id to its check's "
                            "findings (checks/*.py) and to docs/checks/<check>.md")


# -- the pages -----------------------------------------------------------------------
FINDINGS_SECTION = re.compile(r"^## Findings\n(.*?)(?=^## |\Z)", re.S | re.M)


def documented_ids(check_id: str) -> List[str]:
    """The ids in the first column of the Findings table of ``docs/checks/<id>.md``
    (a row may name several: ``| `madvise` / `always` | ok | ... |``)."""
    text = (REPO / "docs" / "checks" / f"{check_id}.md").read_text()
    section = FINDINGS_SECTION.search(text)
    assert section, f"docs/checks/{check_id}.md has no '## Findings' section"
    ids: List[str] = []
    for line in section.group(1).splitlines():
        cells = line.split("|")
        if len(cells) > 2:
            ids.extend(re.findall(r"`([^`]+)`", cells[1]))
    return ids


@pytest.mark.parametrize("check_id", sorted(BY_ID))
def test_each_page_names_exactly_the_declared_ids(check_id: str) -> None:
    declared, documented = set(BY_ID[check_id].findings), set(documented_ids(check_id))
    assert not declared - documented, \
        f"docs/checks/{check_id}.md's Findings table lacks {sorted(declared - documented)}"
    assert not documented - declared, \
        f"docs/checks/{check_id}.md names {sorted(documented - declared)}, which {check_id} does not declare"


# -- the command line ----------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["check", "--ignore", "gpu-placement/bogus"],
    ["fix", "--only", "gpu-placement/bogus"],
    ["fix", "--skip", "gpu-placement/bogus"],
    ["report", "--ignore", "gpu-placement/bogus"],
])
def test_unknown_finding_ids_are_refused_with_the_known_ones(two_node_host: Path, args: List[str]) -> None:
    line = usage_error([*args, "--root", str(two_node_host)])
    known = ", ".join(BY_ID["gpu-placement"].findings)
    assert line.endswith(f"{args[1]} gpu-placement/bogus: unknown finding 'bogus' of gpu-placement "
                         f"(known: {known})"), line
    assert "placed" in known


def test_a_check_with_an_empty_finding_is_refused(two_node_host: Path) -> None:
    line = usage_error(["check", "--root", str(two_node_host), "--ignore", "numa-binding/"])
    assert "unknown finding '' of numa-binding (known: " in line


@pytest.mark.parametrize("value", ["numa-binding/unbound", "gpu-placement/placed", "hugepages"])
def test_declared_ids_pass(two_node_host: Path, value: str) -> None:
    assert run_cli(["check", "--root", str(two_node_host), "--ignore", value]).exit_code in (0, 1)
    assert run_cli(["fix", "--root", str(two_node_host), "--only", value]).exit_code == 0


class _Undeclared(Check):
    """A plug-in written before ``findings`` existed."""

    id = "old-plugin"
    title = "Old plug-in"


def test_a_check_that_declares_nothing_accepts_any_finding() -> None:
    checks = [*BUILTIN, _Undeclared]
    assert unknown_id("old-plugin/anything", checks) is None
    assert unknown_id("broken-plugin/anything", checks, ["broken-plugin"]) is None
    assert unknown_id("old-plugin/", checks) is not None
    why = unknown_id("swap/bogus", checks)
    assert why is not None and why.startswith("unknown finding 'bogus' of swap (known: ")
    why = unknown_id("nope/x", checks)
    assert why is not None and why.startswith("unknown check 'nope' (known: ") and "old-plugin" in why


def test_list_checks_json_gives_each_checks_finding_ids() -> None:
    result = run_cli(["list-checks", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    rows = {row["id"]: row["findings"] for row in json.loads(result.stdout)}
    assert rows == {cls.id: list(cls.findings) for cls in BUILTIN}
