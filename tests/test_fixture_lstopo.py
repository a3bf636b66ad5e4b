"""Every fixture host under tests/fixtures/hosts, read by lstopo and by strata-doctor.

``lstopo-no-graphics --if fsroot --input HOST --of xml`` (Debian's hwloc-nox 2.9) is an
independent reader of the same tree: its NUMA nodes (ids, cpusets, local memory), its PUs,
its distance matrix and the node each display function hangs from must be what
``strata-doctor check --format json`` reports. This holds the generated trees to the kernel's
formats as much as it holds the doctor's readers: lstopo refuses a tree whose CPUs have no
topology bitmaps, so make_hosts.py writes them for every host.

Where lstopo shows a host differently on purpose, the host is named in ``DISAGREEMENTS``
with the reason and checked for exactly that difference, never skipped. The parsing of
lstopo's XML is shared with the corpus comparison (tests/corpus.py). The tests skip, saying
why, when lstopo-no-graphics is not installed.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, Tuple

import pytest

from strata_doctor.facts.parse import parse_cpulist
from tests.conftest import HOSTS, check_json
from tests.corpus import (
    LSTOPO,
    LSTOPO_INVENTS_NODE_0,
    LSTOPO_PLACES_PCI_BY_LOCAL_CPUS,
    LstopoView,
    proc_memtotal,
    run_lstopo,
    tool_nodes,
)

HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if (p / "README.md").is_file())

needs_lstopo = pytest.mark.skipif(
    LSTOPO is None, reason="lstopo-no-graphics is not installed (Debian package hwloc-nox)"
)

LSTOPO_NO_MATRIX_FOR_ONE_NODE = (
    "lstopo keeps no distance matrix for a single node; the doctor reports its one row (10)"
)

# The fixture hosts lstopo shows differently from the doctor, and why. Each is checked below
# for exactly what it is; test_disagreements_are_current keeps the list from going stale.
DISAGREEMENTS: Dict[str, str] = {
    "container-ro-sys": (
        "WSL2's kernel has no /sys/devices/system/node: the doctor reports no NUMA node, "
        + LSTOPO_INVENTS_NODE_0
    ),
    "vm-gpu-nonuma": (
        "the P100's numa_node is -1 and its local_cpulist 0-15 spans both vNUMA nodes: the "
        "doctor places it on no node, lstopo hangs it from the machine (nodes 0-1); "
        + LSTOPO_PLACES_PCI_BY_LOCAL_CPUS
    ),
    "capture-offline-cpus": (
        "the capture has no PCI class files: lstopo reads only those and shows the RTX 3090's "
        "class as 0000, where the doctor takes 030000 from modalias"
    ),
    "cpu-links-only": (
        "node0 has cpuN links but no cpumap: lstopo reads no node folder without a cpumap and "
        "makes one node of the machine, its memory /proc/meminfo's (7.75 GiB); the doctor reads "
        "node0's links and its meminfo (8.00 GiB)"
    ),
    "hidden-node": (
        "the capture has no node0 folder, though node/online and has_memory list node 0: lstopo "
        "shows node 1 alone and CPUs 0-8 in no node; the doctor adds node 0 with those CPUs "
        "(online, in no listed node) and unknown memory, and reads node 1's row '21 10' as one "
        "entry per online node"
    ),
    "container-numa-limits": (
        "by default lstopo shows only what the container's cpuset allows (node 0, CPUs "
        "0-21,44-65); the doctor reports the host's nodes and the cpuset apart, so the two "
        "agree with --disallowed, and lstopo's default view is the cgroup-limits evidence"
    ),
}

_JSON: Dict[str, Dict[str, Any]] = {}
_VIEWS: Dict[Tuple[str, bool], LstopoView] = {}


def doctor(host: str) -> Dict[str, Any]:
    if host not in _JSON:
        _JSON[host] = check_json(HOSTS / host)
    return _JSON[host]


def lstopo(host: str, disallowed: bool = True) -> LstopoView:
    key = (host, disallowed)
    if key not in _VIEWS:
        _VIEWS[key] = run_lstopo(HOSTS / host, keep_gpu_nodes=False, disallowed=disallowed)
    return _VIEWS[key]


def online_cpus(data: Dict[str, Any]) -> FrozenSet[int]:
    return parse_cpulist(data["facts"]["numa"]["online_cpus"])


def test_disagreements_are_current() -> None:
    """Each listed host still has what makes lstopo differ (read without lstopo)."""
    assert set(DISAGREEMENTS) <= set(HOST_NAMES)
    assert len(HOST_NAMES) >= 16
    assert not tool_nodes(doctor("container-ro-sys"))
    unplaced = [g for g in doctor("vm-gpu-nonuma")["facts"]["gpus"] if g["numa_node"] is None]
    assert [g["numa_node_raw"] for g in unplaced] == [-1]
    assert not list(HOSTS.glob("capture-offline-cpus/sys/devices/pci*/**/class"))
    cgroup = {f["id"] for f in doctor("container-numa-limits")["findings"] if f["check"] == "cgroup-limits"}
    assert {"cpuset-cpus", "cpuset-mems"} <= cgroup


@needs_lstopo
@pytest.mark.lstopo
@pytest.mark.parametrize("host", HOST_NAMES)
def test_numa_nodes_and_pus_agree_with_lstopo(host: str) -> None:
    data = doctor(host)
    view = lstopo(host)
    tool = tool_nodes(data)
    online = online_cpus(data)
    assert view.pus == online, "lstopo's PUs are the online CPUs"
    assert online, "every fixture host has CPUs"

    if not tool:
        assert host in DISAGREEMENTS, f"the doctor reports no node: list {host} with the reason"
        reason = DISAGREEMENTS[host]
        assert host == "container-ro-sys", reason
        assert view.nodes == {0: (online, proc_memtotal(HOSTS / host))}, reason
        assert view.distances is None, reason
        return

    if host == "cpu-links-only":
        reason = DISAGREEMENTS[host]
        assert tool[0]["cpus_source"] == "links" and view.nodes[0][1] == proc_memtotal(HOSTS / host), reason
        tool[0] = {**tool[0], "memory_total_bytes": view.nodes[0][1]}
    if host == "hidden-node":
        reason = DISAGREEMENTS[host]
        hidden = tool.pop(0)
        assert hidden["cpus_source"] == "unclaimed" and hidden["memory_total_bytes"] is None, reason
        assert frozenset(hidden["cpus"]) == online - view.nodes[1][0], reason
        assert tool[1]["distances"] == {"0": 21, "1": 10} and view.distances is None, reason
        tool[1] = {**tool[1], "distances": {"1": 10}}  # lstopo, one node: no matrix
    assert {i: (frozenset(n["cpus"]), n["memory_total_bytes"]) for i, n in tool.items()} == view.nodes
    rows = {i: {int(k): d for k, d in n["distances"].items()} for i, n in tool.items()}
    if len(tool) == 1:
        (only,) = tool
        assert rows == {only: {only: 10}} and view.distances is None, LSTOPO_NO_MATRIX_FOR_ONE_NODE
    else:
        assert view.distances == rows


@needs_lstopo
@pytest.mark.lstopo
@pytest.mark.parametrize("host", HOST_NAMES)
def test_display_functions_sit_where_lstopo_puts_them(host: str) -> None:
    data = doctor(host)
    view = lstopo(host)
    gpus = data["facts"].get("gpus", [])
    if not gpus:
        assert not [t for t, _ in view.pci.values() if t.startswith("03")], "lstopo found a display function"
        return
    cpu_nodes = {i for i, n in tool_nodes(data).items() if n["cpus"]}
    for gpu in gpus:
        assert gpu["address"] in view.pci, f"lstopo lost {gpu['address']}"
        pci_type, nodeset = view.pci[gpu["address"]]
        if host == "capture-offline-cpus":
            assert pci_type.startswith("0000 ") and gpu["class"] == "030000", DISAGREEMENTS[host]
        else:
            assert pci_type.startswith(gpu["class"][:4] + " ")
        if gpu["numa_node"] is None:
            assert host in DISAGREEMENTS, f"{gpu['address']} is on no node: list {host} with the reason"
            reason = DISAGREEMENTS[host]
            assert gpu["numa_node_raw"] == -1, reason
            spanned = {i for i in cpu_nodes if set(gpu["local_cpus"]) & set(tool_nodes(data)[i]["cpus"])}
            assert len(spanned) > 1, reason
            assert nodeset == cpu_nodes, reason
        else:
            assert nodeset == {gpu["numa_node"]}, gpu["address"]


@needs_lstopo
@pytest.mark.lstopo
def test_lstopo_shows_the_container_cpuset_as_the_doctor_reads_it() -> None:
    host = "container-numa-limits"
    data = doctor(host)
    evidence = {
        f["id"]: f["evidence"][0]
        for f in data["findings"]
        if f["check"] == "cgroup-limits" and f["id"] in ("cpuset-cpus", "cpuset-mems")
    }
    assert evidence["cpuset-cpus"]["source"] == "/sys/fs/cgroup/cpuset.cpus.effective"
    allowed_cpus = parse_cpulist(evidence["cpuset-cpus"]["value"])
    allowed_nodes = parse_cpulist(evidence["cpuset-mems"]["value"])
    view = lstopo(host, disallowed=False)
    assert view.pus == allowed_cpus == frozenset(range(22)) | frozenset(range(44, 66)), DISAGREEMENTS[host]
    assert set(view.nodes) == allowed_nodes == {0}, DISAGREEMENTS[host]
    assert view.nodes[0][0] == allowed_cpus
    assert len(lstopo(host).pus) == 88  # the host's CPUs, with --disallowed
