"""The real host snapshots in ../shared/corpus: their names, unpacking, and lstopo's view (of them
and of the fixture hosts under tests/fixtures/hosts).

Tests take the session fixture ``corpus`` (tests/conftest.py), which unpacks every
archive once and skips the test, with the reason, when ../shared/corpus is absent. The
snapshot names are listed here rather than globbed, so that every test is collected and
shown as skipped on a machine without the corpus instead of vanishing from the count.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Dict, FrozenSet, Optional, Set, Tuple

import pytest

from strata_doctor.facts.meminfo import parse_meminfo
from tests.conftest import SHARED, run_cli

# archive name (without .tar.bz2/.tar.gz) -> the corpus folder that holds it
KNOWN_SNAPSHOTS: Dict[str, str] = {
    **{
        name: "hwloc"
        for name in (
            "128arm-2pa2n8cluster4co", "128ia64-17n4s2c", "16amd64-4n4c-cgroup-distance-merge",
            "16amd64-8n2c", "16em64t-4s2c2t", "16ia64-8n2s", "20em64t-hybrid-1p6c2t+2ca4co1t",
            "20s390-2g6s4c", "256ia64-64n2s2c", "2arm-2c", "2i386-2c-nohugepage",
            "2i386-2t-hugepagesizecount", "2pa-pcidomain32bits", "2ps3-2t", "32amd64-4s2n4c-cgroup2",
            "32em64t-2n8c+dax+nvme+mic+dimms", "40intel64-2g2n4c+pcilocality", "4fake-4gr1nu1pu",
            "64amd64-4s2n4ca2co", "8em64t-2s2ca2c", "8em64t-2s2ca2c-buggynuma", "8ia64-2s2c2t",
            "fakeheteromemtiers", "fakepcilocalities", "nvidia-dgx-gb10", "nvidiagpunumanodes",
        )
    },
    "linux-amd64-accel-nvidia": "ghw",
    "linux-amd64-amd-ryzen-1600": "ghw",
    "prometheus-procfs-fixtures": "procfs",
}
SNAPSHOTS = sorted(KNOWN_SNAPSHOTS)
HWLOC_SNAPSHOTS = sorted(name for name, folder in KNOWN_SNAPSHOTS.items() if folder == "hwloc")

CORPUS = SHARED / "corpus"
ABSENT = None if (CORPUS / "MANIFEST.md").is_file() else f"{CORPUS} is absent: no real host snapshots"

LSTOPO = shutil.which("lstopo-no-graphics")
ARCHIVES: Dict[str, Path] = {
    re.sub(r"\.tar\.(bz2|gz)$", "", path.name): path
    for path in sorted(CORPUS.glob("*/*.tar.*"))
    if re.search(r"\.tar\.(bz2|gz)$", path.name)
}
PCI = "/sys/bus/pci/devices"

# -- The known differences between lstopo and the raw files (MANIFEST.md) ------------------
LSTOPO_HIDES_GPU_MEMORY_NODES = (
    "lstopo hides NVIDIA GPU-memory nodes (listed in /proc/driver/nvidia/gpus/*/numa_status) "
    "unless HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1 is set"
)
LSTOPO_DROPS_OFFLINE_CPUS = (
    "lstopo drops offline CPUs; the raw cpulist keeps them, so only online CPUs are compared"
)
LSTOPO_MERGES_BUGGY_NUMA = (
    "lstopo merges the eight identical nodes of 8em64t-2s2ca2c-buggynuma (same CPUs 0-7, every "
    "distance 10) into node 0"
)
LSTOPO_INVENTS_NODE_0 = (
    "lstopo invents a node 0 holding every CPU and /proc/meminfo's MemTotal on kernels without "
    "NUMA directories"
)
LSTOPO_DROPS_EMPTY_NODES = (
    "lstopo keeps no node that has neither CPUs nor memory (node directories trimmed to vmstat "
    "in the procfs fixtures), then invents node 0 as on kernels without NUMA directories"
)
LSTOPO_GIVES_CPULESS_NODES_A_LOCALITY = (
    "lstopo gives a CPU-less node the cpuset of the object it hangs from (its locality), "
    "where the raw cpulist is empty"
)
LSTOPO_PLACES_PCI_BY_LOCAL_CPUS = (
    "lstopo places a PCI function by local_cpus, never by numa_node, so a numa_node that "
    "contradicts local_cpulist (or is -1) does not show"
)
BUGGY_NUMA = "8em64t-2s2ca2c-buggynuma"


# -- MANIFEST.md's table --------------------------------------------------------------------
@dataclass(frozen=True)
class ManifestRow:
    """One row of the hwloc table in MANIFEST.md."""

    root: str
    node_ids: Tuple[int, ...]
    memory_only: Tuple[int, ...]
    online: Optional[str]
    pci_functions: int
    pci_numa_nodes: Dict[int, int]
    display: Tuple[Tuple[str, Optional[int], Optional[int], Optional[int]], ...]
    display_more: int


def _ids(cell: str) -> Tuple[int, ...]:
    inner = cell[cell.index("(") + 1 : cell.rindex(")")].strip()
    if not inner:
        return ()
    if ".." in inner:
        lo, hi = inner.split("..")
        return tuple(range(int(lo), int(hi) + 1))
    return tuple(int(x) for x in inner.split(","))


def _optional_hex(text: str) -> Optional[int]:
    return None if text == "None" else int(text, 16)


def read_manifest() -> Dict[str, ManifestRow]:
    rows: Dict[str, ManifestRow] = {}
    row_re = re.compile(r"^\|\s*(\S+)\.tar\.(?:bz2|gz)\s*\|\s*`([^`]+)`\s*\|(.*)\|\s*$")
    if ABSENT:
        return rows
    for line in (CORPUS / "MANIFEST.md").read_text().splitlines():
        match = row_re.match(line)
        if not match:
            continue
        name, root, rest = match.groups()
        nodes, memonly, online, pci, display, _hugepages = (c.strip() for c in rest.split("|"))
        histogram = {}
        pci_inner = pci[pci.index("(") + 1 : pci.rindex(")")]
        if pci_inner != "-":
            for pair in pci_inner.split(","):
                value, count = pair.rsplit(":", 1)
                histogram[int(value)] = int(count)
        devices = tuple(
            (addr, _optional_hex(vendor), _optional_hex(device), None if numa == "None" else int(numa))
            for addr, vendor, device, numa in re.findall(
                r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (\S+?):(\S+) numa=(-?\d+|None)", display
            )
        )
        more = re.search(r"\(\+(\d+)\)", display)
        rows[name] = ManifestRow(
            root=root,
            node_ids=_ids(nodes),
            memory_only=tuple(int(x) for x in re.findall(r"\d+", memonly)),
            online=None if online == "-" else online,
            pci_functions=int(pci.split()[0]),
            pci_numa_nodes=histogram,
            display=devices,
            display_more=int(more.group(1)) if more else 0,
        )
    return rows


MANIFEST = read_manifest()

# Where the table itself is wrong, checked against the raw files and lstopo.
MANIFEST_MEMORY_ONLY_ERRATA = {
    # The table's memory-only column misses CPU-less nodes on kernels that write only
    # cpumap: node 16 here has an all-zero cpumap and 996 MiB of MemTotal, and lstopo
    # agrees (cpuset 0x0, local_memory 1044660224).
    "128ia64-17n4s2c": (16,),
}


# -- unpacking --------------------------------------------------------------------------------
def _looks_like_root(path: Path) -> bool:
    return (path / "sys").is_dir() or (path / "proc").is_dir()


def find_root(dest: Path, hint: Optional[str]) -> Path:
    """The host root inside an unpacked archive: the manifest's folder (or its ``fsroot/``),
    else the shallowest folder holding ``sys/`` or ``proc/``."""
    candidates = [dest / hint, dest / hint / "fsroot"] if hint else []
    for candidate in [*candidates, dest]:
        if _looks_like_root(candidate):
            return candidate
    level = [dest]
    for _ in range(3):
        level = sorted(p for parent in level for p in parent.iterdir() if p.is_dir() and not p.is_symlink())
        for candidate in level:
            if _looks_like_root(candidate):
                return candidate
    raise AssertionError(f"no sys/ or proc/ folder in {dest} (expected {hint!r})")


# Per-CPU cache descriptions, idle states and memory-block links are 45% of the corpus's
# files and read by neither strata-doctor nor the lstopo facts compared here (lstopo's
# nodes, distances and PCI localities are the same without them); skipping them keeps
# the unpacking fast on a busy disk.
SKIPPED_MEMBERS = (
    "sys/devices/system/cpu/cpu*/cache",
    "sys/devices/system/cpu/cpu*/cpuidle",
    "sys/devices/system/node/node*/memory*",
    "sys/devices/system/memory",
)
_SKIPPED_RE = re.compile(
    r"(^|/)sys/devices/system/(cpu/cpu\d+/(cache|cpuidle)|node/node\d+/memory\d+|memory)(/|$)"
)


def unpack(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    tar = shutil.which("tar")
    if tar:
        excludes = [f"--exclude={pattern}" for pattern in SKIPPED_MEMBERS]
        done = subprocess.run(
            [tar, "-xf", str(archive), "-C", str(dest), "--no-same-owner", *excludes],
            capture_output=True,
            check=False,
        )
        if done.returncode == 0:
            return
        shutil.rmtree(dest)
        dest.mkdir()
    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers() if not _SKIPPED_RE.search(m.name)]
        if hasattr(tarfile, "tar_filter"):
            tf.extractall(dest, members, filter="tar")
        else:  # Python < 3.9.17 has no extraction filters
            tf.extractall(dest, members)


# -- lstopo's view ------------------------------------------------------------------------------
def hwloc_bitmap(text: Optional[str]) -> FrozenSet[int]:
    """Parse an hwloc bitmap (``0x000000ff,0xff000000,,0x0000ffff``; an empty word is zero)."""
    if not text:
        return frozenset()
    value = 0
    for word in text.split(","):
        word = word[2:] if word.startswith("0x") else word
        if word.startswith("f...f"):  # an infinite set: no NUMA or PU set is one
            raise AssertionError(f"unexpected infinite hwloc bitmap {text!r}")
        value = (value << 32) | int(word or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


@dataclass(frozen=True)
class LstopoView:
    """What lstopo's XML says about NUMA nodes, their distances and display devices."""

    nodes: Dict[int, Tuple[FrozenSet[int], Optional[int]]]
    """os_index -> (cpuset, local_memory or None)."""
    distances: Optional[Dict[int, Dict[int, int]]]
    """The NUMA latency matrix by os index; None when lstopo has none."""
    pci: Dict[str, Tuple[str, FrozenSet[int]]]
    """PCI bus id -> (pci_type, nodeset of the object it hangs from)."""
    pus: FrozenSet[int] = frozenset()
    """The os indexes of the PUs (logical CPUs) lstopo found."""
    cores: int = 0
    """How many Core objects lstopo made (0 when the tree tells it no core)."""


def run_lstopo(root: Path, keep_gpu_nodes: bool, disallowed: bool = True) -> LstopoView:
    """lstopo's XML of the tree at ``root``, parsed. With ``disallowed`` (the default) the
    whole machine, else only what the tree's cgroup cpuset allows, as lstopo shows by default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    if keep_gpu_nodes:
        env["HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES"] = "1"
    assert LSTOPO is not None
    done = subprocess.run(
        [LSTOPO, "--if", "fsroot", "--input", str(root), "--of", "xml", "--whole-io",
         *(["--disallowed"] if disallowed else [])],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    tree = ET.fromstring(done.stdout)
    parent = {child: node for node in tree.iter() for child in node}
    nodes: Dict[int, Tuple[FrozenSet[int], Optional[int]]] = {}
    pci: Dict[str, Tuple[str, FrozenSet[int]]] = {}
    pus: Set[int] = set()
    cores = 0
    for obj in tree.iter("object"):
        if obj.get("type") == "Core":
            cores += 1
        elif obj.get("type") == "PU":
            pus.add(int(obj.get("os_index", "-1")))
        elif obj.get("type") == "NUMANode":
            memory = int(obj.get("local_memory") or 0) or None
            nodes[int(obj.get("os_index", "-1"))] = (hwloc_bitmap(obj.get("cpuset")), memory)
        elif obj.get("type") == "PCIDev":
            holder = obj
            while holder.get("nodeset") is None:
                holder = parent[holder]
            pci[obj.get("pci_busid", "")] = (obj.get("pci_type", ""), hwloc_bitmap(holder.get("nodeset")))
    distances = None
    for matrix in tree.iter("distances2"):
        if matrix.get("type") != "NUMANode" or matrix.get("name", "NUMALatency") != "NUMALatency":
            continue
        ids = [int(x) for part in matrix.findall("indexes") for x in (part.text or "").split()]
        values = [int(x) for part in matrix.findall("u64values") for x in (part.text or "").split()]
        assert len(values) == len(ids) ** 2, "lstopo's distance matrix is not square"
        distances = {a: {b: values[i * len(ids) + j] for j, b in enumerate(ids)} for i, a in enumerate(ids)}
    return LstopoView(nodes, distances, pci, frozenset(pus), cores)


# -- the session's corpus ------------------------------------------------------------------------
class Corpus:
    """Unpacked snapshots and, computed once each, the tool's JSON and lstopo's view."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.roots: Dict[str, Path] = {}
        self._json: Dict[str, Dict[str, Any]] = {}
        self._lstopo: Dict[Tuple[str, bool], LstopoView] = {}

    def unpack_all(self) -> None:
        def one(name: str) -> Tuple[str, Path]:
            dest = self.base / name
            unpack(ARCHIVES[name], dest)
            row = MANIFEST.get(name)
            return name, find_root(dest, row.root if row else None)

        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            self.roots.update(pool.map(one, sorted(ARCHIVES)))

    def root(self, name: str) -> Path:
        if name not in self.roots:
            pytest.skip(f"{name} is not in {CORPUS}")
        return self.roots[name]

    def json(self, name: str) -> Dict[str, Any]:
        if name not in self._json:
            result = run_cli(["check", "--root", str(self.root(name)), "--format", "json"])
            assert result.exit_code in (0, 1), (result.exit_code, result.stderr)
            self._json[name] = json.loads(result.stdout)
        return self._json[name]

    def lstopo(self, name: str, keep_gpu_nodes: bool = True) -> LstopoView:
        if LSTOPO is None:
            pytest.skip("lstopo-no-graphics is not installed (Debian package hwloc-nox)")
        key = (name, keep_gpu_nodes)
        if key not in self._lstopo:
            self._lstopo[key] = run_lstopo(self.root(name), keep_gpu_nodes)
        return self._lstopo[key]



def open_corpus(base: Path) -> Corpus:
    """Every snapshot unpacked under ``base``; skips the calling test when there is none."""
    if ABSENT:
        pytest.skip(ABSENT)
    unpacked = Corpus(base)
    unpacked.unpack_all()
    return unpacked

def read_reviewed(table: Path, trees: Collection[str]) -> Dict[str, Dict[str, str]]:
    """tree -> {check/finding: the reason}, from a reviewed table of ``tree | check/finding |
    reason`` lines (tests/golden/corpus-errors.txt, warnings.txt); ``trees`` are the names a
    line may give."""
    found: Dict[str, Dict[str, str]] = {}
    for number, line in enumerate(table.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        tree, finding, reason = (cell.strip() for cell in line.split("|", 2))
        where = f"{table.name}:{number}"
        assert tree in trees, f"{where}: no snapshot or host {tree!r}"
        assert re.fullmatch(r"[a-z0-9-]+/[a-z0-9-]+", finding), f"{where}: {finding!r} is not check/finding"
        assert reason, f"{where}: {finding} on {tree} gives no reason"
        assert finding not in found.get(tree, {}), f"{where}: listed twice"
        found.setdefault(tree, {})[finding] = reason
    return found


def tool_nodes(data: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    return {n["id"]: n for n in data["facts"]["numa"]["nodes"]}


def gpu_memory_nodes(root: Path) -> Set[int]:
    """Nodes the NVIDIA driver says hold GPU memory (``numa_status`` of each GPU)."""
    found = set()
    for status in root.glob("proc/driver/nvidia/gpus/*/numa_status"):
        for line in status.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Node" and value.strip().lstrip("-").isdigit() and int(value) >= 0:
                found.add(int(value))
    return found


def proc_memtotal(root: Path) -> Optional[int]:
    path = root / "proc" / "meminfo"
    return parse_meminfo(path.read_text()).get("MemTotal") if path.is_file() else None
