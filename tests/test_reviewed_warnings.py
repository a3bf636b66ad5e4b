"""Every warning on a real host or a fixture host is one its own numbers justify, and no
finding says what its tree cannot support.

``check`` runs with the seed's engine sizes (arena 46.84 GiB, K/V 3.09 GiB) on every
snapshot of ../shared/corpus and with each fixture host's own config on every host under
tests/fixtures/hosts. The set of warnings on a snapshot, and of warnings and errors on a
fixture host, must equal the reviewed table tests/golden/warnings.txt, where each line says
which of the tree's numbers make it one (the corpus's errors are reviewed in
corpus-errors.txt). A finding that appears or disappears fails here until the table is
updated, with its reason, in the same change.

The same runs hold every finding's words, the text report and the map to the rule that a
Python ``None`` never reaches a reader.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

from tests.conftest import HOSTS, REPO, run_cli
from tests.corpus import SNAPSHOTS, Corpus, read_reviewed

TABLE = REPO / "tests" / "golden" / "warnings.txt"
SEED_ENGINE = ("--arena", "46.84GiB", "--kv", "3.09GiB")
FIXTURE_HOSTS = sorted(p.name for p in HOSTS.iterdir() if (p / "README.md").is_file()) if HOSTS.is_dir() \
    else []
NONE = re.compile(r"\bNone\b")


REVIEWED = read_reviewed(TABLE, [*SNAPSHOTS, *FIXTURE_HOSTS])


def check_json(args: List[str]) -> Dict[str, Any]:
    result = run_cli(["check", *args, "--format", "json"])
    assert result.exit_code in (0, 1), (result.exit_code, result.stderr)
    data: Dict[str, Any] = json.loads(result.stdout)
    return data


def reviewable(data: Dict[str, Any], severities: Tuple[str, ...]) -> Set[str]:
    return {f"{f['check']}/{f['id']}" for f in data["findings"] if f["severity"] in severities}


def compare(tree: str, found: Set[str]) -> None:
    expected = set(REVIEWED.get(tree, {}))
    unreviewed = sorted(found - expected)
    gone = sorted(expected - found)
    assert not unreviewed, f"{tree}: findings not in {TABLE.name}: {unreviewed}"
    assert not gone, f"{tree}: findings in {TABLE.name} that the tool no longer reports: {gone}"


def words(data: Dict[str, Any]) -> Iterator[Tuple[str, str]]:
    """(where, text) for every text a reader sees in a finding."""
    for f in data["findings"]:
        key = f"{f['check']}/{f['id']}"
        yield key + " summary", f["summary"]
        yield key + " detail", f["detail"] or ""
        for ev in f["evidence"]:
            yield key + " evidence", f"{ev['source']} {ev['value']}"
        if f.get("fix"):
            yield key + " fix", json.dumps(f["fix"])
    for c in data["checks"]:
        yield c["id"] + " reason", c["reason"] or ""


def assert_no_none(tree: str, data: Dict[str, Any], root_args: List[str]) -> None:
    leaks = [f"{where}: {text}" for where, text in words(data) if NONE.search(text)]
    for command in (["check", *root_args, "-v"], ["map", *root_args]):
        result = run_cli(command, env={"NO_COLOR": "1"})
        assert result.exit_code in (0, 1), (command, result.stderr)
        leaks += [f"{command[0]}: {line}" for line in result.stdout.splitlines() if NONE.search(line)]
    assert not leaks, f"{tree}: a Python None reaches the reader:\n" + "\n".join(leaks)


def test_the_table_parses() -> None:
    """The table itself is well formed, whether or not the corpus is here."""
    assert REVIEWED, "the reviewed table is empty"


@pytest.mark.corpus
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_corpus_warnings_match_the_reviewed_table(corpus: Corpus, name: str) -> None:
    args = ["--root", str(corpus.root(name)), *SEED_ENGINE]
    data = check_json(args)
    compare(name, reviewable(data, ("warning",)))
    assert_no_none(name, data, args)


@pytest.mark.parametrize("host", FIXTURE_HOSTS)
def test_fixture_findings_match_the_reviewed_table(host: str) -> None:
    args = ["--root", str(Path(HOSTS / host))]
    data = check_json(args)
    compare(host, reviewable(data, ("warning", "error")))
    assert_no_none(host, data, args)
