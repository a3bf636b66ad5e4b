"""The engine as the host runs it: its unit (``systemctl show``, and the unit's drop-ins on
disk for what is configured but not yet in effect), the systemd it runs under, and its
process (``/proc/PID/status``).

Its settings (``--arena``, ``/etc/strata-doctor.yaml``) are an input, not a fact:
:mod:`strata_doctor.config`.
"""

import re
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple

from strata_doctor.facts.numa_maps import read_numa_maps
from strata_doctor.facts.parse import (
    parse_cpulist,
    parse_int,
    parse_key_values,
    parse_status,
)
from strata_doctor.facts.unitfile import parse_ini, split_command
from strata_doctor.facts.units import unit_file_paths, unit_setting
from strata_doctor.root import Command, CommandResult, Root, command_key

NUMA_POLICY_SINCE = 243
"""systemd version that knows ``NUMAPolicy=``/``NUMAMask=``."""


ALLOWED_CPUS_SINCE = 244
"""systemd version that knows ``AllowedCPUs=``."""


SYSTEMD_VERSION = Command("systemctl-version", ("systemctl", "--version"))


_VERSION = re.compile(r"^systemd\s+(\d{1,9})(?!\d)", re.MULTILINE)  # not 5,000 digits


UNIT_PROPERTIES = (
    "Id,LoadState,ActiveState,SubState,Result,NRestarts,MainPID,ControlGroup,Slice,"
    "FragmentPath,DropInPaths,NUMAPolicy,NUMAMask,CPUAffinity,AllowedCPUs,"
    "ManagedOOMMemoryPressure,ManagedOOMSwap,ManagedOOMPreference,MemoryHigh,MemoryMax,"
    "ExecMainStatus"
)


class UnitState(NamedTuple):
    """The engine unit as systemd sees it, from ``systemctl show UNIT``."""

    name: str
    """Unit name."""
    properties: Tuple[Tuple[str, str], ...]
    """Every ``Key=Value`` pair shown."""
    available: bool
    """False when systemctl is missing or failed (no systemd, a container)."""
    reason: str = ""
    """Why it is unavailable."""

    def get(self, key: str) -> str:
        """A property's value ('' when absent)."""
        for name, value in self.properties:
            if name == key:
                return value
        return ""

    @property
    def loaded(self) -> bool:
        """Whether the unit exists."""
        return self.available and self.get("LoadState") == "loaded"

    @property
    def main_pid(self) -> Optional[int]:
        """The unit's main process, when running."""
        pid = parse_int(self.get("MainPID"))
        return pid if pid else None


def unit_command(unit: str) -> Command:
    """The ``systemctl show`` command for a unit."""
    return Command(
        command_key(["systemctl", "show", unit]),
        ("systemctl", "show", unit, f"--property={UNIT_PROPERTIES}", "--no-pager"),
    )


def read_unit(root: Root, unit: str) -> UnitState:
    """Read a unit's state via ``systemctl show`` (replayed under a captured root)."""
    result = root.run(unit_command(unit))
    if not result.ok:
        return UnitState(unit, (), False, _why(result))
    return UnitState(unit, tuple(parse_key_values(result.stdout).items()), True)


def _why(result: CommandResult) -> str:
    return command_failure(result, result.argv[0]) + (" (no systemd)" if result.missing else "")


def command_outcome(result: CommandResult) -> str:
    """How a command ended: ``not found``, ``timed out`` or ``exit N``."""
    if result.missing:
        return "not found"
    if result.timed_out:
        return "timed out"
    return f"exit {result.status}"


def command_failure(result: CommandResult, name: str) -> str:
    """Why ``name`` gave nothing to read: ``NAME not found``, ``NAME timed out`` or
    ``NAME exited N: <the first line of its stderr>``."""
    if result.missing:
        return f"{name} not found"
    if result.timed_out:
        return f"{name} timed out"
    err = result.stderr.strip().splitlines()
    return f"{name} exited {result.status}" + (f": {err[0]}" if err else "")


class UnitBinding(NamedTuple):
    """NUMA and CPU settings of a unit, from ``[Service]`` in its file and drop-ins."""

    numa_policy: Optional[str] = None
    numa_mask: FrozenSet[int] = frozenset()
    cpu_affinity: FrozenSet[int] = frozenset()
    allowed_cpus: FrozenSet[int] = frozenset()
    slice: Optional[str] = None
    exec_numactl: Optional[str] = None
    """The ``numactl ...`` or wrapper prefix of ExecStart, when it has one."""
    files: Tuple[str, ...] = ()
    """The unit files and drop-ins these came from."""


def read_configured_binding(root: Root, unit: str) -> UnitBinding:
    """Merge the unit file and its drop-ins, as systemd would on reload."""
    files = unit_file_paths(root, unit)
    binding = UnitBinding(files=tuple(files))
    for path in files:
        binding = _merge_service_section(binding, root.read(path) or "")
    return binding


def _merge_service_section(binding: UnitBinding, text: str) -> UnitBinding:
    changes: Dict[str, object] = {}
    for key, value in _service_items(text):
        if key == "NUMAPolicy":
            changes["numa_policy"] = value or None
        elif key == "NUMAMask":
            changes["numa_mask"] = _cpu_set(value)
        elif key == "CPUAffinity":
            changes["cpu_affinity"] = _cpu_set(value)
        elif key == "AllowedCPUs":
            changes["allowed_cpus"] = _cpu_set(value)
        elif key == "Slice":
            changes["slice"] = value or None
        elif key == "ExecStart":
            changes["exec_numactl"] = _numactl_prefix(value)
    return binding._replace(**changes)  # type: ignore[arg-type]


def _cpu_set(value: str) -> FrozenSet[int]:
    # systemd accepts spaces as well as commas between ranges.
    return parse_cpulist(",".join(value.split()))


def _service_items(text: str) -> List[Tuple[str, str]]:
    return [(key, value) for section, key, value in parse_ini(text) if section == "Service"]


def _numactl_prefix(exec_start: str) -> Optional[str]:
    words = split_command(exec_start.lstrip("@-:+!"))
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    if program == "numactl":
        options = [w for w in words[1:] if w.startswith("-")]
        return " ".join(["numactl", *options])
    if program == "strata-numa":
        return "strata-numa"
    return None


# -- systemd on this host -------------------------------------------------------------------
class SystemdSupport(NamedTuple):
    """Which unit settings this host's systemd understands."""

    version: Optional[int]
    """systemd's version from ``systemctl --version``; None when unknown."""
    cgroup_v2: bool
    """Whether ``/sys/fs/cgroup/cgroup.controllers`` exists (the unified hierarchy)."""
    present: bool
    """Whether systemd manages this host at all (``systemctl`` ran)."""
    inferred: str = ""
    """How the version was guessed when ``systemctl --version`` was not available."""

    @property
    def numa_policy(self) -> bool:
        """``NUMAPolicy=``/``NUMAMask=`` work (systemd 243+)."""
        return self.version is not None and self.version >= NUMA_POLICY_SINCE

    @property
    def allowed_cpus(self) -> bool:
        """``AllowedCPUs=`` works (systemd 244+ on cgroup v2)."""
        return self.cgroup_v2 and self.version is not None and self.version >= ALLOWED_CPUS_SINCE

    @property
    def described(self) -> str:
        """E.g. ``systemd 252, cgroup v2``."""
        version = f"systemd {self.version}" if self.version is not None else "systemd of unknown version"
        if self.inferred:
            version += f" ({self.inferred})"
        return f"{version}, cgroup {'v2' if self.cgroup_v2 else 'v1'}"


def parse_systemd_version(text: str) -> Optional[int]:
    """The major version from ``systemctl --version`` output (``systemd 252 (252.38-1)``)."""
    match = _VERSION.search(text)
    return int(match.group(1)) if match else None


def read_systemd_support(root: Root, unit: UnitState) -> SystemdSupport:
    """systemd's version and cgroup mode; infers the version from ``systemctl show``'s keys."""
    cgroup_v2 = root.exists("/sys/fs/cgroup/cgroup.controllers")
    result = root.run(SYSTEMD_VERSION)
    version = parse_systemd_version(result.stdout) if result.ok else None
    if version is not None:
        return SystemdSupport(version, cgroup_v2, True)
    if not unit.available:
        return SystemdSupport(None, cgroup_v2, False)
    keys = {key for key, _ in unit.properties}
    # systemctl show prints only the properties its systemd knows.
    if "AllowedCPUs" in keys:
        return SystemdSupport(ALLOWED_CPUS_SINCE, cgroup_v2, True, "at least, as it shows AllowedCPUs")
    if "NUMAPolicy" in keys:
        return SystemdSupport(NUMA_POLICY_SINCE, cgroup_v2, True, "at least, as it shows NUMAPolicy")
    return SystemdSupport(None, cgroup_v2, True)


def unit_exec_start(root: Root, unit: str) -> Optional[str]:
    """The ``ExecStart=`` in effect after the unit file and its drop-ins are merged."""
    return unit_setting(root, unit, "Service", "ExecStart")


class EngineProcess(NamedTuple):
    """The running engine, from ``/proc/PID/status`` and ``/proc/PID/numa_maps``."""

    pid: int
    cpus_allowed: FrozenSet[int]
    """``Cpus_allowed_list``."""
    mems_allowed: FrozenSet[int]
    """``Mems_allowed_list``."""
    memory_by_node: Tuple[Tuple[int, int], ...]
    """(node, bytes) summed over numa_maps, as ``numastat -p`` does."""
    policies: Tuple[Tuple[str, int], ...]
    """(policy such as ``prefer:1`` or ``default``, bytes under it)."""

    @property
    def resident_bytes(self) -> int:
        """Bytes the process has on any node."""
        return sum(size for _, size in self.memory_by_node)

    def bytes_on(self, node: int) -> int:
        """Bytes the process has on ``node``."""
        return dict(self.memory_by_node).get(node, 0)


def read_process(root: Root, pid: int) -> Optional[EngineProcess]:
    """Read the engine's process; None when it is gone."""
    status_text = root.read(f"/proc/{pid}/status")
    if status_text is None:
        return None
    status = parse_status(status_text)
    # One pass for all sums (a large engine's numa_maps has a million lines), shared with
    # the hugepage facts, which read its hugetlb pages per node.
    per_node, per_policy, _ = read_numa_maps(root, pid)
    return EngineProcess(
        pid=pid,
        cpus_allowed=parse_cpulist(status.get("Cpus_allowed_list", "")),
        mems_allowed=parse_cpulist(status.get("Mems_allowed_list", "")),
        memory_by_node=tuple(sorted(per_node.items())),
        policies=tuple(sorted(per_policy.items())),
    )
