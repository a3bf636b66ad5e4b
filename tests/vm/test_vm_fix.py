"""`fix --apply` binds a real process under a real systemd; `fix --revert` unbinds it.

The proof is the stub engine's own view of itself (``/proc/self/status`` and
``/proc/self/numa_maps``), read inside the unit that systemd started, not what the
doctor believes it wrote.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, Iterable, List

import pytest
from topologies import TOPOLOGIES, Topology
from vmharness import Guests

pytestmark = pytest.mark.vm

# The nodes each topology's engine must end up on: the GPU's node, or on the SNC
# guest (arena larger than node 1) the two sub-nodes of node 1's socket.
BOUND: Dict[str, FrozenSet[int]] = {
    "seed": frozenset({1}),
    "mirror": frozenset({0}),
    "memory-only": frozenset({1}),
    "snc": frozenset({0, 1}),
}
# Share of the stub's buffer that must sit on the node it is bound to.
LOCAL_SHARE = 0.95


def cpulist(cpus: Iterable[int]) -> str:
    """A sorted CPU list in the kernel's cpulist form (``2-3``, ``0,2``)."""
    ranges: List[List[int]] = []
    for c in sorted(cpus):
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def stub(guests: Guests, name: str, step: str) -> Dict[str, Any]:
    data = guests.get(name).step(step).json()
    assert isinstance(data, dict)
    return data


def gpu_node(t: Topology) -> int:
    assert t.gpu.numa_node is not None
    return t.gpu.numa_node


def cpus_of(t: Topology, nodes: Iterable[int]) -> List[int]:
    return sorted(c for n in nodes for c in t.node(n).cpus)


def share_on(data: Dict[str, Any], nodes: Iterable[int]) -> float:
    """Share of the stub's buffer pages that sit on ``nodes``."""
    pages = data["buffer_pages_per_node"]
    total = sum(pages.values())
    assert total * 4096 >= data["buffer_bytes"] * 0.9, data
    return float(sum(pages.get(str(n), 0) for n in nodes) / total)


def assert_bound(t: Topology, nodes: FrozenSet[int], data: Dict[str, Any]) -> None:
    assert data["cpus_allowed_list"] == cpulist(cpus_of(t, nodes)), data
    assert data["sched_getaffinity"] == cpus_of(t, nodes), data
    policy = data["buffer_policy"]
    if len(nodes) == 1:
        assert policy == f"prefer:{next(iter(nodes))}", data
    else:
        assert policy.split(":")[-1] == cpulist(nodes) and not policy.startswith("bind"), data
    assert share_on(data, nodes) >= LOCAL_SHARE, data


@pytest.mark.parametrize("name", sorted(BOUND))
def test_unbound_stub_runs_everywhere(guests: Guests, name: str) -> None:
    """Before the fix the stub may use every CPU and first touch spreads its memory."""
    t = TOPOLOGIES[name]
    before = stub(guests, name, "stub-before")
    assert before["cpus_allowed_list"] == cpulist(t.all_cpus())
    assert before["buffer_policy"] == "default"
    cpu_nodes = [n.id for n in t.nodes if n.cpus]
    assert sum(1 for n in cpu_nodes if share_on(before, [n]) > 0.1) >= 2, (
        "unbound, the stub's workers should touch memory on more than one node", before
    )


@pytest.mark.parametrize("name", sorted(BOUND))
def test_apply_binds_the_engine_to_the_gpu_node(guests: Guests, name: str) -> None:
    apply = guests.get(name).step("apply")
    assert apply.rc == 0, apply.describe()
    assert_bound(TOPOLOGIES[name], BOUND[name], stub(guests, name, "stub-applied"))


@pytest.mark.parametrize("name", sorted(BOUND))
def test_wrapper_binds_a_hand_started_engine(guests: Guests, name: str) -> None:
    """/usr/local/bin/strata-numa works with the guest's real numactl."""
    assert_bound(TOPOLOGIES[name], BOUND[name], stub(guests, name, "wrapper-applied"))


@pytest.mark.parametrize("name", sorted(BOUND))
def test_check_after_apply_passes_the_binding(guests: Guests, name: str) -> None:
    data = guests.get(name).step("check-after-apply").json()
    assert isinstance(data, dict)
    binding = [f for f in data["findings"] if f["check"] == "numa-binding"]
    assert binding and all(f["severity"] in ("ok", "info") for f in binding), binding


@pytest.mark.parametrize("name", sorted(BOUND))
def test_second_apply_changes_nothing(guests: Guests, name: str) -> None:
    again = guests.get(name).step("apply-again")
    assert again.rc == 0, again.describe()
    assert "nothing written" in again.stdout.lower() or "nothing to change" in again.stdout.lower()


@pytest.mark.parametrize("name", sorted(BOUND))
def test_revert_unbinds_after_daemon_reload(guests: Guests, name: str) -> None:
    t = TOPOLOGIES[name]
    revert = guests.get(name).step("revert")
    assert revert.rc == 0, revert.describe()
    after = stub(guests, name, "stub-reverted")
    assert after["cpus_allowed_list"] == cpulist(t.all_cpus())
    assert after["buffer_policy"] == "default"


@pytest.mark.parametrize("name", sorted(BOUND))
def test_revert_restores_the_files(guests: Guests, name: str) -> None:
    """Every path, mode and content under /etc/systemd, /etc/sysctl.d and /usr/local/bin."""
    result = guests.get(name)
    before = result.step("files-before")
    assert before.rc == 0 and before.stdout.strip(), before.describe()
    assert result.step("files-after-revert").stdout == before.stdout
    if name == "seed":
        assert result.step("files-after-revert-reserve").stdout == before.stdout


def test_reserve_node_moves_everyone_else_off(guests: Guests) -> None:
    t = TOPOLOGIES["seed"]
    node = gpu_node(t)
    others = cpulist(c for n in t.nodes if n.id != node for c in n.cpus)
    result = guests.get("seed")
    apply = result.step("apply-reserve")
    assert apply.rc == 0, apply.describe()
    engine = stub(guests, "seed", "stub-reserved")
    assert engine["cpus_allowed_list"] == cpulist(t.node(node).cpus)
    assert "/strata.slice/" in engine["cgroup"]
    assert share_on(engine, [node]) >= LOCAL_SHARE, engine
    slices = result.step("slices-reserved").json()
    assert slices == {
        "system.slice": others, "user.slice": others, "init": others,
        "system.slice effective": others,
    }
    daemons = result.step("daemons-reserved").json()
    assert isinstance(daemons, dict) and daemons
    assert set(daemons.values()) == {others}, daemons


def test_revert_gives_the_cpus_back(guests: Guests) -> None:
    t = TOPOLOGIES["seed"]
    result = guests.get("seed")
    revert = result.step("revert-reserve")
    assert revert.rc == 0, revert.describe()
    everything = cpulist(t.all_cpus())
    slices = result.step("slices-after-revert").json()
    assert isinstance(slices, dict)
    assert slices["system.slice"] == everything
    assert slices["user.slice"] == everything
    assert slices["init"] == everything
    engine = stub(guests, "seed", "stub-after-revert")
    assert engine["cpus_allowed_list"] == everything
    assert "/system.slice/" in engine["cgroup"]
