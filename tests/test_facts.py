"""The fact readers on small host trees: the odd layouts real kernels and firmware produce."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from strata_doctor.facts.cpu import blocks_topology, plain_cpuinfo_topology, read_cpu
from strata_doctor.facts.gpu import read_gpus
from strata_doctor.facts.numa import read_numa
from strata_doctor.facts.parse import parse_cpuinfo
from strata_doctor.root import Root
from strata_doctor.rules.gpu import place_gpu
from tests.conftest import write_tree

NODE = "/sys/devices/system/node"
CPU = "/sys/devices/system/cpu"
GiB = 1024**3


def node_files(node_id: int, cpulist: str, mem_kb: int, distance: str) -> Dict[str, str]:
    return {
        f"{NODE}/node{node_id}/cpulist": cpulist + "\n",
        f"{NODE}/node{node_id}/meminfo": (
            f"Node {node_id} MemTotal:       {mem_kb} kB\n"
            f"Node {node_id} MemFree:        {mem_kb // 2} kB\n"
            f"Node {node_id} HugePages_Total:     0\n"
        ),
        f"{NODE}/node{node_id}/distance": distance + "\n",
    }


def gpu_files(address: str, **attrs: str) -> Dict[str, str]:
    """One PCI function under a host bridge, linked from /sys/bus/pci/devices."""
    bus = address.split(":")[0] + ":" + address.split(":")[1]
    real = f"/sys/devices/pci{bus}/{address}"
    files = {f"{real}/{name}": value + "\n" for name, value in attrs.items()}
    files[f"/sys/bus/pci/devices/{address}"] = f"->../../../devices/pci{bus}/{address}"
    return files


def build(tmp_path: Path, files: Dict[str, str]) -> Root:
    return Root(write_tree(tmp_path / "host", files))


# -- NUMA ---------------------------------------------------------------------
def test_seed_box_layout(tmp_path: Path) -> None:
    files = {
        **node_files(0, "0-21,44-65", 65929216, "10 21"),
        **node_files(1, "22-43,66-87", 66056192, "21 10"),
        f"{CPU}/online": "0-87\n",
    }
    numa = read_numa(build(tmp_path, files))
    assert [n.id for n in numa.nodes] == [0, 1]
    node1 = numa.node(1)
    assert node1 is not None
    assert node1.cpus == frozenset(range(22, 44)) | frozenset(range(66, 88))
    assert node1.memory_total == 66056192 * 1024
    assert node1.memory_free == 66056192 // 2 * 1024
    assert node1.distance_to(0) == 21 and node1.distance_to(1) == 10
    assert node1.cpus_source == "cpulist"
    assert numa.node_of_cpus(frozenset({22, 66})) == 1
    assert numa.node_of_cpus(frozenset({0, 22})) is None
    assert numa.quirks == ()


SPARSE = (0, 1, 2, 33, 34, 45, 72, 73)


def test_sparse_node_ids_pair_distances_by_position(tmp_path: Path) -> None:
    files: Dict[str, str] = {}
    for i, node_id in enumerate(SPARSE):
        row = " ".join("10" if j == i else str(20 + j) for j in range(len(SPARSE)))
        files.update(node_files(node_id, f"{2 * i}-{2 * i + 1}", 1048576, row))
    numa = read_numa(build(tmp_path, files))
    assert [n.id for n in numa.nodes] == list(SPARSE)  # numeric order, not node33 < node4
    node45 = numa.node(45)
    assert node45 is not None
    assert node45.cpus == frozenset({10, 11})
    assert dict(node45.distances) == {0: 20, 1: 21, 2: 22, 33: 23, 34: 24, 45: 10, 72: 26, 73: 27}
    assert node45.distance_to(73) == 27
    assert numa.node(3) is None
    assert numa.online_cpus == frozenset(range(16))  # no cpu/online: the nodes' CPUs


def test_only_cpumap_on_old_kernels(tmp_path: Path) -> None:
    files = {
        f"{NODE}/node0/cpumap": "00000000,0000000f\n",
        f"{NODE}/node1/cpumap": "00000000,000000f0\x00\x00\n",
        f"{NODE}/node0/distance": "10 20\n",
        f"{NODE}/node1/distance": "20 10\n",
    }
    numa = read_numa(build(tmp_path, files))
    assert [(n.id, sorted(n.cpus), n.cpus_source) for n in numa.nodes] == [
        (0, [0, 1, 2, 3], "cpumap"),
        (1, [4, 5, 6, 7], "cpumap"),
    ]
    assert all(n.memory_total is None for n in numa.nodes)


def test_multiword_cpumap(tmp_path: Path) -> None:
    files = {
        f"{NODE}/node0/cpumap": "000000ff,ff000000,00000000,0000ffff\n",
        f"{NODE}/node0/distance": "10\n",
    }
    node = read_numa(build(tmp_path, files)).nodes[0]
    assert node.cpus == frozenset(range(16)) | frozenset(range(88, 104))


def test_empty_has_cpu_and_nul_padding(tmp_path: Path) -> None:
    files = {
        f"{NODE}/has_cpu": "",
        f"{NODE}/has_memory": "\x00",
        f"{NODE}/online": "0-1\n",
        f"{NODE}/node0/cpulist": "0-3\n\x00\x00\x00\x00",
        f"{NODE}/node0/meminfo": "Node 0 MemTotal:  1048576 kB\n\x00\x00",
        f"{NODE}/node0/distance": "10 21\x00",
        f"{NODE}/node1/cpulist": "4-7\x00",
        f"{NODE}/node1/meminfo": "Node 1 MemTotal:  1048576 kB\n",
        f"{NODE}/node1/distance": "21 10\n\x00",
    }
    numa = read_numa(build(tmp_path, files))
    assert [sorted(n.cpus) for n in numa.nodes] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [n.memory_total for n in numa.nodes] == [GiB, GiB]
    assert numa.nodes[1].distances == ((0, 21), (1, 10))
    assert numa.quirks == ()


def test_distance_zero_is_a_quirk(tmp_path: Path) -> None:
    files = {**node_files(0, "0-3", 1048576, "0 0"), **node_files(1, "4-7", 1048576, "0 0")}
    numa = read_numa(build(tmp_path, files))
    assert numa.nodes[0].distances == ((0, 0), (1, 0))
    assert any("contains 0" in q for q in numa.quirks)


def test_asymmetric_distances_are_a_quirk(tmp_path: Path) -> None:
    files = {**node_files(0, "0-3", 1048576, "10 21"), **node_files(1, "4-7", 1048576, "31 10")}
    numa = read_numa(build(tmp_path, files))
    assert "distance node0->node1 is 21 but back is 31" in numa.quirks


def test_no_numa_directories(tmp_path: Path) -> None:
    files = {f"{CPU}/online": "0-1\n", f"{CPU}/offline": "2-7\n", "/proc/meminfo": "MemTotal: 2 kB\n"}
    numa = read_numa(build(tmp_path, files))
    assert numa.nodes == ()
    assert numa.online_cpus == frozenset({0, 1})
    assert numa.offline_cpus == frozenset(range(2, 8))
    assert numa.cpu_nodes == ()
    assert numa.node_of_cpus(frozenset({0})) is None


def test_empty_root_reads_nothing_and_raises_nothing(tmp_path: Path) -> None:
    root = build(tmp_path, {"/etc/hostname": "empty\n"})
    numa = read_numa(root)
    assert (numa.nodes, numa.online_cpus, numa.quirks) == ((), frozenset(), ())
    assert read_gpus(root) == ()
    cpu = read_cpu(root)
    assert (cpu.model, cpu.sockets, cpu.flags) == (None, 0, frozenset())
    assert root.reads[f"{CPU}/online"] == "missing"


def test_offline_cpus_are_left_out_of_node_cpus(tmp_path: Path) -> None:
    files = {
        **node_files(0, "0-3,8-11", 1048576, "10 21"),
        **node_files(1, "4-7,12-15", 1048576, "21 10"),
        f"{CPU}/online": "0-7\n",
        f"{CPU}/offline": "8-15\n",
    }
    numa = read_numa(build(tmp_path, files))
    node1 = numa.node(1)
    assert node1 is not None
    assert node1.cpus == frozenset(range(4, 8))
    assert node1.all_cpus == frozenset(range(4, 8)) | frozenset(range(12, 16))
    assert numa.offline_cpus == frozenset(range(8, 16))
    # an offline CPU still says which node it belongs to
    assert numa.node_of_cpus(frozenset({12})) == 1


def test_offline_without_online_file(tmp_path: Path) -> None:
    files = {**node_files(0, "0-3", 1048576, "10"), f"{CPU}/offline": "3\n"}
    numa = read_numa(build(tmp_path, files))
    assert numa.online_cpus == frozenset({0, 1, 2})
    assert numa.nodes[0].cpus == frozenset({0, 1, 2})


def test_memory_only_and_memoryless_nodes(tmp_path: Path) -> None:
    files = {
        **node_files(0, "0-7", 16 * 1048576, "10 40 80 20"),
        **node_files(8, "", 15 * 1048576, "40 10 80 20"),  # GPU memory, CXL, HBM: no CPUs
        **node_files(250, "\x00", 15 * 1048576, "80 80 10 80"),
        **node_files(3, "8-15", 0, "20 20 80 10"),  # CPUs but no memory
    }
    numa = read_numa(build(tmp_path, files))
    by_id = {n.id: n for n in numa.nodes}
    assert [n.id for n in numa.nodes] == [0, 3, 8, 250]
    assert by_id[8].memory_only and by_id[250].memory_only
    assert by_id[8].memory_total == 15 * GiB
    assert not by_id[0].memory_only
    assert not by_id[3].has_memory and not by_id[3].memory_only
    assert [n.id for n in numa.cpu_nodes] == [0, 3]
    assert numa.node_of_cpus(frozenset({9})) == 3


# -- GPUs and placement -------------------------------------------------------------
TWO_NODES = {
    **node_files(0, "0-3", 1048576, "10 21"),
    **node_files(1, "4-7", 1048576, "21 10"),
    f"{CPU}/online": "0-7\n",
}


def test_numa_node_minus_one_is_placed_by_local_cpulist(tmp_path: Path) -> None:
    files = {
        **TWO_NODES,
        **gpu_files("0000:84:00.0", **{"class": "0x030000", "vendor": "0x10de", "device": "0x1b06",
                                       "numa_node": "-1", "local_cpulist": "4-7"}),
    }
    root = build(tmp_path, files)
    (gpu,) = read_gpus(root)
    assert gpu.numa_node_raw == -1
    assert gpu.local_cpus == frozenset(range(4, 8))
    assert place_gpu(gpu, read_numa(root)) == (1, "local_cpulist", None)


def test_missing_numa_node_falls_back_to_local_cpus_mask(tmp_path: Path) -> None:
    files = {
        **TWO_NODES,
        **gpu_files("0000:05:00.0", **{"class": "0x030200", "local_cpus": "00000000,000000f0"}),
    }
    root = build(tmp_path, files)
    (gpu,) = read_gpus(root)
    assert (gpu.numa_node_raw, gpu.vendor, gpu.device, gpu.ids) == (None, None, None, "?:?")
    assert gpu.local_cpus == frozenset(range(4, 8))
    assert place_gpu(gpu, read_numa(root))[:2] == (1, "local_cpulist")


def test_numa_node_contradicting_local_cpulist(tmp_path: Path) -> None:
    files = {
        **TWO_NODES,
        **gpu_files("0000:84:00.0", **{"class": "0x030000", "numa_node": "0", "local_cpulist": "4-7"}),
    }
    root = build(tmp_path, files)
    (gpu,) = read_gpus(root)
    node, source, contradiction = place_gpu(gpu, read_numa(root))
    assert (node, source) == (0, "numa_node")
    assert contradiction == "numa_node says 0 but local_cpulist is 4-7 (those are node 1's CPUs)"


def test_local_cpulist_over_every_node_places_nothing(tmp_path: Path) -> None:
    files = {**TWO_NODES, **gpu_files("0000:09:03.0", **{"class": "0x030000", "numa_node": "-1",
                                                        "local_cpulist": "0-7"})}
    root = build(tmp_path, files)
    (gpu,) = read_gpus(root)
    assert place_gpu(gpu, read_numa(root)) == (None, "none", None)


def test_numa_node_naming_an_absent_node_is_not_trusted(tmp_path: Path) -> None:
    files = {**TWO_NODES, **gpu_files("0000:84:00.0", **{"class": "0x030000", "numa_node": "7",
                                                        "local_cpulist": "0-3"})}
    root = build(tmp_path, files)
    (gpu,) = read_gpus(root)
    assert place_gpu(gpu, read_numa(root))[:2] == (0, "local_cpulist")


def test_gpu_attributes(tmp_path: Path) -> None:
    resource = (
        "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n"
        "0x000000e000000000 0x000000efffffffff 0x000000000014220c\n"
        "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
        "0x000000000000e000 0x000000000000e07f 0x0000000000040101\n"
    )
    files = {
        **TWO_NODES,
        **gpu_files("0000:84:00.0", **{
            "class": "0x030000", "vendor": "0x10de", "device": "0x1b06", "numa_node": "1",
            "local_cpulist": "4-7", "boot_vga": "0", "current_link_speed": "2.5 GT/s PCIe",
            "max_link_speed": "8.0 GT/s PCIe", "current_link_width": "16", "max_link_width": "16",
            "resource": resource.rstrip("\n"),
        }),
        "/sys/devices/pci0000:84/0000:84:00.0/driver": "->../../../bus/pci/drivers/nvidia",
        **gpu_files("0000:00:02.0", **{"class": "0x030000", "vendor": "0x8086", "boot_vga": "1"}),
        **gpu_files("0000:00:1f.6", **{"class": "0x020000", "vendor": "0x8086"}),  # a NIC
        **gpu_files("0000:00:1f.3", **{"class": "garbage"}),
    }
    gpus = read_gpus(build(tmp_path, files))
    assert [g.address for g in gpus] == ["0000:00:02.0", "0000:84:00.0"]
    igpu, gtx = gpus
    assert igpu.boot_vga is True and igpu.vendor_name == "Intel" and igpu.largest_bar == 0
    assert (gtx.ids, gtx.vendor_name, gtx.driver, gtx.boot_vga) == ("10de:1b06", "NVIDIA", "nvidia", False)
    assert (gtx.link.current_speed, gtx.link.max_speed) == ("2.5 GT/s PCIe", "8.0 GT/s PCIe")
    assert (gtx.link.current_width, gtx.link.max_width, gtx.link.known) == (16, 16, True)
    assert gtx.largest_bar == 64 * GiB
    assert not igpu.link.known


# -- CPU ------------------------------------------------------------------------
def test_cpu_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = "".join(
        f"processor\t: {c}\nmodel name\t: Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz\n"
        f"physical id\t: {c // 4 % 2}\ncore id\t\t: {c % 4}\n"
        "flags\t\t: fpu sse2 avx avx2 fma\n\n"
        for c in range(16)
    )
    cpu = read_cpu(build(tmp_path, {"/proc/cpuinfo": cpuinfo}))
    assert cpu.model == "Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz"
    assert cpu.sockets == 2
    assert cpu.expert_isa == ("avx2",)
    assert cpu.cores_in(frozenset(range(16))) == 8  # CPUs 8-15 are SMT siblings of 0-7
    assert cpu.packages_in(frozenset({4, 5})) == frozenset({1})


def test_cpu_topology_from_sysfs_when_cpuinfo_has_none(tmp_path: Path) -> None:
    files: Dict[str, str] = {
        "/proc/cpuinfo": "processor\t: 0\nFeatures\t: fp asimd\n\nprocessor\t: 1\n\n",
    }
    for c in range(4):
        files[f"{CPU}/cpu{c}/topology/physical_package_id"] = f"{c // 2}\n"
        files[f"{CPU}/cpu{c}/topology/core_id"] = f"{c % 2}\n"
    files[f"{CPU}/cpufreq/policy0"] = "x\n"
    cpu = read_cpu(build(tmp_path, files))
    assert cpu.sockets == 2
    assert cpu.flags == frozenset({"fp", "asimd"})
    assert cpu.expert_isa == ()
    assert dict(cpu.package_of) == {0: 0, 1: 0, 2: 1, 3: 1}


# Lines of cpuinfo blocks, mostly in x86's order, sometimes missing, doubled, moved or
# with values that int() reads differently from parse_int (hex, blanks, signs, garbage).
_ID_VALUES = st.sampled_from(["0", "1", "17", " 3 ", "0x1f", "", "x", "-1", "+2", "1_0", "9" * 70])
_cpuinfo_block = st.tuples(
    st.lists(st.sampled_from(["processor", "physical id", "core id", "model name", "flags",
                              "  processor", "core id ", "processor2"]), min_size=0, max_size=5),
    st.lists(_ID_VALUES, min_size=5, max_size=5),
    st.booleans(),
).map(lambda b: [f"{key}\t: {value}" for key, value in zip(
    b[0] if b[2] else ["processor", "vendor_id", "physical id", "siblings", "core id"][: len(b[0]) + 3],
    b[1])])
_cpuinfo_text = st.tuples(
    st.lists(_cpuinfo_block, max_size=6),
    st.sampled_from(["\n\n", "\n \n", "\n\t\n", "\n", "\n\n\n"]),
    st.sampled_from(["", "\n", "\n\n", " "]),
).map(lambda t: t[1].join("\n".join(lines) for lines in t[0]) + t[2])


@settings(database=None, deadline=None, max_examples=400)
@given(_cpuinfo_text)
@example("processor\t: 0\nvendor_id\t: 0\nphysical id\t: 0\nsiblings\t: 0\ncore id\t: " + "9" * 70)
def test_plain_cpuinfo_topology_agrees_with_parse_cpuinfo(text: str) -> None:
    assert plain_cpuinfo_topology(text.encode()) == blocks_topology(parse_cpuinfo(text))


def test_regular_cpuinfo_of_a_large_host() -> None:
    blocks: List[str] = [
        f"processor\t: {c}\nvendor_id\t: GenuineIntel\nphysical id\t: {c // 256}\n"
        f"core id\t\t: {c % 128}\nflags\t\t: fpu avx2\n" for c in range(2048)
    ]
    package_of, core_of = plain_cpuinfo_topology(("\n".join(blocks) + "\n").encode())
    assert len(package_of) == 2048 and set(package_of.values()) == set(range(8))
    assert core_of[2047] == (7, 127) and core_of[300] == (1, 44)


@pytest.mark.parametrize("flags", ["avx512f avx512_bf16 amx_tile avx2", "avx2 avx512f"])
def test_expert_isa_is_in_preference_order(tmp_path: Path, flags: str) -> None:
    cpu = read_cpu(build(tmp_path, {"/proc/cpuinfo": f"processor\t: 0\nflags\t: {flags}\n"}))
    assert cpu.expert_isa == tuple(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile")
                                   if f in flags.split())


def test_cpus_listed_by_two_nodes_are_a_quirk(tmp_path: Path) -> None:
    node = "/sys/devices/system/node"
    root = write_tree(tmp_path, {
        f"{node}/node0/cpulist": "0-3\n", f"{node}/node1/cpulist": "0-3\n",
        f"{node}/node0/distance": "10 10\n", f"{node}/node1/distance": "10 10\n",
    })
    numa = read_numa(Root(root))
    assert numa.quirks == ("nodes 0,1 all list the same CPUs (0-3)",)


def test_online_cpus_fall_back_to_cpu_folders(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "/sys/devices/system/cpu/cpu0/uevent": "", "/sys/devices/system/cpu/cpu1/uevent": "",
    })
    assert read_numa(Root(root)).online_cpus == frozenset({0, 1})


def test_missing_meminfo_is_unknown_not_memoryless(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"/sys/devices/system/node/node0/cpulist": "0-1\n"})
    node = read_numa(Root(root)).nodes[0]
    assert node.memory_total is None and not node.memoryless and not node.memory_only
