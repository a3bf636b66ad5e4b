"""Generated host trees for the benchmarks: a seed-box twin and a large fleet host.

The trees follow the capture layout of ``strata_doctor.root`` (files under the root,
command outputs under ``.strata-doctor/commands``), so ``strata-doctor check --root DIR``
reads them exactly as it reads a fixture. Nothing here is timed.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

GIB = 1024**3
UNIT_SHOW = (
    "Id=strata.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
    "MainPID={pid}\nNUMAPolicy=\nNUMAMask=\nCPUAffinity=\nAllowedCPUs=\n"
)
# A realistic flags line: /proc/cpuinfo is most of what a large host's check reads.
FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx "
    "fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon pebs bts "
    "rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx "
    "smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt aes "
    "xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 cdp_l3 invpcid_single "
    "pti intel_ppin ssbd ibrs ibpb stibp tpr_shadow flexpriority ept vpid ept_ad fsgsbase "
    "tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm cqm rdt_a avx512f avx512dq rdseed adx "
    "smap clflushopt clwb intel_pt avx512cd avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves "
    "cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local avx512_bf16 amx_tile amx_bf16 arat pln pts"
)


@dataclass(frozen=True)
class HostShape:
    """The size of a generated host."""

    nodes: int
    """NUMA nodes, all with CPUs and memory."""
    sockets: int
    """Packages; nodes of one socket are 12 apart, sockets 32 (21 on two-node hosts)."""
    cpus: int
    """Logical CPUs (two threads per core), spread evenly over the nodes."""
    gpus: int
    """Compute GPUs, spread evenly over the nodes; a boot display GPU is added on node 0."""
    processes: int
    """Processes under /proc, for the cpu-contention scan."""
    node_bytes: int = 64 * GIB
    """MemTotal of each node."""
    model: str = "Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz"
    """The CPU model name."""


SEED_SHAPE = HostShape(nodes=2, sockets=2, cpus=88, gpus=1, processes=300)
LARGE_SHAPE = HostShape(nodes=32, sockets=8, cpus=2048, gpus=16, processes=300, node_bytes=256 * GIB,
                        model="Generated 64-core CPU")


def node_cpus(shape: HostShape, node: int) -> List[int]:
    """Linux numbering: first threads of every core, then their SMT siblings."""
    cores = shape.cpus // 2
    per_node = cores // shape.nodes
    first = list(range(node * per_node, (node + 1) * per_node))
    return first + [cpu + cores for cpu in first]


def cpulist(cpus: List[int]) -> str:
    """Format CPU ids as a kernel cpulist."""
    ordered = sorted(cpus)
    parts: List[str] = []
    start = prev = ordered[0]
    for cpu in [*ordered[1:], -1]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


def cpumap(cpus: List[int], total: int) -> str:
    """Format CPU ids as a kernel cpumap: 32-bit hex words, most significant first."""
    value = sum(1 << cpu for cpu in cpus)
    words = [(value >> (32 * i)) & 0xFFFFFFFF for i in range((total + 31) // 32)]
    return ",".join(f"{word:08x}" for word in reversed(words))


def _cpu_topology(shape: HostShape) -> Dict[str, str]:
    # What lstopo needs to read the tree (strata-doctor reads /proc/cpuinfo instead).
    cores = shape.cpus // 2
    per_socket = cores // shape.sockets
    files: Dict[str, str] = {}
    sockets: Dict[int, List[int]] = {}
    for cpu in range(shape.cpus):
        sockets.setdefault((cpu % cores) // per_socket, []).append(cpu)
    for cpu in range(shape.cpus):
        core = cpu % cores
        package = core // per_socket
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        socket_cpus = sockets[package]
        files[f"{base}/physical_package_id"] = f"{package}\n"
        files[f"{base}/die_id"] = "0\n"
        files[f"{base}/core_id"] = f"{core % per_socket}\n"
        files[f"{base}/thread_siblings_list"] = cpulist([core, core + cores]) + "\n"
        files[f"{base}/core_siblings_list"] = cpulist(socket_cpus) + "\n"
        files[f"{base}/thread_siblings"] = cpumap([core, core + cores], shape.cpus) + "\n"
        files[f"{base}/core_siblings"] = cpumap(socket_cpus, shape.cpus) + "\n"
    return files


def _distance(shape: HostShape, a: int, b: int) -> int:
    if a == b:
        return 10
    per_socket = shape.nodes // shape.sockets
    if a // per_socket == b // per_socket:
        return 12
    return 21 if shape.sockets == 2 and shape.nodes == 2 else 32


def _write(base: Path, host_path: str, content: str) -> None:
    target = base / host_path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)


def _link(base: Path, host_path: str, target: str) -> None:
    link = base / host_path.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)


def generate(base: Path, shape: HostShape) -> Path:
    """Write a host of this shape under ``base``; returns ``base``."""
    files: Dict[str, str] = {}
    node_dir = "/sys/devices/system/node"
    for node in range(shape.nodes):
        cpus = node_cpus(shape, node)
        kb = shape.node_bytes // 1024
        files[f"{node_dir}/node{node}/cpulist"] = cpulist(cpus) + "\n"
        files[f"{node_dir}/node{node}/distance"] = (
            " ".join(str(_distance(shape, node, other)) for other in range(shape.nodes)) + "\n"
        )
        files[f"{node_dir}/node{node}/meminfo"] = (
            f"Node {node} MemTotal:       {kb} kB\nNode {node} MemFree:        {kb * 9 // 10} kB\n"
            f"Node {node} MemUsed:        {kb // 10} kB\n"
        )
        files[f"{node_dir}/node{node}/cpumap"] = cpumap(cpus, shape.cpus) + "\n"
    everything = f"0-{shape.cpus - 1}"
    files.update(_cpu_topology(shape))
    files[f"{node_dir}/online"] = f"0-{shape.nodes - 1}\n"
    files[f"{node_dir}/possible"] = f"0-{shape.nodes - 1}\n"
    files["/sys/devices/system/cpu/online"] = everything + "\n"
    files["/sys/devices/system/cpu/possible"] = everything + "\n"
    files["/proc/cpuinfo"] = _cpuinfo(shape)
    total_kb = shape.nodes * shape.node_bytes // 1024
    files["/proc/meminfo"] = (
        f"MemTotal:       {total_kb} kB\nMemFree:        {total_kb * 9 // 10} kB\n"
        f"MemAvailable:   {total_kb * 9 // 10} kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n"
    )
    files["/proc/sys/kernel/osrelease"] = "6.8.0-45-generic\n"
    files["/proc/uptime"] = "86400.00 170000.00\n"
    engine_pid = 4242
    files["/.strata-doctor/commands/systemctl-show-strata.service.txt"] = UNIT_SHOW.format(pid=engine_pid)
    files.update(_processes(shape, engine_pid))
    for host_path, content in files.items():
        _write(base, host_path, content)
    _gpus(base, shape)
    return base


def _cpuinfo(shape: HostShape) -> str:
    cores = shape.cpus // 2
    per_socket = cores // shape.sockets
    blocks = []
    for cpu in range(shape.cpus):
        core = cpu % cores
        blocks.append(
            f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 79\n"
            f"model name\t: {shape.model}\nstepping\t: 1\ncpu MHz\t\t: 2200.000\n"
            f"cache size\t: 56320 KB\nphysical id\t: {core // per_socket}\nsiblings\t: {per_socket * 2}\n"
            f"core id\t\t: {core % per_socket}\ncpu cores\t: {per_socket}\napicid\t\t: {cpu * 2}\n"
            f"fpu\t\t: yes\nfpu_exception\t: yes\ncpuid level\t: 20\nwp\t\t: yes\n"
            f"flags\t\t: {FLAGS}\nbugs\t\t: cpu_meltdown spectre_v1 spectre_v2 spec_store_bypass mds\n"
            f"bogomips\t: 4400.00\nclflush size\t: 64\ncache_alignment\t: 64\n"
            f"address sizes\t: 46 bits physical, 48 bits virtual\npower management:\n\n"
        )
    return "".join(blocks)


def _gpus(base: Path, shape: HostShape) -> None:
    gpus = [(n * shape.nodes // max(shape.gpus, 1), False) for n in range(shape.gpus)]
    if shape.gpus == 1:
        gpus = [(shape.nodes - 1, False)]  # the seed box: the compute GPU on the last node
    gpus.append((0, True))  # a small boot display, as the seed box's GT 710
    for index, (node, boot) in enumerate(gpus):
        bus = 0x84 + index if not boot else 0x03
        address = f"0000:{bus:02x}:00.0"
        real = f"/sys/devices/pci0000:{bus:02x}/0000:{bus:02x}:01.0/{address}"
        attrs = {
            "class": "0x030000\n",
            "vendor": "0x10de\n",
            "device": "0x128b\n" if boot else "0x1b06\n",
            "numa_node": f"{node}\n",
            "local_cpulist": cpulist(node_cpus(shape, node)) + "\n",
            "boot_vga": "1\n" if boot else "0\n",
            "current_link_speed": "2.5 GT/s PCIe\n",
            "max_link_speed": "8.0 GT/s PCIe\n",
            "current_link_width": "16\n",
            "max_link_width": "16\n",
            "resource": _resource(boot),
        }
        for name, content in attrs.items():
            _write(base, f"{real}/{name}", content)
        _link(base, f"{real}/driver", "../../../../bus/pci/drivers/nvidia")
        _link(base, f"/sys/bus/pci/devices/{address}", f"../../..{real[4:]}")
    # Other PCI functions (bridges, NICs, NVMe): only their class is read.
    for index in range(8 * shape.nodes):
        address = f"0000:{0x10 + index // 8:02x}:{index % 8:02x}.0"
        real = f"/sys/devices/pci0000:10/{address}"
        _write(base, f"{real}/class", random.Random(index).choice(["0x060400\n", "0x020000\n", "0x010802\n"]))
        _link(base, f"/sys/bus/pci/devices/{address}", f"../../..{real[4:]}")


def _resource(boot: bool) -> str:
    size = (256 if boot else 16384) * 1024**2
    start = 0x38000000000
    rows = [f"0x{0xfa000000:016x} 0x{0xfaffffff:016x} 0x0000000000040200",
            f"0x{start:016x} 0x{start + size - 1:016x} 0x000000000014220c"]
    return "\n".join(rows + ["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * 11) + "\n"


def _processes(shape: HostShape, engine_pid: int) -> Dict[str, str]:
    files: Dict[str, str] = {}
    everything = f"0-{shape.cpus - 1}"
    rng = random.Random(7)
    pids = [1, 2, *range(100, 100 + shape.processes - 3), engine_pid]
    for pid in pids:
        kernel = pid == 2 or (pid < 100 + shape.processes // 4 and pid != 1)
        name = "kthreadd" if pid == 2 else "strata" if pid == engine_pid else f"proc{pid}"
        files.update(process_files(pid, name, 2 if kernel and pid != 2 else 1, everything, rng))
    files[f"/proc/{engine_pid}/numa_maps"] = numa_maps(2000, shape.nodes, seed=engine_pid)
    return files


def process_files(pid: int, name: str, ppid: int, cpus: str, rng: random.Random) -> Dict[str, str]:
    """``/proc/PID/status`` and ``/proc/PID/stat`` in the kernel's layout."""
    status = (
        f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\n"
        f"PPid:\t{ppid}\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\n"
        "Groups:\t\nVmPeak:\t  168340 kB\nVmSize:\t  103944 kB\nVmRSS:\t   12844 kB\n"
        "HugetlbPages:\t       0 kB\nThreads:\t1\nSigQ:\t0/514555\nSigPnd:\t0000000000000000\n"
        "ShdPnd:\t0000000000000000\nSigBlk:\t7be3c0fe28014a03\nSigIgn:\t0000000000001000\n"
        "CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n"
        "Seccomp:\t0\nCpus_allowed:\tffffffff,ffffffff,ffffff\n"
        f"Cpus_allowed_list:\t{cpus}\nMems_allowed:\t00000000,00000003\nMems_allowed_list:\t0-1\n"
        "voluntary_ctxt_switches:\t4571\nnonvoluntary_ctxt_switches:\t1123\n"
    )
    utime, stime = rng.randrange(0, 90000), rng.randrange(0, 20000)
    stat = (
        f"{pid} ({name}) S {ppid} {pid} {pid} 0 -1 4194560 44563 2437815 107 1264 {utime} {stime} "
        f"3201 1127 20 0 1 0 {rng.randrange(1, 8000000)} 106438656 3211 18446744073709551615 1 1 0 0 "
        "0 0 671173123 4096 1260 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    )
    return {f"/proc/{pid}/status": status, f"/proc/{pid}/stat": stat}


def numa_maps(lines: int, nodes: int, seed: int = 1) -> str:
    """A numa_maps of ``lines`` mappings, as a large unbound engine has: a tenth untouched
    (no pages), most on one node, a fifth spread over two, a few in huge pages."""
    rng = random.Random(seed)
    out = []
    address = 0x7F0000000000
    for index in range(lines):
        policy = "prefer:1" if index % 3 else "default"
        kind = index % 10
        spread = sorted(rng.sample(range(nodes), min(2 if kind < 2 else 1, nodes)))
        counts = " ".join(f"N{n}={rng.randrange(1, 4096)}" for n in spread)
        if kind == 9:
            out.append(f"{address:x} {policy} file=/usr/lib/x86_64-linux-gnu/libstrata_experts.so")
        elif kind == 8:
            out.append(f"{address:x} {policy} huge anon=24 dirty=24 {counts} kernelpagesize_kB=2048")
        elif kind in (6, 7):
            out.append(f"{address:x} {policy} file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=3 "
                       f"mapmax=80 {counts} kernelpagesize_kB=4")
        else:
            out.append(f"{address:x} {policy} anon={rng.randrange(1, 8192)} dirty=3 active=0 {counts} "
                       "kernelpagesize_kB=4")
        address += 0x200000
    return "\n".join(out) + "\n"
