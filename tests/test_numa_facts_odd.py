"""NUMA facts on old and odd kernels' captures (doctor/facts/numa.py) and the words of
numa-topology and sub-numa-clustering on them: nodes known only from their cpuN links, a
node the kernel lists without a folder, distance rows of one node, overlapping CPU lists,
two-die Opterons, package ids of -1 and nodes spanning several packages."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from strata_doctor.config import load_config
from strata_doctor.context import HostContext
from strata_doctor.facts.numa import read_numa
from strata_doctor.model import Finding, Severity
from strata_doctor.registry import builtin_checks, run_checks
from strata_doctor.root import Root
from tests.conftest import HOSTS, write_tree
from tests.test_facts import build, node_files

NODE = "/sys/devices/system/node"
CPU = "/sys/devices/system/cpu"


def meminfo(node: int, kb: int) -> str:
    return f"Node {node} MemTotal:       {kb} kB\nNode {node} MemFree:        {kb // 2} kB\n"


def findings(root: Path, check: str) -> List[Finding]:
    r = Root(str(root))
    ctx = HostContext(r, load_config(r, None))
    (result,) = run_checks(ctx, [c for c in builtin_checks() if c.id == check])
    assert result.crash is None, result.crash
    return list(result.findings)


def skipped(root: Path, check: str) -> str:
    r = Root(str(root))
    ctx = HostContext(r, load_config(r, None))
    (found,) = [c for c in builtin_checks() if c.id == check]
    return found().applies(ctx) or ""


# -- a node known from its cpuN links ---------------------------------------------------------
def test_a_node_with_only_cpu_links_has_those_cpus(tmp_path: Path) -> None:
    files: Dict[str, str] = {f"{NODE}/node0/cpu{c}": f"->../../cpu/cpu{c}" for c in range(4)}
    files.update({f"{NODE}/node0/meminfo": meminfo(0, 8388608), f"{NODE}/node0/distance": "10\n",
                  f"{CPU}/online": "0-3\n"})
    (node,) = read_numa(Root(str(write_tree(tmp_path, files)))).nodes
    assert (sorted(node.cpus), node.cpus_source) == ([0, 1, 2, 3], "links")


def test_the_cpu_links_only_host_reads_four_cpus() -> None:
    numa = read_numa(Root(str(HOSTS / "cpu-links-only")))
    assert [(n.id, sorted(n.cpus), n.cpus_source) for n in numa.nodes] == [(0, [0, 1, 2, 3], "links")]
    assert numa.quirks == ()


# -- a node the kernel lists without a folder --------------------------------------------------
def hidden_files(**extra: str) -> Dict[str, str]:
    files = {f"{NODE}/node1/cpulist": "9-17\n", f"{NODE}/node1/distance": "21 10\n",
             f"{NODE}/node1/meminfo": meminfo(1, 67104768), f"{CPU}/online": "0-17\n",
             f"{NODE}/online": "0-1\n", f"{NODE}/has_memory": "0-1\n"}
    files.update(extra)
    return files


def test_a_listed_node_without_a_folder_takes_the_unclaimed_cpus(tmp_path: Path) -> None:
    numa = read_numa(Root(str(write_tree(tmp_path, hidden_files()))))
    hidden, node1 = numa.nodes
    assert (hidden.id, sorted(hidden.cpus), hidden.cpus_source) == (0, list(range(9)), "unclaimed")
    assert hidden.memory_total is None and not hidden.listed
    assert hidden.hidden_from == ("online", "has_memory")
    # the kernel prints one entry per online node: 21 is node 1 -> node 0, not a long row
    assert node1.distances == ((0, 21), (1, 10)) and node1.listed
    assert numa.quirks == ()
    assert len(numa.cpu_nodes) == 2


def test_a_hidden_node_left_out_of_has_memory_has_none(tmp_path: Path) -> None:
    numa = read_numa(Root(str(write_tree(tmp_path, hidden_files(**{f"{NODE}/has_memory": "1\n"})))))
    assert numa.nodes[0].memory_total == 0 and numa.nodes[0].memoryless


def test_two_hidden_nodes_that_may_hold_cpus_get_none_of_them(tmp_path: Path) -> None:
    files = hidden_files(**{f"{NODE}/online": "0-2\n", f"{NODE}/node1/distance": "21 10 21\n"})
    numa = read_numa(Root(str(write_tree(tmp_path, files))))
    assert [(n.id, n.cpus_source, n.listed) for n in numa.nodes] == [
        (0, "none", False), (1, "cpulist", True), (2, "none", False)]


def test_has_cpu_says_which_hidden_node_holds_the_cpus(tmp_path: Path) -> None:
    files = hidden_files(**{f"{NODE}/online": "0-2\n", f"{NODE}/has_cpu": "0-1\n",
                            f"{NODE}/node1/distance": "21 10 21\n"})
    numa = read_numa(Root(str(write_tree(tmp_path, files))))
    assert sorted(numa.node(0).cpus) == list(range(9))  # type: ignore[union-attr]
    assert not numa.node(2).cpus  # type: ignore[union-attr]


def test_an_empty_has_cpu_says_nothing(tmp_path: Path) -> None:
    files = hidden_files(**{f"{NODE}/has_cpu": "\n"})
    assert sorted(read_numa(Root(str(write_tree(tmp_path, files)))).nodes[0].cpus) == list(range(9))


def test_the_hidden_node_host_warns_with_an_estimate_only() -> None:
    found = findings(HOSTS / "hidden-node", "numa-topology")
    assert [f.id for f in found] == ["hidden-node"]  # the layout, fine, is told in its detail
    (hidden,) = found
    assert "The rest is fine: 2 NUMA nodes, distance 10/21 (remote memory 2.1x local)." in hidden.detail
    assert "node0: 0-8, memory unknown; node1: 9-17, 64.00 GiB." in hidden.detail
    assert hidden.severity is Severity.WARNING
    assert hidden.summary.startswith("node 0 has no folder under /sys/devices/system/node")
    assert "its CPUs are 0-8" in hidden.summary and hidden.summary.endswith("memory unknown")
    assert "125.63 GiB less node 1's 64.00 GiB leaves 61.63 GiB" in hidden.detail
    assert "not exactly it" in hidden.detail


# -- distance rows and CPU lists ---------------------------------------------------------------
def test_a_missing_row_on_one_node_is_no_quirk(tmp_path: Path) -> None:
    files = {f"{NODE}/node0/cpulist": "0-3\n", f"{NODE}/node0/meminfo": meminfo(0, 1048576)}
    assert read_numa(Root(str(write_tree(tmp_path, files)))).quirks == ()


def test_a_long_row_names_the_known_nodes(tmp_path: Path) -> None:
    files = {f"{NODE}/node0/cpulist": "0-3\n", f"{NODE}/node0/distance": "10 21\n",
             f"{NODE}/node1/cpulist": "4-7\n", f"{NODE}/node1/distance": "21 10 21\n"}
    quirks = read_numa(Root(str(write_tree(tmp_path, files)))).quirks
    assert "node1: distance row has 3 entries for 2 known nodes (node0, node1)" in quirks


def test_overlapping_nodes_name_the_shared_cpus(tmp_path: Path) -> None:
    files = {f"{NODE}/node{n}/cpulist": cpus for n, cpus in
             ((3, "16-23\n"), (4, "20-27\n"), (5, "20-23\n"))}
    files.update({f"{NODE}/node{n}/distance": "10 20 20\n" for n in (3, 4, 5)})
    quirks = read_numa(Root(str(write_tree(tmp_path, files)))).quirks
    assert "nodes 3,4,5 overlap: each lists CPUs 20-23 (node3: 16-23; node4: 20-27; node5: 20-23)" in quirks
    assert not any("all list the same" in q for q in quirks)


def test_nodes_with_the_same_list_say_so(tmp_path: Path) -> None:
    files = {f"{NODE}/node{n}/cpulist": "0-7\n" for n in (0, 1)}
    files.update({f"{NODE}/node{n}/distance": "10 10\n" for n in (0, 1)})
    quirks = read_numa(Root(str(write_tree(tmp_path, files)))).quirks
    assert "nodes 0,1 all list the same CPUs (0-7)" in quirks


# -- sub-numa-clustering -----------------------------------------------------------------------
def test_a_two_die_opteron_is_silicon_not_a_bios_switch() -> None:
    (finding,) = findings(HOSTS / "opteron-mcm", "sub-numa-clustering")
    assert (finding.id, finding.severity) == ("multi-die", Severity.INFO)
    assert finding.summary.startswith("each AMD Opteron(tm) Processor 6174 package holds two dies")
    assert "socket 3: nodes 6,7" in finding.summary
    assert "SNC" not in finding.summary + finding.detail and "BIOS:" not in finding.detail
    assert "amd_dcm" in finding.evidence[-1].value


def power_files(package: str) -> Dict[str, str]:
    files = {f"{NODE}/node{n}/cpulist": f"{4 * n}-{4 * n + 3}\n" for n in range(2)}
    files.update({f"{NODE}/node0/distance": "10 40\n", f"{NODE}/node1/distance": "40 10\n",
                  f"{CPU}/online": "0-7\n"})
    files.update({f"{CPU}/cpu{c}/topology/physical_package_id": package for c in range(8)})
    return files


def test_a_package_id_of_minus_one_is_no_socket(tmp_path: Path) -> None:
    root = write_tree(tmp_path, power_files("-1\n"))
    assert "physical_package_id is missing or -1" in skipped(root, "sub-numa-clustering")
    (layout,) = findings(root, "numa-topology")
    assert "socket -1" not in layout.detail.lower()


def test_nodes_spanning_several_packages_split_nothing(tmp_path: Path) -> None:
    files = power_files("0\n")
    files.update({f"{CPU}/cpu{c}/topology/physical_package_id": f"{c // 2}\n" for c in range(8)})
    (finding,) = findings(write_tree(tmp_path, files), "sub-numa-clustering")
    assert finding.id == "node-spans-sockets"
    assert finding.summary == ("each NUMA node spans 2 packages (node 0: packages 0-1; node 1: "
                               "packages 2-3): no socket is split")


def test_missing_or_short_distance_rows_are_quirks(tmp_path: Path) -> None:
    files = {**node_files(0, "0-3", 1048576, "10 21"), **node_files(1, "4-7", 1048576, "21")}
    files[f"{NODE}/node2/cpulist"] = "8-11\n"
    numa = read_numa(build(tmp_path, files))
    assert numa.node(2) is not None and numa.node(2).distances == ()  # type: ignore[union-attr]
    assert any("node1: distance row has 1 entry for 3 known nodes (node0, node1, node2)" in q
               for q in numa.quirks)
    assert "node2: the capture holds no distance file" in numa.quirks


def test_an_empty_distance_row_is_the_kernels_and_an_absent_one_the_captures(tmp_path: Path) -> None:
    files = {**node_files(0, "0-3", 1048576, "10 21"), **node_files(1, "4-7", 1048576, "")}
    assert "node1: distance row is empty" in read_numa(build(tmp_path / "empty", files)).quirks
    del files[f"{NODE}/node1/distance"]
    assert "node1: the capture holds no distance file" in read_numa(build(tmp_path / "absent", files)).quirks


def test_distance_zero_on_one_node_is_no_quirk(tmp_path: Path) -> None:
    # Kernels without a SLIT print 0 there (the corpus's 8ia64-2s2c2t); one node uses no distance.
    numa = read_numa(build(tmp_path, node_files(0, "0-7", 16 * 1048576, "0")))
    assert numa.nodes[0].distances == ((0, 0),)
    assert numa.quirks == ()
