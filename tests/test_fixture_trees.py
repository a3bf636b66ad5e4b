"""The hand-modelled host trees are exactly what tests/fixtures/make_hosts.py writes, and they
say what the seed report says.

Regenerate the trees with ``python tests/fixtures/make_hosts.py`` after changing a model.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, FrozenSet, Iterator, List, Set, Tuple

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HOSTS = FIXTURES / "hosts"
SEED_NODE0 = frozenset(list(range(0, 22)) + list(range(44, 66)))
SEED_NODE1 = frozenset(list(range(22, 44)) + list(range(66, 88)))


def _generator() -> ModuleType:
    name = "strata_fixture_make_hosts"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FIXTURES / "make_hosts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


MAKE_HOSTS = _generator()
HOST_NAMES: List[str] = MAKE_HOSTS.host_names()
WHOLE_SYSTEMS: List[str] = sorted(fn.__name__.replace("_", "-") for fn in MAKE_HOSTS.MODELS)
"""The Host models' trees: only there does every file come from one model of the memory (a
sparse capture under odd/ holds what its README says, and hidden-node's missing node0 folder
is the point of it)."""


def _snapshot(top: Path) -> Dict[str, Tuple[str, bytes]]:
    """{relative path: ("file", bytes) or ("link", target)}; links are never followed."""
    found: Dict[str, Tuple[str, bytes]] = {}

    def walk(folder: Path) -> None:
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = os.path.relpath(entry.path, top)
                if entry.is_symlink():
                    found[rel] = ("link", os.readlink(entry.path).encode())
                elif entry.is_dir(follow_symlinks=False):
                    walk(Path(entry.path))
                else:
                    found[rel] = ("file", Path(entry.path).read_bytes())

    walk(top)
    return found


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every host tree, freshly generated; removed after the module (160 MiB), pass or fail,
    as a failed run keeps pytest's session folders."""
    out = tmp_path_factory.mktemp("hosts")
    MAKE_HOSTS.write_all(out)
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("host", HOST_NAMES)
def test_committed_tree_equals_generated(generated: Path, host: str) -> None:
    committed = HOSTS / host
    assert committed.is_dir(), f"{committed} missing: run python tests/fixtures/make_hosts.py"
    want, have = _snapshot(generated / host), _snapshot(committed)
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    changed = sorted(p for p in set(want) & set(have) if want[p] != have[p])
    assert not (missing or extra or changed), (
        f"{host} drifted from make_hosts.py (missing {missing[:5]}, extra {extra[:5]}, "
        f"changed {changed[:5]}); rerun python tests/fixtures/make_hosts.py"
    )


# -- helpers reading the committed trees ----------------------------------------------------
def read(host: str, path: str) -> str:
    return (HOSTS / host / path).read_text()


def cpus(text: str) -> FrozenSet[int]:
    """A kernel CPU list (``0-21,44-65``) as a set."""
    out: Set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def mask(text: str) -> FrozenSet[int]:
    value = int(text.strip().replace(",", ""), 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def meminfo(text: str) -> Dict[str, int]:
    """``/proc/meminfo`` or a node's meminfo (``Node N Key: value``) as {key: number}."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if words[0] == "Node":
            words = words[2:]
        out[words[0].rstrip(":")] = int(words[1])
    return out


def status(host: str, pid: int) -> Dict[str, str]:
    fields = {}
    for line in read(host, f"proc/{pid}/status").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def pids(host: str) -> Iterator[int]:
    for entry in sorted((HOSTS / host / "proc").iterdir()):
        if entry.name.isdigit():
            yield int(entry.name)


def numa_pages(text: str) -> Dict[int, int]:
    """Bytes per node, as numastat -p sums /proc/PID/numa_maps."""
    total: Dict[int, int] = {}
    for line in text.splitlines():
        size = int(re.search(r"kernelpagesize_kB=(\d+)", line).group(1)) * 1024  # type: ignore[union-attr]
        for node, count in re.findall(r" N(\d+)=(\d+)", line):
            total[int(node)] = total.get(int(node), 0) + int(count) * size
    return total


# -- the seed box ---------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["seed-box", "seed-box-bound", "seed-box-mirror"])
def test_seed_topology(host: str) -> None:
    node = "sys/devices/system/node"
    assert read(host, f"{node}/node0/cpulist") == "0-21,44-65\n"
    assert read(host, f"{node}/node1/cpulist") == "22-43,66-87\n"
    assert mask(read(host, f"{node}/node0/cpumap")) == SEED_NODE0
    assert mask(read(host, f"{node}/node1/cpumap")) == SEED_NODE1
    assert read(host, f"{node}/node0/distance") == "10 21\n"
    assert read(host, f"{node}/node1/distance") == "21 10\n"
    assert read(host, "sys/devices/system/cpu/online") == "0-87\n"
    assert read(host, "sys/devices/system/cpu/offline") == "\n"
    totals = [meminfo(read(host, f"{node}/node{n}/meminfo"))["MemTotal"] for n in (0, 1)]
    assert totals == [65853580, 66057640]  # a little under 64 GiB each, 125.8 GiB in all
    assert round(sum(totals) / 1024**2, 1) == 125.8
    cpuinfo = read(host, "proc/cpuinfo")
    assert cpuinfo.count("processor\t:") == 88
    assert "E5-2696 v4" in cpuinfo and " avx2 " in cpuinfo and "avx512" not in cpuinfo


@pytest.mark.parametrize("host, gpu, display", [
    ("seed-box", ("0000:84:00.0", "1"), ("0000:03:00.0", "0")),
    ("seed-box-bound", ("0000:84:00.0", "1"), ("0000:03:00.0", "0")),
    ("seed-box-mirror", ("0000:03:00.0", "0"), ("0000:82:00.0", "1")),
])
def test_seed_gpus(host: str, gpu: Tuple[str, str], display: Tuple[str, str]) -> None:
    dev = HOSTS / host / "sys/bus/pci/devices"
    ti, gt = dev / gpu[0], dev / display[0]
    assert os.readlink(ti).startswith("../../../devices/pci0000:")
    assert (ti / "vendor").read_text() == "0x10de\n"
    assert (ti / "device").read_text() == "0x1b06\n"
    assert (ti / "class").read_text() == "0x030000\n"
    assert (ti / "numa_node").read_text() == gpu[1] + "\n"
    assert cpus((ti / "local_cpulist").read_text()) == (SEED_NODE1 if gpu[1] == "1" else SEED_NODE0)
    assert mask((ti / "local_cpus").read_text()) == cpus((ti / "local_cpulist").read_text())
    assert (ti / "boot_vga").read_text() == "0\n"
    assert (ti / "max_link_speed").read_text() == "8.0 GT/s PCIe\n"
    assert (ti / "max_link_width").read_text() == "16\n"
    assert os.readlink(ti / "driver") == "../../../../bus/pci/drivers/nvidia"
    assert (ti / "driver").resolve().is_dir()
    assert (gt / "device").read_text() == "0x128b\n"
    assert (gt / "boot_vga").read_text() == "1\n"
    assert (gt / "numa_node").read_text() == display[1] + "\n"
    resource = (ti / "resource").read_text().splitlines()
    assert len(resource) == 13
    start, end, flags = (int(word, 16) for word in resource[1].split())
    assert end - start + 1 == 256 * 1024**2 and flags & 0x2000  # BAR1: 256 MiB, prefetchable


def test_seed_hugepage_trap() -> None:
    info = meminfo(read("seed-box", "proc/meminfo"))
    assert (info["HugePages_Total"], info["HugePages_Free"]) == (24000, 15779)
    assert read("seed-box", "proc/sys/vm/nr_hugepages") == "24000\n"
    pool = "sys/kernel/mm/hugepages/hugepages-2048kB"
    assert read("seed-box", f"{pool}/nr_hugepages") == "24000\n"
    assert read("seed-box", f"{pool}/free_hugepages") == "15779\n"
    nodes = [meminfo(read("seed-box", f"sys/devices/system/node/node{n}/meminfo")) for n in (0, 1)]
    assert [n["HugePages_Total"] for n in nodes] == [12000, 12000]
    assert sum(n["HugePages_Free"] for n in nodes) == 15779
    holders = {pid: status("seed-box", pid) for pid in pids("seed-box")}
    held = {pid: s for pid, s in holders.items() if s.get("HugetlbPages", "0 kB") != "0 kB"}
    assert [s["HugetlbPages"] for s in held.values()] == ["16836608 kB"]  # 8221 pages of 2 MiB
    assert [s["Name"] for s in held.values()] == ["strata-bench"]
    config = read("seed-box", "etc/strata-doctor.yaml")
    assert "arena: 46.84GiB" in config and "kv: 3.09GiB" in config and "hugepages: auto" in config


@pytest.mark.parametrize("host, others_on_node1", [("seed-box", 184), ("seed-box-bound", 0)])
def test_seed_processes(host: str, others_on_node1: int) -> None:
    show = read(host, ".strata-doctor/commands/systemctl-show-strata.service.txt")
    engine = int(re.search(r"^MainPID=(\d+)$", show, re.M).group(1))  # type: ignore[union-attr]
    userland = 0
    on_node1 = 0
    for pid in pids(host):
        s = status(host, pid)
        assert mask(s["Cpus_allowed"]) == cpus(s["Cpus_allowed_list"])
        fields = read(host, f"proc/{pid}/stat").rsplit(")", 1)[1].split()
        assert len(fields) == 50  # 52 with pid and comm
        if pid == engine or s["PPid"] == "2" or pid == 2:
            continue
        userland += 1
        on_node1 += cpus(s["Cpus_allowed_list"]) >= SEED_NODE1
    assert userland == 184
    assert on_node1 == others_on_node1
    assert read(host, f"proc/{engine}/cgroup") == "0::/system.slice/strata.service\n"
    assert read(host, f"proc/{engine}/cmdline").split("\0")[:2] == [
        "/opt/strata/venv/bin/python", "/opt/strata/serve/server.py"]


def test_seed_engine_memory_split() -> None:
    gib = 1024**3
    show = read("seed-box", ".strata-doctor/commands/systemctl-show-strata.service.txt")
    assert "NRestarts=7\n" in show and "NUMAPolicy=n/a\n" in show and "CPUAffinity=\n" in show
    engine = int(re.search(r"^MainPID=(\d+)$", show, re.M).group(1))  # type: ignore[union-attr]
    assert status("seed-box", engine)["Cpus_allowed_list"] == "0-87"
    per_node = numa_pages(read("seed-box", f"proc/{engine}/numa_maps"))
    assert 25 * gib < per_node[0] < 28 * gib and 25 * gib < per_node[1] < 28 * gib
    journal = read("seed-box", ".strata-doctor/commands/journalctl-oomd.txt")
    assert journal.count("Killed /system.slice/strata.service due to memory pressure") == 7

    bound = read("seed-box-bound", ".strata-doctor/commands/systemctl-show-strata.service.txt")
    for line in ("NUMAPolicy=preferred", "NUMAMask=1", "CPUAffinity=22-43 66-87", "NRestarts=0"):
        assert line + "\n" in bound
    engine = int(re.search(r"^MainPID=(\d+)$", bound, re.M).group(1))  # type: ignore[union-attr]
    assert status("seed-box-bound", engine)["Cpus_allowed_list"] == "22-43,66-87"
    maps = read("seed-box-bound", f"proc/{engine}/numa_maps")
    assert all(line.split()[1] == "prefer:1" for line in maps.splitlines())
    per_node = numa_pages(maps)
    assert per_node[1] > 52 * gib and per_node.get(0, 0) < gib
    assert meminfo(read("seed-box-bound", "proc/meminfo"))["HugePages_Total"] == 0


# -- every host -----------------------------------------------------------------------------
@pytest.mark.parametrize("host", WHOLE_SYSTEMS)
def test_memory_adds_up(host: str) -> None:
    info = meminfo(read(host, "proc/meminfo"))
    node_dir = HOSTS / host / "sys/devices/system/node"
    nodes = [meminfo((d / "meminfo").read_text()) for d in sorted(node_dir.glob("node*"))]
    if nodes:
        for key in ("MemTotal", "MemFree", "AnonPages", "HugePages_Total", "HugePages_Free"):
            assert info[key] == sum(n[key] for n in nodes), key
        for d in sorted(node_dir.glob("node*")):
            pool = d / "hugepages/hugepages-2048kB"
            node = meminfo((d / "meminfo").read_text())
            assert int((pool / "nr_hugepages").read_text()) == node["HugePages_Total"]
            assert int((pool / "free_hugepages").read_text()) == node["HugePages_Free"]
    pool = HOSTS / host / "sys/kernel/mm/hugepages/hugepages-2048kB"
    assert int((pool / "nr_hugepages").read_text()) == info["HugePages_Total"]
    assert int((pool / "free_hugepages").read_text()) == info["HugePages_Free"]
    assert int(read(host, "proc/sys/vm/nr_hugepages")) == info["HugePages_Total"]
    assert 0 < info["MemFree"] < info["MemTotal"]
    assert info["Hugetlb"] >= info["HugePages_Total"] * info["Hugepagesize"]


@pytest.mark.parametrize("host", HOST_NAMES)
def test_links_stay_inside_the_tree(host: str) -> None:
    top = (HOSTS / host).resolve()
    for rel, (kind, target) in _snapshot(HOSTS / host).items():
        if kind != "link":
            continue
        assert not target.startswith(b"/"), f"{rel} -> {target!r} is absolute"
        resolved = (HOSTS / host / rel).resolve()
        assert resolved.exists() and top in resolved.parents, f"{rel} -> {target!r}"


@pytest.mark.parametrize("host", HOST_NAMES)
def test_every_host_documents_itself(host: str) -> None:
    assert (HOSTS / host / "README.md").read_text().startswith(f"# {host}\n")
    assert (HOSTS / host / "etc/strata-doctor.yaml").is_file()


def test_trees_stay_small() -> None:
    sizes = [len(data) for host in HOST_NAMES
             for kind, data in _snapshot(HOSTS / host).values() if kind == "file"]
    # The largest files are the per-CPU /proc/cpuinfo of the 256- and 224-CPU servers.
    assert max(sizes) < 512 * 1024
    # 5 MiB held sixteen hosts; at 33 they are 5.2 MiB. Half is /proc/cpuinfo, which the
    # kernel writes whole for every CPU (the 256- and the two 224-CPU servers alone are
    # 1.26 MiB of it), the rest the sysfs files of every CPU and node, one small file each:
    # nothing a model could drop without the trees ceasing to be what a kernel writes. The
    # bound still catches a model that writes a large file by mistake, or a host too big.
    assert sum(sizes) < 7 * 1024**2
