"""The facts `check --format json` reads from a real kernel match what QEMU was told."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
from topologies import TOPOLOGIES, MiB, Topology
from vmharness import Guests

pytestmark = pytest.mark.vm

# The guest kernel keeps part of each node for itself (memmap, the kernel image and
# the initramfs on node 0), so MemTotal sits below what QEMU gives the node.
MEMORY_LOW = 0.80


def check_json(guests: Guests, name: str) -> Dict[str, Any]:
    data = guests.get(name).step("check").json()
    assert isinstance(data, dict)
    assert data["schema"] == "strata-doctor/check/v1"
    return data


def nodes_by_id(data: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    return {n["id"]: n for n in data["facts"]["numa"]["nodes"]}


def compute_gpu(data: Dict[str, Any], t: Topology) -> Dict[str, Any]:
    gpus: List[Dict[str, Any]] = data["facts"]["gpus"]
    mine = [g for g in gpus if g["address"] == t.gpu.address]
    assert mine, f"{t.gpu.address} not among the GPUs read: {[g['address'] for g in gpus]}"
    return mine[0]


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_nodes_cpus_and_distances(guests: Guests, name: str) -> None:
    t = TOPOLOGIES[name]
    nodes = nodes_by_id(check_json(guests, name))
    assert sorted(nodes) == [n.id for n in t.nodes]
    for n in t.nodes:
        got = nodes[n.id]
        assert got["cpus"] == sorted(n.cpus), f"node {n.id} CPUs"
        assert {k: int(v) for k, v in got["distances"].items()} == t.distance_row(n.id), (
            f"node {n.id} distance row"
        )


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_memory_per_node(guests: Guests, name: str) -> None:
    t = TOPOLOGIES[name]
    nodes = nodes_by_id(check_json(guests, name))
    for n in t.nodes:
        given = n.memory_mib * MiB
        total = nodes[n.id]["memory_total_bytes"]
        free = nodes[n.id]["memory_free_bytes"]
        assert MEMORY_LOW * given <= total <= given, (
            f"node {n.id}: MemTotal {total} for {given} given to QEMU"
        )
        assert 0 < free <= total


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_memory_matches_the_kernels_own_files(guests: Guests, name: str) -> None:
    """The doctor's per-node numbers are the kernel's node meminfo, not psutil's totals."""
    raw = guests.get(name).step("raw").stdout
    nodes = nodes_by_id(check_json(guests, name))
    for n in TOPOLOGIES[name].nodes:
        line = next(x for x in raw.splitlines() if x.startswith(f"Node {n.id} MemTotal:"))
        assert nodes[n.id]["memory_total_bytes"] == int(line.split()[3]) * 1024


def test_memory_only_node_has_no_cpus(guests: Guests) -> None:
    nodes = nodes_by_id(check_json(guests, "memory-only"))
    assert nodes[2]["cpus"] == []
    assert nodes[2].get("memory_only") is True


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_stand_in_gpu_and_its_node(guests: Guests, name: str) -> None:
    t = TOPOLOGIES[name]
    data = check_json(guests, name)
    gpu = compute_gpu(data, t)
    assert gpu["vendor"] == t.gpu.vendor or int(str(gpu["vendor"]), 16) == int(t.gpu.vendor, 16)
    assert gpu["compute"] is True, "--gpu must make the stand-in the compute GPU"
    if t.gpu.numa_node is None:
        # Firmware gave no proximity domain (numa_node -1) and local_cpulist spans every
        # node, so there is no node to fall back to.
        assert gpu["numa_node"] is None
        assert gpu["local_cpus"] == t.all_cpus()
    else:
        assert gpu["numa_node"] == t.gpu.numa_node
        assert gpu["local_cpus"] == sorted(t.node(t.gpu.numa_node).cpus)


def test_boot_display_is_not_the_compute_gpu(guests: Guests) -> None:
    t = TOPOLOGIES["seed"]
    gpus = check_json(guests, "seed")["facts"]["gpus"]
    others = [g for g in gpus if g["address"] != t.gpu.address]
    assert others, "the boot display (-device VGA) was not read"
    assert all(g["compute"] is False for g in others)


def test_seed_binding_error_names_the_gpu_node(guests: Guests) -> None:
    """On the seed's shape, unbound, numa-binding is an error that recommends node 1."""
    findings = check_json(guests, "seed")["findings"]
    binding = [f for f in findings if f["check"] == "numa-binding"]
    assert binding and max(binding, key=lambda f: f["severity"] == "error")["severity"] == "error"
    text = " ".join(f["summary"] + " " + f["detail"] for f in binding)
    assert "--preferred=1" in text and "--cpunodebind=1" in text
    assert "2.1" in text, "the 21/10 distance ratio"


def test_mirror_binding_recommends_node_0(guests: Guests) -> None:
    findings = check_json(guests, "mirror")["findings"]
    text = " ".join(f["summary"] + " " + f["detail"] for f in findings
                    if f["check"] == "numa-binding")
    assert "--preferred=0" in text and "--cpunodebind=0" in text


def test_memory_only_node_never_gets_cpus(guests: Guests) -> None:
    data = check_json(guests, "memory-only")
    text = " ".join(f["summary"] + " " + f["detail"] for f in data["findings"]
                    if f["check"] == "numa-binding")
    assert "--cpunodebind=2" not in text
    assert "--cpunodebind=1" in text


def test_snc_socket_is_recognised(guests: Guests) -> None:
    """Sub-nodes at distance 11 share a socket; an arena larger than node 1 spans 0 and 1."""
    data = check_json(guests, "snc")
    topology = " ".join(f["detail"] for f in data["findings"] if f["check"] == "numa-topology")
    assert "socket 0: nodes 0,1; socket 1: nodes 2,3" in topology, topology
    binding = " ".join(f["summary"] + " " + f["detail"] for f in data["findings"]
                       if f["check"] == "numa-binding")
    assert "--cpunodebind=0,1" in binding, binding


def test_memory_only_node_is_not_the_remote_cost(guests: Guests) -> None:
    """Unbound, first touch puts the arena on the CPU nodes (0 and 1, distance 21), never on
    the CPU-less node 2: the cost of not binding is 21/10, not node 2's 28/10."""
    data = check_json(guests, "memory-only")
    binding = [f for f in data["findings"] if f["check"] == "numa-binding"]
    text = " ".join(f["summary"] + " " + f["detail"] for f in binding)
    assert "21/10 = 2.1x" in text, text


def test_no_numa_info_is_said(guests: Guests) -> None:
    data = check_json(guests, "no-numa-info")
    placement = [f for f in data["findings"] if f["check"] == "gpu-placement"]
    text = " ".join(f["summary"] + " " + f["detail"] for f in placement)
    assert "-1" in text or "no NUMA" in text or "unknown" in text, text


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_check_runs_clean_on_a_real_kernel(guests: Guests, name: str) -> None:
    """No check crashes (exit 3) and the text output carries no traceback."""
    result = guests.get(name)
    for step in ("check", "check-text"):
        s = result.step(step)
        assert s.rc in (0, 1), s.describe()
        assert "Traceback" not in s.stderr + s.stdout, s.describe()
    checks = result.step("check").json()["checks"]  # type: ignore[index]
    crashed = [c for c in checks if c["status"] == "crashed"]
    assert not crashed, crashed
