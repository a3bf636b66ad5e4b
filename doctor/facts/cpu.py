"""The host's CPUs: vendor and model, their topology from /proc/cpuinfo and sysfs, and the
instruction sets the kernel gives the engine's experts.
"""

import re
from operator import itemgetter
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.cpu_states import count_cores, read_thread_groups
from strata_doctor.facts.numa import CPU_DIR
from strata_doctor.facts.parse import (
    is_plain,
    parse_cpuinfo,
    parse_int,
)
from strata_doctor.root import Root

SYSFS_TOPOLOGY = f"{CPU_DIR}/cpu*/topology"
"""Each CPU's ``physical_package_id`` and ``core_id``, read where cpuinfo names no package."""
EXPERT_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


class CpuFacts(NamedTuple):
    """CPU model, sockets and ISA, from ``/proc/cpuinfo``; sockets from its ``physical id``
    (else ``/sys/devices/system/cpu/cpuN/topology/physical_package_id``), cores from each
    CPU's ``thread_siblings_list`` (else its ``thread_siblings`` mask), else from the
    (package, ``core id``) pairs."""

    model: Optional[str]
    """``model name`` of the first processor."""
    sockets: int
    """Number of distinct physical packages (0 when unknown)."""
    package_of: Tuple[Tuple[int, int], ...]
    """(cpu, package id) pairs; a CPU whose package is unknown (-1, as POWER and old ia64
    kernels write it) has none."""
    core_of: Tuple[Tuple[int, Tuple[int, int]], ...]
    """(cpu, (package id, core id)) pairs: CPUs sharing a pair are SMT siblings."""
    flags: FrozenSet[str]
    """CPU feature flags of the first processor."""
    vendor_family_model: Optional[Tuple[str, int, int]] = None
    """(``vendor_id``, ``cpu family``, ``model``) of the first processor, when cpuinfo says."""
    thread_group_of: Tuple[Tuple[int, int], ...] = ()
    """(cpu, the lowest CPU of its ``thread_siblings`` group) pairs: one group per physical
    core, for every CPU where the (package, core id) pairs disagree with a sample of the
    lists (:func:`~strata_doctor.facts.cpu_states.read_thread_groups`), else for the
    sample's. Core ids alone miscount: an Opteron 6134 package holds two dies whose
    ``core id`` both run 0-3."""
    siblings_file: str = "thread_siblings_list"
    """The file the groups were read from: ``thread_siblings`` where only the mask exists."""
    core_ids_source: str = "/proc/cpuinfo"
    """Where ``package_of`` and ``core_of`` came from: ``/proc/cpuinfo``, else
    :data:`SYSFS_TOPOLOGY`."""

    def core_count(self, cpus: FrozenSet[int]) -> Optional[int]:
        """Physical cores among ``cpus`` (:func:`count_cores`); None when unknown."""
        return count_cores(cpus, dict(self.thread_group_of), dict(self.core_of))

    def cores_in(self, cpus: FrozenSet[int]) -> int:
        """Physical cores among ``cpus`` (their count when the topology is unknown)."""
        cores = self.core_count(cpus)
        return len(cpus) if cores is None else cores

    def thread_groups_in(self, cpus: FrozenSet[int]) -> Tuple[FrozenSet[int], ...]:
        """The whole thread_siblings group of each CPU of ``cpus`` that has one, by lowest
        CPU (only the sampled CPUs have one where the core ids were trusted)."""
        group_of = dict(self.thread_group_of)
        wanted = {group_of[cpu] for cpu in cpus if cpu in group_of}
        members: Dict[int, List[int]] = {}
        for cpu, first in self.thread_group_of:
            if first in wanted:
                members.setdefault(first, []).append(cpu)
        return tuple(frozenset(members[first]) for first in sorted(members))

    def packages_in(self, cpus: FrozenSet[int]) -> FrozenSet[int]:
        """Packages (sockets) that own any of ``cpus``."""
        return frozenset(pkg for cpu, pkg in self.package_of if cpu in cpus)

    @property
    def expert_isa(self) -> Tuple[str, ...]:
        """The expert-kernel ISA extensions this CPU offers, in preference order."""
        return tuple(flag for flag in EXPERT_ISA if flag in self.flags)


def read_cpu(root: Root) -> CpuFacts:
    """Read CPU facts through ``root``."""
    data = (root.read_bytes("/proc/cpuinfo") or b"").replace(b"\0", b"")  # as Root.read does
    # Model and flags come from the first processor's block, the ids from every block: a
    # host of 2,048 processors has a 3 MB cpuinfo, so plain text is decoded and parsed only
    # that far, and its ids are picked from the bytes.
    if is_plain(data):  # tabs are plain here: cpuinfo's own layout
        blocks = parse_cpuinfo(_first_cpuinfo_block(data).decode("ascii"))
        package_of, core_of = plain_cpuinfo_topology(data)
    else:
        blocks = parse_cpuinfo(data.decode("utf-8", "replace"))
        package_of, core_of = blocks_topology(blocks)
    first = blocks[0] if blocks else None
    model = (first.get("model name") or first.get("cpu")) if first else None
    flags_text = (first.get("flags") or first.get("Features") or "") if first else ""
    folders = _cpu_folders(root)
    package_of, core_of = known_packages(package_of, core_of)
    core_ids_source = "/proc/cpuinfo"
    if not package_of:
        package_of, core_of = _sysfs_topology(root, folders)
        core_ids_source = SYSFS_TOPOLOGY
    group_of, siblings_file = read_thread_groups(root, folders, core_of)
    return CpuFacts(
        model=model,
        sockets=len(set(package_of.values())),
        package_of=tuple(sorted(package_of.items())),
        core_of=tuple(sorted(core_of.items())),
        flags=frozenset(flags_text.split()),
        vendor_family_model=_vendor_family_model(first),
        thread_group_of=tuple(sorted(group_of.items())),
        siblings_file=siblings_file,
        core_ids_source=core_ids_source,
    )


def _vendor_family_model(block: Optional[Dict[str, str]]) -> Optional[Tuple[str, int, int]]:
    if not block:
        return None
    family, model = parse_int(block.get("cpu family")), parse_int(block.get("model"))
    vendor = block.get("vendor_id")
    if vendor is None or family is None or model is None:
        return None
    return vendor, family, model


# Plain cpuinfo (parse.is_plain, its NULs dropped): ASCII, its only line break \n, its only
# blanks space and tab, so that the patterns below read it as parse_cpuinfo does (a block
# ends at a blank line).
# The lookahead only lets the pattern give up sooner on the 20-odd other lines of a block.
_CPUINFO_IDS = re.compile(rb"\n(?=[pc \t\n])[ \t]*(?:(processor|physical id|core id)[ \t]*:(.*)|(?=\n))")


_BLANK_LINE = re.compile(rb"\n[ \t]*(?=\n)")


def _first_cpuinfo_block(data: bytes) -> bytes:
    """Plain cpuinfo up to the end of its first block: up to the first blank line after the
    first line with a colon."""
    colon = data.find(b":")
    end = _BLANK_LINE.search(data, colon) if colon >= 0 else None
    return data[: end.start()] if end else data


Topology = Tuple[Dict[int, int], Dict[int, Tuple[int, int]]]
"""CPU -> package, and CPU -> (package, core)."""


def blocks_topology(blocks: List[Dict[str, str]]) -> Topology:
    """Packages and cores of the cpuinfo blocks that name a processor and its package."""
    package_of: Dict[int, int] = {}
    core_of: Dict[int, Tuple[int, int]] = {}
    for block in blocks:
        cpu = parse_int(block.get("processor"))
        pkg = parse_int(block.get("physical id"))
        core = parse_int(block.get("core id"))
        if cpu is not None and pkg is not None:
            package_of[cpu] = pkg
            core_of[cpu] = (pkg, core if core is not None else cpu)
    return package_of, core_of


# x86 writes these three keys in this order in every block; its blank line closes the block.
_REGULAR_IDS = [b"processor", b"physical id", b"core id", b""]


def plain_cpuinfo_topology(data: bytes) -> Topology:
    """:func:`blocks_topology` of plain cpuinfo (:func:`~strata_doctor.facts.parse.is_plain`),
    without building a block for each of thousands of processors when every block is laid
    out alike."""
    found = _CPUINFO_IDS.findall(b"\n" + data)
    if found and found[-1][0]:
        found.append((b"", b""))  # the last block ends without a blank line
    if list(map(itemgetter(0), found)) == _REGULAR_IDS * (len(found) // 4):
        values = list(map(itemgetter(1), found))
        # int() reads what parse_int reads in decimal, up to 19 digits (parse_int refuses
        # numbers beyond 64 bits); anything else takes the long way.
        too_long = max(map(len, values), default=0) > 20  # the value keeps its leading blank
        try:
            if too_long:
                raise ValueError
            cpus, packages, cores = (list(map(int, values[column::4])) for column in range(3))
        except ValueError:
            pass
        else:
            return dict(zip(cpus, packages)), dict(zip(cpus, zip(packages, cores)))
    return blocks_topology(_id_blocks(found))


def _id_blocks(found: List[Tuple[bytes, bytes]]) -> List[Dict[str, str]]:
    """``processor``, ``physical id`` and ``core id`` of each block of plain cpuinfo (blocks
    without any of them left out), as parse_cpuinfo would give them."""
    blocks: List[Dict[str, str]] = []
    current: Dict[str, str] = {}
    for key, value in found:
        if key:
            current[key.decode("ascii")] = value.decode("ascii").strip()
        elif current:
            blocks.append(current)
            current = {}
    if current:
        blocks.append(current)
    return blocks


def known_packages(package_of: Dict[int, int], core_of: Dict[int, Tuple[int, int]]) -> Topology:
    """The CPUs whose package is known: -1 (POWER, old ia64) says the kernel does not know,
    and counting it as one socket would make one package of a whole machine."""
    if all(pkg >= 0 for pkg in package_of.values()):
        return package_of, core_of
    known = {cpu: pkg for cpu, pkg in package_of.items() if pkg >= 0}
    return known, {cpu: core for cpu, core in core_of.items() if cpu in known}


def _cpu_folders(root: Root) -> List[int]:
    """The CPU of each ``cpuN`` folder, in id order."""
    names = root.listdir(CPU_DIR)
    return sorted(int(name[3:]) for name in names if name.startswith("cpu") and name[3:].isdigit())


def _sysfs_topology(root: Root, folders: List[int]) -> Topology:
    package_of: Dict[int, int] = {}
    core_of: Dict[int, Tuple[int, int]] = {}
    for cpu in folders:
        pkg = parse_int(root.read(f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id"))
        core = parse_int(root.read(f"{CPU_DIR}/cpu{cpu}/topology/core_id"))
        if pkg is not None and pkg >= 0:
            package_of[cpu] = pkg
            if core is not None:  # without core_id the core is unknown, not the CPU's own
                core_of[cpu] = (pkg, core)
    return package_of, core_of


# -- the instruction sets the kernel gives, not only those the CPU has ------------------------
XCOMP_AVX512 = 0xE0
"""XSAVE state components 5-7 (opmask, ZMM_Hi256, Hi16_ZMM): AVX-512's registers."""


XCOMP_AMX = 0x60000
"""XSAVE state components 17-18 (XTILECFG, XTILEDATA): AMX's tiles."""


# (vendor_id, cpu family, model) -> (code name, ISA the silicon has); a kernel or hypervisor
# that hides them leaves no trace in /proc/cpuinfo's flags, so the model has to tell.
_INTEL_MODELS: Dict[int, Tuple[str, Tuple[str, ...]]] = {
    85: ("Skylake-SP/Cascade Lake", ("avx512f",)),
    106: ("Ice Lake-SP", ("avx512f",)),
    108: ("Ice Lake-D", ("avx512f",)),
    143: ("Sapphire Rapids", ("avx512f", "amx_tile")),
    207: ("Emerald Rapids", ("avx512f", "amx_tile")),
    173: ("Granite Rapids", ("avx512f", "amx_tile")),
    174: ("Granite Rapids-D", ("avx512f", "amx_tile")),
}


def model_isa(vendor_family_model: Optional[Tuple[str, int, int]]) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """(code name, ISA the silicon has) of a server CPU known to have AVX-512 or AMX; None
    for any other (or unknown) model."""
    if vendor_family_model is None:
        return None
    vendor, family, model = vendor_family_model
    if vendor == "GenuineIntel" and family == 6:
        return _INTEL_MODELS.get(model)
    if vendor == "AuthenticAMD":
        return _amd_isa(family, model)
    return None


_ZEN4_MODELS = ((0x10, 0x1F), (0x60, 0x7F), (0xA0, 0xAF))
"""Family 25 (Zen 3 and Zen 4) model ranges of Zen 4, the first AMD core with AVX-512."""


def _amd_isa(family: int, model: int) -> Optional[Tuple[str, Tuple[str, ...]]]:
    if family == 25 and any(low <= model <= high for low, high in _ZEN4_MODELS):
        return "Zen 4", ("avx512f",)
    if family == 26:
        return "Zen 5", ("avx512f",)
    return None


class KernelIsa(NamedTuple):
    """What the running kernel lets a process use of the CPU's vector state: its release,
    the ``arch_prctl`` answers (live, or replayed from a capture) and the boot options that
    hide features."""

    release: Optional[str]
    """``/proc/sys/kernel/osrelease``."""
    version: Optional[Tuple[int, int]]
    """(major, minor) of the release; None when unreadable."""
    xcomp_supported: Optional[int]
    """``ARCH_GET_XCOMP_SUPP``'s mask of XSAVE components; None when not asked or refused."""
    amx_request: Optional[str]
    """``ok`` when ``ARCH_REQ_XCOMP_PERM(XTILEDATA)`` succeeded, else the errno name
    (``EINVAL`` on kernels before 5.16); None when it was not tried (captured host)."""
    hidden_by_cmdline: Tuple[str, ...]
    """``clearcpuid=``, ``noxsave``... words of ``/proc/cmdline`` that hide vector state."""

    def before(self, major: int, minor: int) -> bool:
        """Whether the kernel is known to be older than ``major.minor``."""
        return self.version is not None and self.version < (major, minor)

    @property
    def amx_backported(self) -> bool:
        """A RHEL 9.2+ kernel (``5.14.0-284`` and later ``el9``): 5.14 with AMX backported."""
        match = re.match(r"5\.14\.0-(\d+)\..*el9", self.release or "")
        return match is not None and (parse_int(match.group(1)) or 0) >= 284


def parse_xcomp(text: str) -> Tuple[Optional[int], Optional[str]]:
    """(supported mask, AMX request answer) from :meth:`Root.xcomp_permission`'s text."""
    mask: Optional[int] = None
    request: Optional[str] = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key.strip() == "ARCH_GET_XCOMP_SUPP" and value.lower().startswith("0x"):
            mask = parse_int(value)
        elif key.strip() == "ARCH_REQ_XCOMP_PERM XTILEDATA" and re.fullmatch(r"ok|E[A-Z]+|\d+", value):
            request = value
    return mask, request


_HIDING = re.compile(r"^(clearcpuid=\S+|noxsave|noxsaves|noxsaveopt|noavx512|noavx2|noavx)$")


def read_kernel_isa(root: Root) -> KernelIsa:
    """The running kernel's side of the ISA: release, arch_prctl's answers, boot options."""
    release = root.read_value("/proc/sys/kernel/osrelease")
    match = re.match(r"(\d+)\.(\d+)", release or "")
    numbers = (parse_int(match.group(1)), parse_int(match.group(2))) if match else (None, None)
    version = (numbers[0], numbers[1]) if numbers[0] is not None and numbers[1] is not None else None
    answer = root.xcomp_permission()
    mask, request = parse_xcomp(answer.stdout) if answer.ok else (None, None)
    cmdline = (root.read("/proc/cmdline") or "").split()
    return KernelIsa(release, version, mask, request, tuple(w for w in cmdline if _HIDING.match(w)))
