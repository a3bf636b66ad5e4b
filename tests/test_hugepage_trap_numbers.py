"""The hugepage trap is an error only where the host's own numbers make it one.

With the seed's engine (``--arena 46.84GiB --kv 3.09GiB``, headroom 4 GiB) on servers
shaped like the real snapshots the rule was measured on: an empty pool is no finding, a
pool that only holds memory back is a warning that says how much, a host too small for
the engine whatever the pool holds is arena-fit's error and not the pool's, and a pool
that runs the start short of the headroom (giving it back would cure it) is the trap.
The seed box itself (its chain through systemd-oomd) is in test_seed_box.py and
test_memory_checks.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from tests.conftest import run_cli, write_tree

GIB_KB = 1024 * 1024
SEED_ENGINE = ("--arena", "46.84GiB", "--kv", "3.09GiB")
HP = "/sys/kernel/mm/hugepages/hugepages-2048kB"


def server(
    nodes: int, mem_total_kb: int, mem_available_kb: int, pool: int = 0, free: int = -1,
    overcommit: int = 0, sysctl: bool = True,
) -> Dict[str, str]:
    """A server without a compute GPU: ``nodes`` sockets of 4 CPUs, the pool spread evenly,
    systemd absent (no oomd to watch the engine)."""
    free = pool if free < 0 else free
    node = "/sys/devices/system/node"
    files: Dict[str, str] = {
        "/sys/devices/system/cpu/online": f"0-{nodes * 4 - 1}\n",
        "/proc/cpuinfo": "".join(
            f"processor\t: {c}\nmodel name\t: Test CPU\nphysical id\t: {c // 4}\n"
            f"core id\t\t: {c % 4}\nflags\t\t: fpu avx avx2\n\n"
            for c in range(nodes * 4)
        ),
        "/proc/meminfo": (
            f"MemTotal:       {mem_total_kb} kB\nMemFree:        {mem_available_kb} kB\n"
            f"MemAvailable:   {mem_available_kb} kB\n"
            f"HugePages_Total:   {pool}\nHugePages_Free:    {free}\nHugePages_Rsvd:        0\n"
            f"HugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:        {pool * 2048} kB\n"
        ),
        f"{HP}/nr_hugepages": f"{pool}\n",
        f"{HP}/free_hugepages": f"{free}\n",
        f"{HP}/resv_hugepages": "0\n",
        f"{HP}/surplus_hugepages": "0\n",
        f"{HP}/nr_overcommit_hugepages": f"{overcommit}\n",
        "/proc/sys/vm/nr_hugepages": f"{pool}\n",
        "/proc/sys/vm/nr_overcommit_hugepages": f"{overcommit}\n",
    }
    for n in range(nodes):
        files[f"{node}/node{n}/cpulist"] = f"{n * 4}-{n * 4 + 3}\n"
        files[f"{node}/node{n}/distance"] = " ".join("10" if m == n else "21" for m in range(nodes)) + "\n"
        files[f"{node}/node{n}/meminfo"] = (
            f"Node {n} MemTotal:       {mem_total_kb // nodes} kB\n"
            f"Node {n} MemFree:        {mem_available_kb // nodes} kB\n"
        )
        d = f"{node}/node{n}/hugepages/hugepages-2048kB"
        files[f"{d}/nr_hugepages"] = f"{pool // nodes}\n"
        files[f"{d}/free_hugepages"] = f"{free // nodes}\n"
        files[f"{d}/surplus_hugepages"] = "0\n"
    if sysctl and pool:
        files["/etc/sysctl.d/50-hugepages.conf"] = f"vm.nr_hugepages = {pool}\n"
    return files


def check(tmp_path: Path, files: Dict[str, str]) -> Dict[str, Any]:
    root = write_tree(tmp_path / "host", files)
    result = run_cli(["check", "--root", str(root), *SEED_ENGINE, "--format", "json"])
    data: Dict[str, Any] = json.loads(result.stdout)
    data["rc"] = result.exit_code
    text = run_cli(["check", "--root", str(root), *SEED_ENGINE, "-v"], env={"NO_COLOR": "1"})
    data["text"] = text.stdout
    return data


def of(data: Dict[str, Any], check_id: str) -> List[Dict[str, Any]]:
    return [f for f in data["findings"] if f["check"] == check_id]


def test_empty_pool_on_a_31_gib_two_socket_server_is_no_hugepage_finding(tmp_path: Path) -> None:
    """32em64t-2n8c+dax+nvme+mic+dimms: vm.nr_hugepages = 0, nr_overcommit_hugepages
    15,360, 31.31 GiB. MAP_HUGETLB of 23,983 pages fails (overcommit gives at most 15,360),
    but nothing is held back: the engine runs on THP. The host is too small for the engine,
    and arena-fit alone says so."""
    data = check(tmp_path, server(2, 32830000, 30000000, pool=0, overcommit=15360))
    hp = of(data, "hugepages")
    assert {f["severity"] for f in hp} <= {"ok", "info"}, [(f["id"], f["summary"]) for f in hp]
    no_pool = next(f for f in hp if f["id"] == "no-pool")
    assert "no memory is held back" in no_pool["summary"]
    assert "15,360 surplus pages" in no_pool["summary"] and "23,983" in no_pool["summary"]
    assert "vm.nr_hugepages = 0" not in data["text"], "no advice to set what is already set"
    assert all(f["fix"] is None for f in hp)
    errors = [f"{f['check']}/{f['id']}" for f in data["findings"] if f["severity"] == "error"]
    assert errors == ["arena-fit/does-not-fit"]
    assert data["rc"] == 1


def test_empty_pool_without_overcommit_is_one_ok_line(tmp_path: Path) -> None:
    data = check(tmp_path, server(2, 131941376, 120000000))
    hp = of(data, "hugepages")
    assert [(f["id"], f["severity"]) for f in hp] == [("no-pool", "ok")]
    assert data["rc"] == 0


def test_1_gib_pool_on_a_126_gib_four_socket_server_is_a_warning(tmp_path: Path) -> None:
    """32amd64-4s2n4c-cgroup2: 513 pages (1.00 GiB) on 126.17 GiB; 71.76 GiB is left after
    the fallback, far above the 4 GiB headroom: the pool only wastes memory."""
    data = check(tmp_path, server(4, 132296704, 127602245, pool=513))
    hp = of(data, "hugepages")
    assert [f["id"] for f in hp] == ["unusable-pool"], [(f["id"], f["summary"]) for f in hp]
    f = hp[0]
    assert f["severity"] == "warning"
    assert "pool of 513 2 MiB pages (1.00 GiB) that the arena cannot use" in f["summary"]
    assert "holds back 1.00 GiB" in f["summary"]
    assert "71.76 GiB is projected left after the start (headroom 4.00 GiB)" in f["summary"]
    assert f["fix"] is not None and "vm.nr_hugepages" in json.dumps(f["fix"])
    assert not [x for x in data["findings"] if x["severity"] == "error"]
    assert data["rc"] == 0


def test_8_gib_pool_on_a_93_gib_server_is_a_warning(tmp_path: Path) -> None:
    """An 8 GiB pool on a 93 GiB server: 29.55 GiB is projected left."""
    data = check(tmp_path, server(2, 97517568, 83338035, pool=4096))
    f = next(x for x in of(data, "hugepages") if x["id"] == "unusable-pool")
    assert f["severity"] == "warning"
    assert "holds back 8.00 GiB" in f["summary"]
    assert "29.55 GiB is projected left" in f["summary"]
    assert not [x for x in data["findings"] if x["severity"] == "error"]


def test_pool_on_a_host_too_small_for_the_engine_is_arena_fits_error(tmp_path: Path) -> None:
    """16amd64-4n4c-cgroup-distance-merge: 2,048 pages (4.00 GiB) on 31.49 GiB. The fallback
    leaves -25.68 GiB with the pool and -21.68 GiB without it, still 25.68 GiB short of the
    headroom: giving the pool back cures nothing, so the error is arena-fit's (the host is
    smaller than the engine)."""
    data = check(tmp_path, server(4, 33019904, 25427681, pool=2048))
    f = next(x for x in of(data, "hugepages") if x["id"] == "unusable-pool")
    assert f["severity"] == "warning"
    assert "holds back 4.00 GiB" in f["summary"]
    assert "even without the pool (by 25.68 GiB)" in f["summary"]
    errors = [f"{x['check']}/{x['id']}" for x in data["findings"] if x["severity"] == "error"]
    assert errors == ["arena-fit/does-not-fit"]


def test_pool_that_runs_the_start_short_is_the_trap(tmp_path: Path) -> None:
    """64 GiB, a 20 GiB pool nobody uses, 40 GiB available: the fallback leaves -9.93 GiB;
    giving the pool back leaves 10.07 GiB, above the headroom. The pool makes the shortfall:
    the seed's trap, an error, even with no oomd to watch the engine."""
    data = check(tmp_path, server(2, 67108864, 40 * GIB_KB, pool=10240))
    trap = next(x for x in of(data, "hugepages") if x["id"] == "trap")
    assert trap["severity"] == "error"
    assert "pool 10,240, free 10,240, needed 23,983" in trap["summary"]
    assert "short of the headroom because of the pool" in trap["detail"]
    assert "giving back its 20.00 GiB" in trap["detail"] and "would leave 10.07 GiB" in trap["detail"]
    assert "-9.93 GiB left" in trap["detail"]
    assert trap["fix"]["actions"] == [{"kind": "sysctl", "target": "vm.nr_hugepages", "value": "0"}]
    assert data["rc"] == 1


def test_pool_fully_taken_by_others_holds_nothing_back(tmp_path: Path) -> None:
    """2i386-2t-hugepagesizecount: one page, in use by no visible process: setting the pool
    to 0 gives back nothing, so there is nothing to warn about; it is said as info."""
    data = check(tmp_path, server(1, 2 * GIB_KB, 1 * GIB_KB, pool=1, free=0))
    hp = of(data, "hugepages")
    assert [(f["id"], f["severity"]) for f in hp] == [("in-use", "info")]
    assert "holds nothing back" in hp[0]["summary"]
