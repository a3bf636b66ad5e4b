"""CPU facts on old and odd kernels' trees: which CPUs exist and run (offline means present
and not online, a CPU without a folder does not exist), and the physical cores (the
distinct thread_siblings groups; a package id of -1 is unknown). The parsers on strings
first, then the fixture hosts written to the numbers the real machines showed."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from typing import Any, Dict, FrozenSet, List, Optional

import pytest

from strata_doctor.facts.cpu import CpuFacts, known_packages, read_cpu
from strata_doctor.facts.cpu_states import (
    CpuStateFiles,
    asked_per_cpu,
    count_cores,
    cpu_states,
    pairs_agree,
    parse_siblings,
    sample_cpus,
    thread_groups,
)
from strata_doctor.facts.numa import read_numa
from strata_doctor.facts.parse import parse_cpulist
from strata_doctor.root import Root
from tests.conftest import HOSTS, check_json
from tests.corpus import LSTOPO

CPU = "/sys/devices/system/cpu"


def files(online: Optional[str] = None, offline: Optional[str] = None, present: Optional[str] = None,
          folders: str = "", down: str = "") -> CpuStateFiles:
    return CpuStateFiles(online, offline, present, parse_cpulist(folders), parse_cpulist(down))


def cpus(text: str) -> FrozenSet[int]:
    return parse_cpulist(text)


# -- online and offline, on strings --------------------------------------------------------------
def test_possible_cpus_that_are_not_present_are_not_offline() -> None:
    # possible 0-127, present 0-15, all online: the kernel's cpu/offline says 16-127.
    states = cpu_states(files("0-15\n", "16-127\n", "0-15\n", "0-15"), cpus("0-15"))
    assert (states.online, states.offline, states.present) == (cpus("0-15"), frozenset(), cpus("0-15"))


def test_offline_beyond_possible_is_not_offline_either() -> None:
    # possible 0-7 and yet cpu/offline 8-511: a kernel that counts to NR_CPUS.
    states = cpu_states(files("0-7\n", "8-511\n", "0-7\n", "0-7"), cpus("0-7"))
    assert states.offline == frozenset()


def test_a_present_cpu_left_out_of_online_is_offline_without_an_offline_file() -> None:
    # cpu/online 0-3,5-15, cpu4/online 0, no cpu/offline and no cpu/present.
    states = cpu_states(files("0-3,5-15\n", None, None, "0-15", down="4"), cpus("0-15"))
    assert (states.online, states.offline) == (cpus("0-3,5-15"), cpus("4"))
    assert states.offline_source == f"{CPU}/cpu*/online"


def test_present_less_online_names_present_when_no_cpu_file_says_offline() -> None:
    states = cpu_states(files("0-3,5-15\n", None, "0-15\n", "0-15"), cpus("0-15"))
    assert (states.offline, states.offline_source) == (cpus("4"), f"{CPU}/present")
    states = cpu_states(files("0-3,5-15\n", None, None, "0-15"), cpus("0-15"))
    assert (states.offline, states.offline_source) == (cpus("4"), f"{CPU}/cpu*")


def test_the_kernels_offline_list_is_named_when_it_holds_every_offline_cpu() -> None:
    states = cpu_states(files("0-11\n", "12-127\n", "0-15\n", "0-15"), cpus("0-15"))
    assert (states.offline, states.offline_source) == (cpus("12-15"), f"{CPU}/offline")


def test_cpus_without_a_folder_do_not_exist() -> None:
    # A node's cpumap names 0-15, cpu12-15 have no folder, there is no cpu/online.
    states = cpu_states(files(None, None, None, "0-11"), cpus("0-15"))
    assert (states.online, states.offline, states.present) == (cpus("0-11"), frozenset(), cpus("0-11"))


def test_without_cpu_online_each_cpus_own_file_says_offline() -> None:
    states = cpu_states(files(None, None, None, "0-15", down="12-15"), cpus("0-3,8-11"))
    assert (states.online, states.offline) == (cpus("0-11"), cpus("12-15"))
    assert states.offline_source == f"{CPU}/cpu*/online"


def test_without_present_or_folders_the_kernels_offline_list_stands() -> None:
    states = cpu_states(files("0-1\n", "2\n"), cpus("0-1"))
    assert (states.online, states.offline, states.present) == (cpus("0-1"), cpus("2"), None)


def test_without_any_cpu_file_the_nodes_cpus_are_online() -> None:
    states = cpu_states(files(), cpus("0-7"))
    assert (states.online, states.offline) == (cpus("0-7"), frozenset())


def test_only_the_folders_cpu_online_leaves_out_are_asked_for_their_own_file() -> None:
    assert asked_per_cpu("0-15\n", cpus("0-15")) == frozenset()
    assert asked_per_cpu("0-3,5-15\n", cpus("0-15")) == cpus("4")
    assert asked_per_cpu(None, cpus("0-3")) == cpus("0-3")
    assert asked_per_cpu("", cpus("0-3")) == cpus("0-3")


# -- physical cores, on strings ------------------------------------------------------------------
def test_siblings_come_from_the_list_else_from_the_mask() -> None:
    assert parse_siblings("0,16\n", None) == cpus("0,16")
    assert parse_siblings(None, "00000000,00010001\n") == cpus("0,16")
    assert parse_siblings("\n", "3\n") == cpus("0-1")
    assert parse_siblings(None, None) == frozenset()


def test_cores_are_the_distinct_sibling_groups() -> None:
    # 16 groups of 4 (CPU n's core is n // 4) where the core ids say otherwise.
    group_of = {cpu: cpu - cpu % 4 for cpu in range(64)}
    core_of = {cpu: (0, cpu % 28) for cpu in range(64)}
    assert count_cores(cpus("0-63"), group_of, core_of) == 16
    assert count_cores(cpus("0-7"), group_of, core_of) == 2


def test_core_ids_count_only_where_a_cpu_has_no_group() -> None:
    core_of = {cpu: (0, cpu // 2) for cpu in range(8)}
    assert count_cores(cpus("0-7"), {0: 0, 1: 0}, core_of) == 4
    assert count_cores(cpus("0-7"), {}, {}) is None
    assert count_cores(frozenset(), {}, core_of) is None


def test_a_package_of_minus_one_is_unknown() -> None:
    package_of, core_of = known_packages({0: -1, 1: -1}, {0: (-1, 0), 1: (-1, 0)})
    assert (package_of, core_of) == ({}, {})
    assert known_packages({0: 0, 1: 1}, {0: (0, 0), 1: (1, 0)}) == ({0: 0, 1: 1}, {0: (0, 0), 1: (1, 0)})


def test_thread_groups_in_gives_the_whole_group_of_each_cpu_that_has_one() -> None:
    facts = CpuFacts(None, 0, (), (), frozenset(), thread_group_of=((0, 0), (1, 0), (2, 2), (3, 2)))
    assert facts.thread_groups_in(cpus("0,2")) == (cpus("0-1"), cpus("2-3"))
    assert facts.thread_groups_in(cpus("3-4")) == (cpus("2-3"),)
    assert (facts.core_count(cpus("0-3")), facts.cores_in(cpus("0-4"))) == (2, 5)


def test_the_pairs_are_tested_on_each_packages_first_and_last_cpu() -> None:
    # Two packages of 2 cores x 2 threads in host numbering: CPU n's sibling is n+4.
    core_of = {cpu: (cpu // 2 % 2, cpu % 2) for cpu in range(8)}
    assert sample_cpus(core_of) == [0, 2, 5, 7]
    assert pairs_agree({0: cpus("0,4"), 2: cpus("2,6"), 5: cpus("1,5"), 7: cpus("3,7")}, core_of)
    assert not pairs_agree({0: cpus("0")}, core_of)  # SMT off, core ids of an SMT layout
    assert not pairs_agree({8: cpus("8")}, core_of)  # a list of a CPU without a pair


def test_an_opteron_6134s_two_dies_share_core_ids_and_the_lists_say_so() -> None:
    # Package 0 holds CPUs 0-7 in two dies whose core ids both run 0-3; no SMT.
    core_of = {cpu: (0, cpu % 4) for cpu in range(8)}
    read = {0: cpus("0"), 7: cpus("7")}
    assert not pairs_agree(read, core_of)
    assert count_cores(cpus("0-7"), thread_groups({c: frozenset([c]) for c in range(8)}), core_of) == 8
    assert count_cores(cpus("0-7"), {}, core_of) == 4


def test_a_list_that_leaves_out_its_own_cpu_gives_no_group() -> None:
    assert thread_groups({0: cpus("0,4"), 1: frozenset(), 2: cpus("3")}) == {0: 0, 4: 0}


# -- the fixture hosts written to the real machines' numbers -------------------------------------
ODD_CPU_HOSTS = ("online-zero-no-offline", "cpus-without-folders", "siblings-only-ia64",
                 "possible-beyond-present")


def findings(host: str, check: str) -> List[Dict[str, Any]]:
    return [f for f in check_json(HOSTS / host)["findings"] if f["check"] == check]


def test_a_cpu_left_out_of_online_is_reported_offline() -> None:
    numa = read_numa(Root(str(HOSTS / "online-zero-no-offline")))
    assert (numa.online_cpus, numa.offline_cpus) == (cpus("0-3,5-15"), cpus("4"))
    (offline,) = [f for f in findings("online-zero-no-offline", "numa-topology") if f["id"] == "offline-cpus"]
    assert offline["summary"] == "1 CPU is offline (4); it is left out of every CPU list"
    assert offline["evidence"] == [{"source": f"{CPU}/cpu*/online", "value": "4"}]
    assert "The rest is fine" not in offline["detail"]  # info beside ok: two rows


def test_cpus_a_cpumap_names_without_a_folder_do_not_exist() -> None:
    root = Root(str(HOSTS / "cpus-without-folders"))
    numa = read_numa(root)
    (node,) = numa.nodes
    assert (numa.online_cpus, numa.offline_cpus) == (cpus("0-11"), frozenset())
    assert (node.all_cpus, node.cpus, node.cpus_source) == (cpus("0-15"), cpus("0-11"), "cpumap")
    cpu = read_cpu(root)
    assert (cpu.core_count(cpus("0-11")), cpu.siblings_file, cpu.sockets) == (12, "thread_siblings", 2)


def test_thread_siblings_masks_alone_count_the_cores_and_package_minus_one_no_socket() -> None:
    cpu = read_cpu(Root(str(HOSTS / "siblings-only-ia64")))
    assert (cpu.sockets, cpu.package_of, cpu.core_of) == (0, (), ())
    assert cpu.thread_groups_in(cpus("0-7")) == (cpus("0-1"), cpus("2-3"), cpus("4-5"), cpus("6-7"))
    (workers,) = findings("siblings-only-ia64", "expert-workers")
    assert (workers["id"], workers["severity"]) == ("smt-siblings", "info")
    assert workers["summary"].startswith("workers: 8 is more than the host's 4 physical cores (8 CPUs: 0-7)")
    assert {"source": f"{CPU}/cpu0/topology/thread_siblings", "value": "0-1"} in workers["evidence"]


def test_possible_cpus_beyond_the_present_ones_are_not_offline() -> None:
    numa = read_numa(Root(str(HOSTS / "possible-beyond-present")))
    assert (numa.online_cpus, numa.offline_cpus) == (cpus("0-15"), frozenset())
    assert not [f for f in findings("possible-beyond-present", "numa-topology") if f["id"] == "offline-cpus"]


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics is not installed (Debian package hwloc-nox)")
@pytest.mark.lstopo
@pytest.mark.parametrize("host", ODD_CPU_HOSTS)
def test_lstopo_counts_the_same_cpus_and_cores(host: str) -> None:
    assert LSTOPO is not None
    done = subprocess.run([LSTOPO, "--if", "fsroot", "--input", str(HOSTS / host), "--of", "xml"],
                          capture_output=True, text=True, timeout=120, check=True)
    objects = list(ET.fromstring(done.stdout).iter("object"))
    pus = frozenset(int(o.get("os_index", "-1")) for o in objects if o.get("type") == "PU")
    cores = sum(1 for o in objects if o.get("type") == "Core")
    root = Root(str(HOSTS / host))
    online = read_numa(root).online_cpus
    assert (pus, cores) == (online, read_cpu(root).core_count(online))
