"""Real host snapshots from ../shared/corpus, checked against the raw files and against lstopo.

Every snapshot must run without a traceback, and the NUMA facts strata-doctor reports
(node ids, online CPUs per node, MemTotal per node, distance rows) must agree with
``lstopo-no-graphics --if fsroot --input ROOT --of xml`` (Debian's hwloc-nox 2.9). Where
lstopo shows a host differently from its raw files on purpose, the difference is named
below as one of the ``LSTOPO_*`` exceptions and checked for exactly what it is, never
skipped wholesale.

Each archive is unpacked once per session into a temporary directory; nothing is written
inside the project. Each test skips, saying why, when ../shared/corpus is absent, and the
lstopo comparisons skip when lstopo-no-graphics is not installed. The machinery (names,
unpacking, lstopo's XML) is in tests/corpus.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional

import pytest

from strata_doctor.facts.gpu import _read_gpu
from strata_doctor.facts.numa import read_numa
from strata_doctor.facts.parse import format_cpulist, parse_cpulist, parse_cpumap, parse_int
from strata_doctor.root import Root
from strata_doctor.rules.gpu import place_gpu
from tests.conftest import run_cli
from tests.corpus import (
    ARCHIVES,
    BUGGY_NUMA,
    HWLOC_SNAPSHOTS,
    KNOWN_SNAPSHOTS,
    LSTOPO,
    LSTOPO_DROPS_EMPTY_NODES,
    LSTOPO_DROPS_OFFLINE_CPUS,
    LSTOPO_GIVES_CPULESS_NODES_A_LOCALITY,
    LSTOPO_HIDES_GPU_MEMORY_NODES,
    LSTOPO_INVENTS_NODE_0,
    LSTOPO_MERGES_BUGGY_NUMA,
    LSTOPO_PLACES_PCI_BY_LOCAL_CPUS,
    MANIFEST,
    MANIFEST_MEMORY_ONLY_ERRATA,
    PCI,
    SNAPSHOTS,
    Corpus,
    gpu_memory_nodes,
    proc_memtotal,
    tool_nodes,
)

pytestmark = pytest.mark.corpus


# == (1) every snapshot runs clean =================================================================
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_check_runs_clean(corpus: Corpus, name: str) -> None:
    root = str(corpus.root(name))
    data = corpus.json(name)  # asserts exit 0 or 1 and valid JSON
    assert data["schema"] == "strata-doctor/check/v1"
    assert data["exit_code"] in (0, 1)
    assert not [c for c in data["checks"] if c["status"] == "crashed"]
    assert {f["severity"] for f in data["findings"]} <= {"ok", "info", "warning", "error"}
    # the arena-fit path and the text renderer on the same host
    for args in (["--format", "json", "--arena", "46.84GiB", "--kv", "3.09GiB"], ["-v"]):
        result = run_cli(["check", "--root", root, *args])
        assert result.exit_code in (0, 1), (args, result.exit_code, result.stdout[-2000:], result.stderr)
        assert "Traceback" not in result.stdout + result.stderr
        if "json" in args:
            crashed = [c for c in json.loads(result.stdout)["checks"] if c["status"] == "crashed"]
            assert not crashed


# == (2) NUMA facts agree with lstopo =================================================================
@pytest.mark.lstopo
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_numa_facts_agree_with_lstopo(corpus: Corpus, name: str) -> None:
    root = corpus.root(name)
    data = corpus.json(name)
    tool = tool_nodes(data)
    view = corpus.lstopo(name, keep_gpu_nodes=True)
    numa = read_numa(Root(root))
    online = frozenset(numa.online_cpus)

    # LSTOPO_DROPS_OFFLINE_CPUS: what the raw cpulists hold beyond the online CPUs never shows.
    lstopo_cpus = frozenset().union(*(cpus for cpus, _ in view.nodes.values()))
    assert not lstopo_cpus & numa.offline_cpus, LSTOPO_DROPS_OFFLINE_CPUS
    for node in numa.nodes:
        assert node.cpus <= node.all_cpus and not node.cpus & numa.offline_cpus

    if name == BUGGY_NUMA:
        # LSTOPO_MERGES_BUGGY_NUMA
        assert sorted(tool) == list(range(8)), LSTOPO_MERGES_BUGGY_NUMA
        assert {tuple(n["cpus"]) for n in tool.values()} == {tuple(range(8))}
        assert {d for n in tool.values() for d in n["distances"].values()} == {10}
        assert sorted(view.nodes) == [0]
        assert view.nodes[0] == (frozenset(range(8)), tool[0]["memory_total_bytes"])
        return

    kept = {i: n for i, n in tool.items() if n["cpus"] or n["memory_total_bytes"]}
    if not kept:
        # LSTOPO_INVENTS_NODE_0 (no NUMA directories), or LSTOPO_DROPS_EMPTY_NODES
        reason = LSTOPO_DROPS_EMPTY_NODES if tool else LSTOPO_INVENTS_NODE_0
        assert sorted(view.nodes) == [0], reason
        cpus, memory = view.nodes[0]
        if online:
            assert cpus == online, reason
        assert memory == proc_memtotal(root), reason
        assert view.distances is None
        return
    if kept.keys() != tool.keys():
        # LSTOPO_DROPS_EMPTY_NODES, with nodes left that lstopo does show
        assert sorted(view.nodes) == sorted(kept), LSTOPO_DROPS_EMPTY_NODES

    assert sorted(view.nodes) == sorted(kept), "node ids"
    for node_id, node in kept.items():
        cpus, memory = view.nodes[node_id]
        if node["cpus"]:
            assert sorted(cpus) == node["cpus"], f"node {node_id}'s online CPUs"
        else:
            # LSTOPO_GIVES_CPULESS_NODES_A_LOCALITY: any CPUs lstopo lists are online ones.
            assert cpus <= online or not online, LSTOPO_GIVES_CPULESS_NODES_A_LOCALITY
        assert memory == (node["memory_total_bytes"] or None), f"node {node_id}'s MemTotal"

    if view.distances is None:
        # lstopo keeps no matrix for one node, nor for rows the firmware left out or zeroed;
        # the tool then reports the rows as a quirk.
        if len(kept) > 1:
            assert data["facts"]["numa"]["quirks"], "lstopo dropped the distances: expected a quirk"
        return
    assert sorted(view.distances) == sorted(kept)
    for node_id, row in view.distances.items():
        tool_row = {int(k): v for k, v in tool[node_id]["distances"].items()}
        assert tool_row == row, f"node {node_id}'s distance row"


@pytest.mark.lstopo
def test_lstopo_hides_gpu_memory_nodes_unless_asked(corpus: Corpus) -> None:
    """LSTOPO_HIDES_GPU_MEMORY_NODES, on the POWER9 host whose six V100s are nodes 250-255."""
    name = "nvidiagpunumanodes"
    hidden = gpu_memory_nodes(corpus.root(name))
    assert hidden == set(range(250, 256))
    tool = tool_nodes(corpus.json(name))
    assert hidden <= set(tool)
    plain = corpus.lstopo(name, keep_gpu_nodes=False)
    kept = corpus.lstopo(name, keep_gpu_nodes=True)
    assert sorted(kept.nodes) == sorted(tool)
    assert sorted(plain.nodes) == sorted(set(tool) - hidden), LSTOPO_HIDES_GPU_MEMORY_NODES
    assert plain.distances is not None
    for node_id, row in plain.distances.items():
        assert row == {k: v for k, v in kept.distances[node_id].items() if k not in hidden}  # type: ignore[index]


@pytest.mark.lstopo
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_display_devices_sit_where_lstopo_puts_them(corpus: Corpus, name: str) -> None:
    """LSTOPO_PLACES_PCI_BY_LOCAL_CPUS: lstopo's locality of each display function is the set
    of nodes whose online CPUs its local_cpus covers, read from the tool's own facts."""
    data = corpus.json(name)
    gpus = data["facts"].get("gpus", [])
    if not gpus:
        return
    view = corpus.lstopo(name, keep_gpu_nodes=True)
    tool = tool_nodes(data)
    cpu_nodes = {i for i, n in tool.items() if n["cpus"]}
    for gpu in gpus:
        if int(gpu["address"].split(":")[0], 16) > 0xFFFF:
            continue  # hwloc 2.9 ignores 32-bit PCI domains
        assert gpu["address"] in view.pci, f"lstopo lost {gpu['address']}"
        pci_type, nodeset = view.pci[gpu["address"]]
        assert pci_type.startswith(gpu["class"][:4])
        local = set(gpu["local_cpus"])
        covered = {i for i in cpu_nodes if local & set(tool[i]["cpus"])}
        if not tool:  # no NUMA directories: lstopo's invented node 0
            assert nodeset == {0}
        else:
            assert nodeset & cpu_nodes == (covered or cpu_nodes), LSTOPO_PLACES_PCI_BY_LOCAL_CPUS


# == (3) the manifest's table holds ======================================================================
@pytest.mark.parametrize("name", HWLOC_SNAPSHOTS)
def test_manifest_table_facts(corpus: Corpus, name: str) -> None:
    root = corpus.root(name)
    row = MANIFEST[name]
    assert root.name in (row.root, "fsroot")
    data = corpus.json(name)
    tool = tool_nodes(data)
    assert tuple(sorted(tool)) == row.node_ids
    memory_only = MANIFEST_MEMORY_ONLY_ERRATA.get(name, row.memory_only)
    assert tuple(i for i, n in sorted(tool.items()) if n["memory_only"]) == memory_only
    if row.online is not None:
        assert data["facts"]["numa"]["online_cpus"] == row.online

    host = Root(root)
    functions = host.listdir(PCI)
    assert len(functions) == row.pci_functions
    histogram: Dict[int, int] = {}
    for address in functions:
        value = parse_int(host.read(f"{PCI}/{address}/numa_node"))
        if value is not None:
            histogram[value] = histogram.get(value, 0) + 1
    assert histogram == row.pci_numa_nodes

    gpus = {g["address"]: g for g in data["facts"].get("gpus", [])}
    assert len(gpus) == len(row.display) + row.display_more
    for address, vendor, device, numa_node in row.display:
        gpu = gpus[address]
        assert gpu["vendor"] == (None if vendor is None else f"{vendor:04x}")
        assert gpu["device"] == (None if device is None else f"{device:04x}")
        assert gpu["numa_node_raw"] == numa_node


def test_nvidiagpunumanodes(corpus: Corpus) -> None:
    """POWER9: nodes 0 and 8 hold the CPUs, 250-255 the six V100s' memory (10/40/80)."""
    data = corpus.json("nvidiagpunumanodes")
    tool = tool_nodes(data)
    assert sorted(tool) == [0, 8, *range(250, 256)]
    assert [i for i, n in tool.items() if n["memory_only"]] == list(range(250, 256))
    assert tool[0]["cpus"] == list(range(16)) and tool[8]["cpus"] == list(range(88, 104))
    assert tool[0]["distances"] == {"0": 10, "8": 40, **{str(i): 80 for i in range(250, 256)}}
    assert tool[253]["memory_total_bytes"] == 15 * 1024**3
    # the GPU functions were trimmed to class and local_cpus: placed by local_cpus alone
    compute = next(g for g in data["facts"]["gpus"] if g["compute"])
    assert (compute["address"], compute["numa_node_raw"]) == ("0004:05:00.0", None)
    assert (compute["numa_node"], compute["numa_node_source"]) == (0, "local_cpulist")
    binding = next(f for f in data["findings"] if f["check"] == "numa-binding")
    assert "--preferred=0 --cpunodebind=0" in binding["summary"]  # never a memory-only node
    # The pool's threads spread over the CPU nodes 0 and 8 (40); GPU memory (80) is not
    # where first touch lands.
    assert "40/10 = 4.0x" in binding["summary"]


def test_pcilocality_numa_node_contradicting_local_cpulist(corpus: Corpus) -> None:
    """40intel64-2g2n4c+pcilocality: nearly every function at numa_node -1, and 0000:43:00.0
    at 2 while its local_cpulist 0-39 spans all four nodes."""
    name = "40intel64-2g2n4c+pcilocality"
    root = Root(corpus.root(name))
    numa = read_numa(root)
    device = _read_gpu(root, "0000:43:00.0", parse_int(root.read(f"{PCI}/0000:43:00.0/class")) or 0)
    assert device.numa_node_raw == 2
    assert device.local_cpus == frozenset(range(40))
    node, source, contradiction = place_gpu(device, numa)
    assert (node, source) == (2, "numa_node")
    assert contradiction == "numa_node says 2 but local_cpulist is 0-39"
    if LSTOPO:
        _, nodeset = corpus.lstopo(name).pci["0000:43:00.0"]
        assert nodeset == {0, 1, 2, 3}, LSTOPO_PLACES_PCI_BY_LOCAL_CPUS
    # its only display function is the BMC's Matrox VGA at -1 with local_cpulist 0-39: no node
    # can be told, and it is no compute GPU anyway
    (gpu,) = corpus.json(name)["facts"]["gpus"]
    assert (gpu["address"], gpu["numa_node_raw"], gpu["numa_node"]) == ("0000:09:03.0", -1, None)
    assert not gpu["compute"]
    findings = {f["id"] for f in corpus.json(name)["findings"]}
    assert "no-compute-gpu" in findings and "unknown-node" not in findings


def test_fakepcilocalities_places_the_vga_on_node_0(corpus: Corpus) -> None:
    data = corpus.json("fakepcilocalities")
    (gpu,) = data["facts"]["gpus"]
    assert (gpu["address"], gpu["numa_node_raw"], gpu["numa_node"]) == ("0000:09:03.0", 0, 0)
    assert gpu["local_cpus"] == tool_nodes(data)[0]["cpus"]
    # the BMC's Matrox VGA is no compute GPU: nothing to bind to, no error
    assert not gpu["compute"] and data["exit_code"] == 0


def test_ghw_p100_at_minus_one_is_placed_on_the_node_of_its_local_cpulist(corpus: Corpus) -> None:
    data = corpus.json("linux-amd64-accel-nvidia")
    p100 = next(g for g in data["facts"]["gpus"] if g["device"] == "15f8")
    assert (p100["vendor"], p100["class"], p100["numa_node_raw"]) == ("10de", "030200", -1)
    assert p100["local_cpus"] == list(range(8)) == tool_nodes(data)[0]["cpus"]
    assert p100["compute"] and p100["numa_node"] == 0


def test_ghw_p100_placement_names_local_cpulist(corpus: Corpus) -> None:
    data = corpus.json("linux-amd64-accel-nvidia")
    p100 = next(g for g in data["facts"]["gpus"] if g["device"] == "15f8")
    assert p100["numa_node_source"] == "local_cpulist"


def test_quirky_snapshots(corpus: Corpus) -> None:
    quirks = {
        name: corpus.json(name)["facts"]["numa"]["quirks"] for name in ("8ia64-2s2c2t", "4fake-4gr1nu1pu")
    }
    # a distance file reading 0 on a host of one node, where no distance is used: no quirk
    assert corpus.json("8ia64-2s2c2t")["facts"]["numa"]["nodes"][0]["distances"] == {"0": 0}
    assert not any("contains 0" in q for q in quirks["8ia64-2s2c2t"])
    # hwloc's fake tree holds cpumap and meminfo only: the distances are the capture's gap
    assert sum("the capture holds no distance file" in q for q in quirks["4fake-4gr1nu1pu"]) == 4
    topology = {f["id"] for f in corpus.json("4fake-4gr1nu1pu")["findings"] if f["check"] == "numa-topology"}
    assert "no-distance" in topology and "firmware-quirk" not in topology
    for name in ("16em64t-4s2c2t", "128ia64-17n4s2c", "256ia64-64n2s2c"):  # only cpumap
        assert {n["cpus_source"] for n in corpus.json(name)["facts"]["numa"]["nodes"]} == {"cpumap"}
    cgroup = corpus.json("32amd64-4s2n4c-cgroup2")["facts"]["numa"]
    # cpu/offline reads 32-47, but cpu/present is 0-31: possible CPUs that are not present are
    # not offline
    assert (cgroup["online_cpus"], cgroup["offline_cpus"]) == ("0-31", "")
    # two sockets at 21/10, but the only display chip is the BMC's ASPEED VGA: no compute GPU,
    # so numa-binding skips with that reason instead of binding to the VGA's node
    seed_like = corpus.json("32em64t-2n8c+dax+nvme+mic+dimms")
    assert not [f for f in seed_like["findings"] if f["check"] == "numa-binding"]
    assert any(f["id"] == "no-compute-gpu" and "ASPEED" in f["summary"] for f in seed_like["findings"])


def test_procfs_gpu_outside_the_pci_bus_list_is_not_a_gpu(corpus: Corpus) -> None:
    """The procfs fixtures keep their AMD GPU only under sys/class/drm/card0/device, not in
    /sys/bus/pci/devices, so neither the tool nor lstopo sees a display function there."""
    name = "prometheus-procfs-fixtures"
    root = corpus.root(name)
    assert (root / "sys/class/drm/card0/device/class").read_text().startswith("0x03")
    assert corpus.json(name)["facts"]["gpus"] == []
    if LSTOPO:
        assert not [t for t, _ in corpus.lstopo(name).pci.values() if t.startswith("03")]


# == (4) GPU facts against the raw files =================================================================
def raw_display_functions(root: Path) -> Dict[str, Dict[str, Optional[str]]]:
    """Display-class functions read straight from the files, without the tool's readers."""
    found = {}
    devices = root / PCI.lstrip("/")
    for entry in sorted(devices.iterdir()) if devices.is_dir() else []:
        def read(attr: str, entry: Path = entry) -> Optional[str]:
            path = entry / attr
            return path.read_text().replace("\0", "").strip() if path.is_file() else None

        klass = read("class")
        if klass and int(klass, 16) >> 16 == 0x03:
            found[entry.name] = {a: read(a) for a in ("class", "vendor", "device", "numa_node",
                                                       "local_cpulist", "local_cpus")}
    return found


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_gpu_facts_match_the_raw_files(corpus: Corpus, name: str) -> None:
    data = corpus.json(name)
    raw = raw_display_functions(corpus.root(name))
    gpus = {g["address"]: g for g in data["facts"].get("gpus", [])}
    assert sorted(gpus) == sorted(raw)
    if not gpus:
        return
    # BMC and emulated display chips (docs/checks/gpu-placement.md) are never the compute GPU
    management = {"1a03", "102b", "1013", "15ad", "1b36"}
    compute_capable = [g for g in gpus.values() if g["vendor"] not in management
                       and (g["vendor"], g["device"]) not in (("1af4", "1050"), ("1234", "1111"))]
    assert sum(g["compute"] for g in gpus.values()) == (1 if compute_capable else 0)
    tool = tool_nodes(data)
    numa = read_numa(Root(corpus.root(name)))
    cpu_nodes = [n.id for n in numa.cpu_nodes]
    for address, files in raw.items():
        gpu = gpus[address]
        assert gpu["class"] == f"{int(files['class'] or '0', 16):06x}"
        for attr in ("vendor", "device"):
            assert gpu[attr] == (None if files[attr] is None else f"{int(files[attr], 16):04x}")
        raw_node = None if files["numa_node"] is None else int(files["numa_node"])
        assert gpu["numa_node_raw"] == raw_node
        if files["local_cpulist"] is not None:
            local = parse_cpulist(files["local_cpulist"])
        else:
            local = parse_cpumap(files["local_cpus"] or "")
        assert gpu["local_cpus"] == sorted(local), format_cpulist(local)
        if not gpu["compute"]:
            continue
        # numa_node when it names a node; else the one node whose CPUs hold local_cpulist
        owners = [n.id for n in numa.nodes if local and local <= n.all_cpus]
        expected: Optional[int] = None
        if raw_node is not None and raw_node >= 0 and raw_node in tool:
            expected = raw_node
        elif len(cpu_nodes) > 1:
            expected = owners[0] if len(owners) == 1 else None
        elif len(tool) == 1:
            expected = next(iter(tool))
        assert gpu["numa_node"] == expected, (gpu["numa_node"], gpu["numa_node_source"])


def test_every_snapshot_has_a_manifest_root_or_is_found(corpus: Corpus) -> None:
    """The table names the root folder of every hwloc archive; the rest are found by looking.

    The names the tests are collected for (tests/corpus.py) are exactly the corpus's archives,
    so a snapshot added to the corpus is never silently left out.
    """
    hwloc = {name for name, path in ARCHIVES.items() if path.parent.name == "hwloc"}
    assert hwloc == set(HWLOC_SNAPSHOTS) == set(MANIFEST)
    assert sorted(ARCHIVES) == SNAPSHOTS
    assert {name: path.parent.name for name, path in ARCHIVES.items()} == KNOWN_SNAPSHOTS
