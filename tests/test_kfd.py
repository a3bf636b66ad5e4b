"""The amdkfd topology's parsers on the kernel's own text (kfd_topology.c's node_show,
mem_show and iolink_show), its reader on small trees with missing and odd files, and the
fixture hosts' topologies."""

from __future__ import annotations

from pathlib import Path

from strata_doctor.facts.kfd import (
    LINK_PCIE,
    LINK_XGMI,
    KfdMemBank,
    KfdNode,
    parse_io_link,
    parse_kfd_properties,
    parse_mem_bank,
    read_kfd,
)
from strata_doctor.root import Root
from tests.conftest import HOSTS, write_tree

KFD = "/sys/class/kfd/kfd/topology"

# An MI210's node as node_show prints it: "%s %u\n" per property (kernel 6.8's list).
MI210_NODE = """cpu_cores_count 0
simd_count 416
mem_banks_count 1
caches_count 0
io_links_count 4
p2p_links_count 0
cpu_core_id_base 0
simd_id_base 2147487744
max_waves_per_simd 8
lds_size_in_kb 64
gds_size_in_kb 0
num_gws 64
wave_front_size 64
array_count 8
simd_arrays_per_engine 1
cu_per_simd_array 16
simd_per_cu 4
max_slots_scratch_cu 32
gfx_target_version 90010
vendor_id 4098
device_id 29711
location_id 33536
domain 0
drm_render_minor 132
hive_id 1917428717447034178
num_sdma_engines 2
num_sdma_xgmi_engines 6
num_sdma_queues_per_engine 8
num_cp_queues 24
max_engine_clk_fcompute 1700
local_mem_size 0
fw_version 78
capability 746604928
sdma_fw_version 8
unique_id 6493346237788495159
num_xcc 1
max_engine_clk_ccompute 2450
"""
CPU_NODE = """cpu_cores_count 128
simd_count 0
mem_banks_count 1
caches_count 0
io_links_count 5
p2p_links_count 0
cpu_core_id_base 128
simd_id_base 0
gfx_target_version 0
vendor_id 0
device_id 0
location_id 0
domain 0
max_engine_clk_ccompute 2450
"""
VRAM_BANK = "heap_type 1\nsize_in_bytes 68702699520\nflags 0\nwidth 4096\nmem_clk_max 1600\n"
PCIE_LINK = ("type 2\nversion_major 0\nversion_minor 0\nnode_from 6\nnode_to 1\nweight 20\n"
             "min_latency 0\nmax_latency 0\nmin_bandwidth 312\nmax_bandwidth 32000\n"
             "recommended_transfer_size 0\nflags 1\n")
XGMI_LINK = PCIE_LINK.replace("type 2", "type 11").replace("node_to 1", "node_to 7").replace(
    "weight 20", "weight 15")


def test_node_properties_parse_every_line_as_the_kernel_writes_it() -> None:
    props = parse_kfd_properties(MI210_NODE)
    assert props["simd_count"] == 416 and props["device_id"] == 0x740F
    assert props["hive_id"] == 1917428717447034178  # a 64-bit property keeps every digit
    assert len(props) == len(MI210_NODE.splitlines())


def test_location_id_and_domain_give_the_pci_address() -> None:
    node = KfdNode(6, parse_kfd_properties(MI210_NODE))
    assert node.address == "0000:83:00.0"  # 33536 = 0x83 << 8, devfn 0
    other = KfdNode(3, {**node.properties, "domain": 1, "location_id": (0x26 << 8) | (1 << 3) | 2})
    assert other.address == "0001:26:01.2"


def test_a_kernel_without_the_domain_line_is_domain_zero() -> None:
    text = "\n".join(line for line in MI210_NODE.splitlines() if not line.startswith("domain"))
    assert KfdNode(6, parse_kfd_properties(text)).address == "0000:83:00.0"


def test_a_cpu_node_has_no_address_and_is_no_gpu() -> None:
    node = KfdNode(1, parse_kfd_properties(CPU_NODE))
    assert not node.is_gpu and node.address is None and not node.integrated


def test_odd_lines_are_left_out_not_guessed() -> None:
    props = parse_kfd_properties("simd_count 4\nlocation_id\nname gfx1036\nweight -1\n\x00\n"
                                 "size_in_bytes \u0661\u0662\n")  # Arabic-Indic digits: no number
    assert props == {"simd_count": 4}


def test_banks_and_links_parse() -> None:
    assert parse_mem_bank(VRAM_BANK) == KfdMemBank(1, 68702699520)
    assert parse_mem_bank(VRAM_BANK).vram and not parse_mem_bank("heap_type 0\nsize_in_bytes 1\n").vram
    pcie = parse_io_link(PCIE_LINK)
    assert (pcie.type, pcie.node_from, pcie.node_to, pcie.weight) == (LINK_PCIE, 6, 1, 20)
    assert parse_io_link(XGMI_LINK).type == LINK_XGMI
    assert parse_io_link("") == parse_io_link("garbage")


def _tree(tmp_path: Path, gpu_props: str = MI210_NODE, bank: str = VRAM_BANK) -> Path:
    files = {
        f"{KFD}/generation_id": "3\n",
        f"{KFD}/nodes/1/properties": CPU_NODE,
        f"{KFD}/nodes/1/mem_banks/0/properties": "heap_type 0\nsize_in_bytes 274877906944\n",
        f"{KFD}/nodes/6/properties": gpu_props,
        f"{KFD}/nodes/6/io_links/0/properties": PCIE_LINK,
        f"{KFD}/nodes/6/io_links/1/properties": XGMI_LINK,
        f"{KFD}/nodes/7/properties": MI210_NODE.replace("location_id 33536", "location_id 41728"),
    }
    if bank:
        files[f"{KFD}/nodes/6/mem_banks/0/properties"] = bank
    return write_tree(tmp_path / "host", files)


def test_the_reader_joins_nodes_banks_and_links(tmp_path: Path) -> None:
    topology = read_kfd(Root(str(_tree(tmp_path))))
    assert [n.id for n in topology.nodes] == [1, 6, 7] and topology.generation_id == 3
    gpu = topology.gpu_at("0000:83:00.0")
    assert gpu is not None and gpu.vram == 68702699520 and not gpu.integrated
    link = topology.cpu_link(gpu)
    assert link is not None and link[1].id == 1 and link[0].weight == 20
    assert [p.address for p in topology.xgmi_peers(gpu)] == ["0000:a3:00.0"]


def test_a_gpu_node_without_a_vram_bank_is_integrated(tmp_path: Path) -> None:
    topology = read_kfd(Root(str(_tree(tmp_path, bank=""))))
    gpu = topology.gpu_at("0000:83:00.0")
    assert gpu is not None and gpu.integrated and gpu.vram == 0


def test_a_node_whose_properties_vanished_is_no_node(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / KFD.lstrip("/") / "nodes/7/properties").unlink()
    assert [n.id for n in read_kfd(Root(str(root))).nodes] == [1, 6]


def test_no_topology_is_an_empty_value(tmp_path: Path) -> None:
    topology = read_kfd(Root(str(write_tree(tmp_path / "host", {"/proc/uptime": "1.0 1.0\n"}))))
    assert not topology.present and topology.generation_id is None and topology.gpu_at("0000:03:00.0") is None


def test_nodes_are_read_in_number_order_past_nine(tmp_path: Path) -> None:
    files = {f"{KFD}/nodes/{n}/properties": CPU_NODE for n in (0, 2, 10)}
    files[f"{KFD}/nodes/stale"] = "not a node\n"
    topology = read_kfd(Root(str(write_tree(tmp_path / "host", files))))
    assert [n.id for n in topology.nodes] == [0, 2, 10]  # a listing sorts "10" before "2"


def test_the_mi210_fixture_is_two_hives_of_four() -> None:
    topology = read_kfd(Root(str(HOSTS / "mi210-8x")))
    gpus = [n for n in topology.nodes if n.is_gpu]
    assert len(gpus) == 8 and all(n.simd_count == 416 and n.vram == 68702699520 for n in gpus)
    for gpu in gpus:
        link = topology.cpu_link(gpu)
        assert link is not None
        assert len(topology.xgmi_peers(gpu)) == 3
        cpu = link[1].id
        # the KFD CPU node of each GPU is its socket: the sysfs numa_node says the same
        numa = (HOSTS / "mi210-8x" / "sys/bus/pci/devices" / str(gpu.address) / "numa_node").read_text()
        assert int(numa) == cpu


def test_a_hostile_run_of_digits_is_left_out_not_a_crash() -> None:
    from strata_doctor.facts.rocm_smi import parse_rocm_product, parse_rocm_topo_nodes

    digits = "9" * 5000
    assert parse_kfd_properties(f"simd_count {digits}\nlocation_id 768\n") == {"location_id": 768}
    assert parse_rocm_product(f"GPU[{digits}]\t\t: Card Series: \t\tAMD Instinct MI210\n") == ()
    assert parse_rocm_topo_nodes(f"GPU[0]\t\t: (Topology) Numa Node: {digits}\n") == {}
