"""The fixture host capture-offline-cpus (CPU and PCI facts on older or odd captures): a
16-CPU workstation with 12-15 offline, captured without ``cpu/online`` and without PCI
``class`` files, its node 1 ``local_cpus`` from before the offlining. What the doctor must
make of it, and that lstopo reads the same tree the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

from strata_doctor.facts.gpu import read_gpus
from strata_doctor.facts.numa import read_numa
from strata_doctor.root import Root
from tests.conftest import HOSTS, copy_host, run_cli
from tests.corpus import LSTOPO, run_lstopo

HOST = HOSTS / "capture-offline-cpus"
CPU = HOST / "sys/devices/system/cpu"
GPU = "0000:82:00.0"


@pytest.fixture(scope="module")
def data() -> Dict[str, Any]:
    result = run_cli(["check", "--root", str(HOST), "--format", "json"])
    assert result.exit_code == 1, result.stderr  # numa-binding/unbound
    parsed: Dict[str, Any] = json.loads(result.stdout)
    return parsed


def finding(data: Dict[str, Any], check: str, finding_id: str) -> Dict[str, Any]:
    found = [f for f in data["findings"] if (f["check"], f["id"]) == (check, finding_id)]
    assert len(found) == 1, [(f["check"], f["id"]) for f in data["findings"]]
    one: Dict[str, Any] = found[0]
    return one


def test_the_tree_is_as_odd_as_the_capture() -> None:
    for name in ("online", "offline", "present", "possible"):
        assert not (CPU / name).exists(), name
    assert not (CPU / "cpu0/online").exists()
    assert {n: (CPU / f"cpu{n}/online").read_text() for n in (1, 11, 12, 15)} == {
        1: "1\n", 11: "1\n", 12: "0\n", 15: "0\n"}
    assert not (CPU / "cpu12/topology").exists() and (CPU / "cpu11/topology").is_dir()
    assert not list(HOST.glob("sys/devices/pci*/**/class"))
    dev = HOST / "sys/bus/pci/devices" / GPU
    assert (dev / "modalias").read_text().endswith("bc03sc00i00\n")
    assert (dev / "local_cpulist").read_text() == "4-7\n"
    assert (dev / "local_cpus").read_text() == "f0f0\n"
    assert (HOST / "proc/cpuinfo").read_text().count("processor\t:") == 12


def test_online_cpus_come_from_each_cpus_online_file(data: Dict[str, Any]) -> None:
    numa = read_numa(Root(str(HOST)))
    assert numa.online_cpus == frozenset(range(12))
    assert numa.offline_cpus == frozenset(range(12, 16))
    assert numa.offline_source == "/sys/devices/system/cpu/cpu*/online"
    facts = data["facts"]["numa"]
    assert (facts["online_cpus"], facts["offline_cpus"]) == ("0-11", "12-15")
    assert {n["id"]: n["cpus"] for n in facts["nodes"]} == {0: [0, 1, 2, 3, 8, 9, 10, 11], 1: [4, 5, 6, 7]}
    offline = finding(data, "numa-topology", "offline-cpus")
    assert offline["severity"] == "info"
    assert offline["summary"] == "4 CPUs are offline (12-15); they are left out of every CPU list"
    assert offline["evidence"] == [{"source": "/sys/devices/system/cpu/cpu*/online", "value": "12-15"}]
    # An info row beside the ok layout row: both kept, neither folded (one_row folds problems).
    assert "The rest is fine" not in offline["detail"]


def test_the_gpu_is_recognised_from_modalias(data: Dict[str, Any]) -> None:
    (gpu,) = read_gpus(Root(str(HOST)))
    assert (gpu.address, gpu.pci_class, gpu.class_source) == (GPU, 0x030000, "modalias")
    (fact,) = data["facts"]["gpus"]
    assert (fact["class"], fact["compute"], fact["numa_node"]) == ("030000", True, 1)
    # Placed fine, so told in the detail of the contradiction below, gpu-placement's one row.
    placed = finding(data, "gpu-placement", "local-cpus-contradiction")
    assert "0000:82:00.0 on node 1" in placed["detail"]
    assert {"source": f"/sys/bus/pci/devices/{GPU}/modalias", "value": "class 030000 (no class file)"} \
        in placed["evidence"]


def test_the_local_cpus_contradiction_is_flagged(data: Dict[str, Any]) -> None:
    contradiction = finding(data, "gpu-placement", "local-cpus-contradiction")
    assert contradiction["severity"] == "warning"
    assert contradiction["summary"] == f"{GPU}: local_cpulist is 4-7 but local_cpus f0f0 is 4-7,12-15"
    (gpu,) = data["facts"]["gpus"]
    assert gpu["local_cpus"] == [4, 5, 6, 7]  # local_cpulist is trusted


def test_the_binding_uses_only_online_cpus(data: Dict[str, Any], tmp_path: Path) -> None:
    unbound = finding(data, "numa-binding", "unbound")
    assert "the pool's threads run on all 12 CPUs" in unbound["detail"]
    assert "Binding keeps 4 of 8 cores (4 of 12 CPUs: 4-7)" in unbound["detail"]
    workers = finding(data, "expert-workers", "fits")
    assert "fits node 1's 4 physical cores (4 CPUs: 4-7)" in workers["summary"]
    copy = copy_host(HOST, tmp_path / "host")
    applied = run_cli(["fix", "--root", str(copy), "--apply", "--only", "numa-binding"])
    assert applied.exit_code in (0, 1), applied.stdout + applied.stderr
    dropin = (copy / "etc/systemd/system/strata.service.d/60-strata-doctor-numa.conf").read_text()
    assert "\nCPUAffinity=4-7\nAllowedCPUs=4-7\n" in dropin


# -- lstopo reads the same tree the same way ---------------------------------------------------
@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics is not installed (Debian package hwloc-nox)")
@pytest.mark.lstopo
def test_lstopo_agrees_offline_cpus_included(data: Dict[str, Any]) -> None:
    view = run_lstopo(HOST, keep_gpu_nodes=False)
    tool = {n["id"]: frozenset(n["cpus"]) for n in data["facts"]["numa"]["nodes"]}
    assert {i: cpus for i, (cpus, _) in view.nodes.items()} == tool
    assert {i: memory for i, (_, memory) in view.nodes.items()} == {
        n["id"]: n["memory_total_bytes"] for n in data["facts"]["numa"]["nodes"]}
    lstopo_cpus = frozenset().union(*(cpus for cpus, _ in view.nodes.values()))
    assert lstopo_cpus == frozenset(range(12)) and not lstopo_cpus & frozenset(range(12, 16))
    assert view.distances == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}
    # lstopo places the GPU by local_cpus (4-7,12-15 here): node 1 all the same. It reads
    # the class from the class file only, so with none it shows 0000 where the doctor
    # takes modalias's 030000.
    pci_type, nodeset = view.pci[GPU]
    assert nodeset == {1}
    assert pci_type.startswith("0000 [10de:2204]")
