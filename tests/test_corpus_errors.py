"""Every error on a real host is one its own numbers justify.

``check`` runs with the seed's engine sizes (arena 46.84 GiB, K/V 3.09 GiB) on every
snapshot of ../shared/corpus, and the set of error findings must equal the reviewed table
tests/golden/corpus-errors.txt, where each line says which of the snapshot's numbers make
it an error. An error that appears or disappears fails here until the table is updated,
with its reason, in the same change.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional, Set, Tuple

import pytest

from tests.conftest import REPO, run_cli
from tests.corpus import SNAPSHOTS, Corpus, proc_memtotal, read_reviewed

pytestmark = pytest.mark.corpus

TABLE = REPO / "tests" / "golden" / "corpus-errors.txt"
SEED_ENGINE = ("--arena", "46.84GiB", "--kv", "3.09GiB")


REVIEWED = read_reviewed(TABLE, SNAPSHOTS)


def errors_on(corpus: Corpus, name: str) -> Set[str]:
    result = run_cli(["check", "--root", str(corpus.root(name)), *SEED_ENGINE, "--format", "json"])
    assert result.exit_code in (0, 1), (result.exit_code, result.stderr)
    data = json.loads(result.stdout)
    return {f"{f['check']}/{f['id']}" for f in data["findings"] if f["severity"] == "error"}


def nodes_memtotal(root: Path) -> Optional[int]:
    """The nodes' MemTotal summed, read apart from the tool: the host's size in a capture of
    sys/ alone; None when a node folder has no MemTotal (or there is none)."""
    nodes = sorted((root / "sys/devices/system/node").glob("node[0-9]*"))
    files = [node / "meminfo" for node in nodes]
    sizes = [re.search(r"MemTotal:\s+(\d+) kB", f.read_text()) if f.is_file() else None for f in files]
    if not sizes or not all(sizes):
        return None
    return sum(int(m.group(1)) * 1024 for m in sizes if m)


def test_the_table_parses() -> None:
    """The table itself is well formed, whether or not the corpus is here."""
    assert REVIEWED, "the reviewed table is empty"


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_errors_match_the_reviewed_table(corpus: Corpus, name: str) -> None:
    found = errors_on(corpus, name)
    expected = set(REVIEWED.get(name, {}))
    unreviewed: Tuple[str, ...] = tuple(sorted(found - expected))
    gone: Tuple[str, ...] = tuple(sorted(expected - found))
    assert not unreviewed, f"{name}: errors not in {TABLE.name}: {unreviewed}"
    assert not gone, f"{name}: errors in {TABLE.name} that the tool no longer reports: {gone}"


# -- Zero false alarms on servers ------------------------------------------------------------
ENGINE_NEEDS = int((46.84 + 3.09 + 4.0) * 2**30)  # arena + K/V + the default 4 GiB headroom
GPU_CHECKS = ("gpu-placement", "numa-binding", "pcie-link")


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_no_error_on_a_server_without_a_discrete_gpu(corpus: Corpus, name: str) -> None:
    """A host with no compute GPU (none at all, or only a BMC's or hypervisor's display
    chip) gets no error, except that the seed's engine does not fit a smaller host and the
    hugepage errors the reviewed table justifies. No GPU-related error, whatever the table."""
    result = run_cli(["check", "--root", str(corpus.root(name)), *SEED_ENGINE, "--format", "json"])
    data = json.loads(result.stdout)
    if any(g["compute"] for g in data["facts"].get("gpus", [])):
        return  # a discrete GPU: binding errors are real there (nvidiagpunumanodes)
    memtotal = proc_memtotal(corpus.root(name)) or nodes_memtotal(corpus.root(name))
    for finding in data["findings"]:
        if finding["severity"] != "error":
            continue
        key = f"{finding['check']}/{finding['id']}"
        assert finding["check"] not in GPU_CHECKS, f"{name}: {key} on a host without a compute GPU"
        if key == "arena-fit/does-not-fit":
            assert memtotal is not None and memtotal < ENGINE_NEEDS, f"{name}: {key} on a host of {memtotal}"
        elif finding["check"] == "hugepages":
            assert key in REVIEWED.get(name, {}), f"{name}: {key} is not justified in {TABLE.name}"
        else:
            raise AssertionError(f"{name}: error {key} without a discrete GPU: {finding['summary']}")
