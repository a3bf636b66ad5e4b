"""arena-fit with no planned node: the whole host counts, and a host too small is never ready.

The rule (``rules.memory.host_room``, ``node_room``, ``preferred_node``) on facts built by
hand, then the check on trees: a capture of ``sys/`` alone is sized by its nodes, a node
without meminfo is unknown (named with its file), and the corpus snapshots that once said
"cannot read the memory size of the target node" say what their numbers show.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from strata_doctor.facts.numa import NumaFacts, NumaNode
from strata_doctor.rules.binding import BindingPlan
from strata_doctor.rules.memory import host_room, node_room, preferred_node
from tests.conftest import HOSTS, findings_of, run_cli, two_node_files, write_tree
from tests.corpus import Corpus

GIB = 2**30
SEED = ("--arena", "46.84GiB", "--kv", "3.09GiB")


def node(nid: int, total: Optional[int], free: Optional[int]) -> NumaNode:
    cpus = frozenset({nid})
    return NumaNode(nid, cpus, cpus, total, free, ((nid, 10),), "cpulist")


def numa(*nodes: NumaNode) -> NumaFacts:
    return NumaFacts(tuple(nodes), frozenset(c for n in nodes for c in n.cpus), frozenset(), ())


def arena_fit(root: Path, *sizes: str) -> Dict[str, Dict[str, Any]]:
    """arena-fit's findings by id, with the seed's sizes unless others are given."""
    result = run_cli(["check", "arena-fit", "--root", str(root), *(sizes or SEED), "--format", "json"])
    return findings_of(json.loads(result.stdout), "arena-fit")


# -- the rule ---------------------------------------------------------------------------
def test_proc_meminfo_counts_first() -> None:
    room = host_room({"MemTotal": 100 * GIB, "MemAvailable": 60 * GIB}, numa(node(0, 40 * GIB, 1)))
    assert (room.total, room.free, room.source, room.host) == (100 * GIB, 60 * GIB, "/proc/meminfo", True)


def test_without_proc_meminfo_the_nodes_are_summed() -> None:
    room = host_room({}, numa(node(0, 4 * GIB, 3 * GIB), node(1, 4 * GIB, 2 * GIB)))
    assert (room.total, room.free, room.source, room.unread) == (8 * GIB, 5 * GIB, "nodes", ())


def test_a_node_without_meminfo_is_unknown_never_zero() -> None:
    room = host_room({}, numa(node(0, 4 * GIB, 3 * GIB), node(1, None, None)))
    assert room.total is None and room.unread == (1,)
    plan = BindingPlan(frozenset({1}), frozenset({1}), frozenset({1}), "preferred", ())
    planned = node_room(numa(node(0, 4 * GIB, 3 * GIB), node(1, None, None)), plan)
    assert planned is not None and planned.total is None and planned.unread == (1,)


def test_a_missing_memfree_leaves_free_unknown() -> None:
    assert host_room({}, numa(node(0, GIB, None), node(1, GIB, None))).free is None


def test_the_preferred_node_has_the_most_memfree() -> None:
    facts = numa(node(0, 8 * GIB, 2 * GIB), node(1, 8 * GIB, 7 * GIB), node(2, 8 * GIB, 7 * GIB))
    found = preferred_node(facts)
    assert found is not None and found.id == 1  # the lowest id of equals
    assert preferred_node(numa(node(0, 8 * GIB, 2 * GIB))) is None  # one node: no choice
    assert preferred_node(numa(node(0, GIB, None), node(1, GIB, None))) is None  # none says


# -- the check on trees -------------------------------------------------------------------
def sparse_files(meminfo: bool, *, node1_meminfo: bool = True) -> Dict[str, str]:
    """The two-node test host without its GPU (no planned node), with or without
    /proc/meminfo and node 1's meminfo."""
    files = {k: v for k, v in two_node_files().items() if "0000:81:00.0" not in k}
    if not meminfo:
        del files["/proc/meminfo"]
    if not node1_meminfo:
        del files["/sys/devices/system/node/node1/meminfo"]
    return files


def test_a_host_too_small_is_an_error(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "host", sparse_files(meminfo=False))
    found = arena_fit(root)
    assert list(found) == ["does-not-fit"]
    finding = found["does-not-fit"]
    assert finding["severity"] == "error"
    assert "does not fit this host (32.00 GiB): 21.93 GiB short" in finding["summary"]
    assert "2 nodes' MemTotal, summed: /proc/meminfo is missing" in finding["detail"]
    assert "node 0 (MemFree 8.00 GiB of MemTotal 16.00 GiB)" in finding["detail"]
    assert [e["source"] for e in finding["evidence"]] == [
        "/sys/devices/system/node/node0/meminfo", "/sys/devices/system/node/node1/meminfo"]
    result = run_cli(["check", "--root", str(root), *SEED])
    assert result.exit_code == 1 and "not ready" in result.stdout


def test_numa_off_fits_the_whole_host(tmp_path: Path) -> None:
    """numa: off with a GPU node: no plan, so /proc/meminfo counts, the most-free node named."""
    files = two_node_files()
    files["/etc/strata-doctor.yaml"] = 'numa: "off"\n'
    found = arena_fit(write_tree(tmp_path / "host", files), "--arena", "20GiB", "--kv", "1GiB")
    # It fits the host's 32.00 GiB, but only 16.00 GiB is free: the one low-free row says both.
    assert "fits this host (32.00 GiB), but only 16.00 GiB of it is free" in found["low-free"]["summary"]
    assert "Its MemTotal leaves 7.00 GiB to spare." in found["low-free"]["detail"]
    assert found["low-free"]["evidence"][0] == {"source": "/proc/meminfo", "value": "MemTotal=32.00 GiB"}


def test_unknown_names_the_node_and_its_file(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "host", sparse_files(meminfo=False, node1_meminfo=False))
    (finding,) = arena_fit(root).values()
    assert finding["id"] == "unknown-memory"
    assert finding["summary"] == (
        "cannot read the memory size of this host: /proc/meminfo is missing; "
        "/sys/devices/system/node/node1/meminfo is missing")


def test_a_planned_node_without_meminfo_is_unknown(tmp_path: Path) -> None:
    files = two_node_files()
    del files["/sys/devices/system/node/node1/meminfo"]
    (finding,) = arena_fit(write_tree(tmp_path / "host", files)).values()
    assert finding["summary"] == (
        "cannot read the memory size of node 1: /sys/devices/system/node/node1/meminfo is missing")


@pytest.mark.parametrize("host, verdict", [("small-no-gpu", "does-not-fit"), ("roomy-no-meminfo", "fits")])
def test_fixture_hosts(host: str, verdict: str) -> None:
    found = arena_fit(HOSTS / host)
    assert list(found) == [verdict]
    assert "None" not in json.dumps(found)


# -- the corpus snapshots that said "cannot read the memory size of the target node" -----
CORPUS_VERDICTS: Dict[str, List[str]] = {
    "16amd64-8n2c": ["fits", "fits this host (64.00 GiB): 10.07 GiB to spare", "node 7 (MemFree 7.87 GiB"],
    "16em64t-4s2c2t": ["does-not-fit", "does not fit this host (16.00 GiB): 37.93 GiB short"],
    "4fake-4gr1nu1pu": ["does-not-fit", "does not fit this host (4.00 GiB): 49.93 GiB short"],
    "2ps3-2t": ["unknown-memory",
                "this host: /proc/meminfo is missing; /sys/devices/system/node lists no node"],
}


@pytest.mark.corpus
@pytest.mark.parametrize("name", sorted(CORPUS_VERDICTS))
def test_corpus_snapshots_say_their_numbers(corpus: Corpus, name: str) -> None:
    verdict, *words = CORPUS_VERDICTS[name]
    found = arena_fit(corpus.root(name))
    assert list(found) == [verdict]
    text = found[verdict]["summary"] + " " + found[verdict]["detail"]
    for phrase in words:
        assert phrase in text
    assert "target node" not in text
