"""What each guest boot runs: one batch of steps per topology.

A boot under software emulation costs tens of seconds, a step a second or two, so
every assertion about a topology is answered from the same boot: the tests read
the step results by name.  Steps print JSON where a test parses them; whatever a
test needs beyond stdout goes into ``$OUT`` (brought back as files).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Dict, List, Tuple

from guest import Payload, Step
from topologies import TOPOLOGIES, Topology

HERE = Path(__file__).resolve().parent
UNIT = "strata.service"
STUB_MIB = 256
STUB_OUTPUT = "/run/strata-stub.json"
MiB = 1024 * 1024
# A host name the report must redact; distinctive so that a scan of the bundle finds
# it only where redaction failed.
HOSTNAME = "numa-guest-7f3a"

# The seed's trap, scaled to the guest: a pool of 240 pages (480 MiB), 60 of them held
# by a running process and 20 by an orphaned hugetlbfs file, so 160 are free; the
# arena needs 200 (400 MiB / 2 MiB) — more than is free, less than the pool.
TRAP_POOL = 240
TRAP_HELD = 60
TRAP_ORPHAN = 20
TRAP_ARENA_MIB = 400
TRAP_KV_MIB = 16
TRAP_HEADROOM_MIB = 64
# What makes it the seed's trap and not only a pool too small: the THP fallback runs the
# start short of the headroom, and the pool's free pages would cure it. The guest's own
# memory leaves far more than that, so the setup fills ordinary memory (a tmpfs file,
# which MemAvailable does not count) until MemAvailable is TRAP_AVAILABLE_MIB: arena +
# K/V + headroom less half of what the free pages give back. The start then falls short
# by half the free pages, and giving them back leaves the headroom with half to spare,
# whatever the kernel, initramfs and services take on this boot.
TRAP_FREE_MIB = (TRAP_POOL - TRAP_HELD - TRAP_ORPHAN) * 2
TRAP_AVAILABLE_MIB = TRAP_ARENA_MIB + TRAP_KV_MIB + TRAP_HEADROOM_MIB - TRAP_FREE_MIB // 2
BALLAST = "/mnt/ballast"
HOLDER = "/usr/local/bin/hugepage-holder"
HUGETLBFS = "/mnt/huge"
ORPHAN = f"{HUGETLBFS}/stale-arena"

ENGINE_UNIT = f"""\
[Unit]
Description=Strata engine stand-in (prints its own binding)

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 /strata-test/stub_engine.py {STUB_MIB}
StandardOutput=truncate:{STUB_OUTPUT}
"""


def engine_config(topology: Topology) -> str:
    """The engine's settings for a guest: small enough for its few hundred MiB per node."""
    arena = TRAP_ARENA_MIB
    if topology.name == "snc":
        # Larger than one sub-node (640 MiB) but within the socket's two.
        arena = 700
    # The trap's holder (python3) and its /mnt/huge mount are other users of the pool as the
    # doctor counts them; an operator who knows them for test stand-ins opts in, so the fix
    # still gives the pool back live (docs/checks/hugepages.md, release_pool).
    return (f"arena: {arena}MiB\nkv: {TRAP_KV_MIB}MiB\nheadroom: {TRAP_HEADROOM_MIB}MiB\nunit: {UNIT}\n"
            "release_pool: true\n")


def doctor(args: str, topology: Topology) -> str:
    """A strata-doctor command line for the guest, picking the stand-in GPU."""
    return f"strata-doctor {args} --gpu {shlex.quote(topology.gpu.address)}"


def stub_run() -> str:
    """Start the engine unit (the stub) and print what it saw of itself."""
    return f"rm -f {STUB_OUTPUT}; systemctl start {UNIT} && cat {STUB_OUTPUT}"


def status_of(selector: str) -> str:
    """Print Cpus_allowed_list of processes as JSON {comm: cpus}."""
    return (
        "python3 - <<'EOF'\n"
        "import json, os\n"
        "out = {}\n"
        f"for name in {selector!r}.split():\n"
        "    for pid in os.listdir('/proc'):\n"
        "        if not pid.isdigit():\n"
        "            continue\n"
        "        try:\n"
        "            comm = open(f'/proc/{pid}/comm').read().strip()\n"
        "            st = open(f'/proc/{pid}/status').read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if comm == name:\n"
        "            line = [x for x in st.splitlines() if x.startswith('Cpus_allowed_list')][0]\n"
        "            out[comm] = line.split(':', 1)[1].strip()\n"
        "print(json.dumps(out))\n"
        "EOF"
    )


def slice_cpus() -> str:
    """CPUs a fresh process gets in system.slice and in user.slice, and PID 1's."""
    probe = "grep Cpus_allowed_list /proc/self/status | cut -f2"
    return (
        "set -e\n"
        f"sys=$(systemd-run --quiet --wait --pipe --slice=system.slice sh -c '{probe}')\n"
        f"usr=$(systemd-run --quiet --wait --pipe --slice=user.slice sh -c '{probe}')\n"
        "init=$(grep Cpus_allowed_list /proc/1/status | cut -f2)\n"
        "eff=$(cat /sys/fs/cgroup/system.slice/cpuset.cpus.effective 2>/dev/null || true)\n"
        'printf \'{"system.slice": "%s", "user.slice": "%s", "init": "%s", '
        '"system.slice effective": "%s"}\\n\' "$sys" "$usr" "$init" "$eff"'
    )


def raw_facts() -> str:
    """What the guest kernel says, for the artifacts and for cross-checks."""
    return (
        "set +e\n"
        "numactl -H\n"
        "for n in /sys/devices/system/node/node*; do echo \"$n: cpulist=$(cat $n/cpulist) "
        "distance=$(cat $n/distance)\"; grep -E 'MemTotal|MemFree' $n/meminfo; done\n"
        "for d in /sys/bus/pci/devices/*; do echo \"$d class=$(cat $d/class) "
        "id=$(cat $d/vendor):$(cat $d/device) numa_node=$(cat $d/numa_node) "
        "local_cpulist=$(cat $d/local_cpulist) boot_vga=$(cat $d/boot_vga 2>/dev/null)\"; done\n"
        "systemctl --version | head -1; systemctl is-active systemd-oomd dbus\n"
        "grep -i huge /proc/meminfo; cat /proc/cmdline\n"
        "echo hostname=$(hostname) machine-id=$(cat /etc/machine-id)"
    )


# What fix writes to (and revert must restore): every path, mode and content.
FIX_TARGETS = "/etc/systemd /etc/sysctl.d /usr/local/bin"


def tree_state() -> str:
    """One line per path under FIX_TARGETS: type, mode, and sha256 of regular files."""
    return (
        f"find {FIX_TARGETS} -xdev \\( -type f -o -type l -o -type d \\) "
        "-printf '%y %m %p -> %l\\n' | sort | while read -r kind mode path rest; do "
        'if [ "$kind" = f ]; then echo "$kind $mode $path $(sha256sum < "$path" | cut -c1-64)"; '
        'else echo "$kind $mode $path $rest"; fi; done'
    )


def common_steps(t: Topology) -> List[Step]:
    return [
        Step("raw", raw_facts()),
        Step("check", doctor("check --format json", t)),
        Step("check-text", doctor("check -v", t)),
        Step("plan", doctor("fix --format json", t)),
    ]


def binding_steps(t: Topology, reserve: bool) -> List[Step]:
    """fix --apply, the stub bound; then fix --revert, the stub unbound again."""
    steps = [
        Step("stub-before", stub_run()),
        Step("files-before", tree_state()),
        Step("apply", doctor("fix --apply --yes", t)),
        Step("dropins-after-apply",
             f"systemctl show {UNIT} -p NUMAPolicy -p NUMAMask -p CPUAffinity -p AllowedCPUs "
             "-p Slice -p DropInPaths; sysctl vm.nr_hugepages; "
             "ls -la /etc/systemd/system/*.d/ /etc/sysctl.d/ 2>&1"),
        Step("stub-applied", stub_run()),
        Step("wrapper-applied",
             f"/usr/local/bin/strata-numa /usr/bin/python3 /strata-test/stub_engine.py {STUB_MIB}"),
        Step("check-after-apply", doctor("check --format json", t)),
        Step("apply-again", doctor("fix --apply --yes", t)),
        Step("revert", doctor("fix --revert --yes", t)),
        Step("files-after-revert", tree_state()),
        Step("stub-reverted", stub_run()),
    ]
    if reserve:
        steps += [
            Step("slices-before-reserve", slice_cpus()),
            Step("apply-reserve", doctor("fix --apply --yes --reserve-node", t)),
            Step("stub-reserved", stub_run()),
            Step("slices-reserved", slice_cpus()),
            Step("daemons-reserved", status_of("systemd-journal dbus-daemon systemd-oomd systemd-logind")),
            Step("revert-reserve", doctor("fix --revert --yes", t)),
            Step("files-after-revert-reserve", tree_state()),
            Step("slices-after-revert", slice_cpus()),
            Step("stub-after-revert", stub_run()),
        ]
    return steps


def trap_steps(t: Topology) -> List[Step]:
    """The seed's hugepage trap, for real, then a report bundle of that state."""
    setup = (
        "set -e\n"
        f"sysctl -q -w vm.nr_hugepages={TRAP_POOL}\n"
        f"mkdir -p {HUGETLBFS}; mount -t hugetlbfs -o mode=1777 none {HUGETLBFS}\n"
        # Run from a path that does not name the engine: a process whose command line
        # names `strata` (as /strata-test/ does) is taken for an engine started by hand,
        # and its hugetlb pages for the engine's own.
        f"install -m 0755 /strata-test/hugepage_holder.py {HOLDER}\n"
        f"python3 {HOLDER} file {ORPHAN} {TRAP_ORPHAN}\n"
        "systemd-run --quiet --unit=hugepage-holder /usr/bin/python3 "
        f"{HOLDER} anon {TRAP_HELD} /run/holder.ready\n"
        "for i in $(seq 100); do [ -s /run/holder.ready ] && break; sleep 0.2; done\n"
        "test -s /run/holder.ready\n"
        "avail=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)\n"
        f"ballast=$((avail - {TRAP_AVAILABLE_MIB}))\n"
        f"echo \"MemAvailable $avail MiB before the ballast of $ballast MiB\"\n"
        "if [ \"$ballast\" -gt 0 ]; then\n"
        f"  mkdir -p {BALLAST}; mount -t tmpfs -o size=${{ballast}}m none {BALLAST}\n"
        f"  dd if=/dev/zero of={BALLAST}/fill bs=1M count=$ballast status=none\n"
        "fi\n"
        "grep MemAvailable /proc/meminfo\n"
        "cat /proc/meminfo > $OUT/meminfo-trap.txt\n"
        "grep -H . /sys/devices/system/node/node*/hugepages/hugepages-2048kB/*_hugepages "
        "> $OUT/node-pools-trap.txt\n"
        "grep HugePages_ /proc/meminfo"
    )
    return [
        Step("trap-setup", setup),
        Step("check-trap", doctor("check --format json", t)),
        Step("check-trap-text", doctor("check -v hugepages oomd", t)),
        Step("report", doctor("report --format json -o $OUT/report.json "
                              "--bundle $OUT/bundle.tar.gz", t)
             + " && ls -la $OUT"),
        Step("check-bundle-live", doctor("check --format json", t)),
        # The binding steps that follow need the memory back.
        Step("ballast-off", f"! mountpoint -q {BALLAST} || umount {BALLAST}"),
    ]


def steps_for(topology: Topology) -> List[Step]:
    steps = common_steps(topology)
    if topology.name == "seed":
        steps += trap_steps(topology)
        steps += binding_steps(topology, reserve=True)
    elif topology.name in ("mirror", "memory-only", "snc"):
        steps += binding_steps(topology, reserve=False)
    return steps


def payload_for(topology: Topology) -> Payload:
    files: Dict[str, Tuple[bytes, int]] = {
        "etc/systemd/system/strata.service": (ENGINE_UNIT.encode(), 0o644),
        "etc/strata-doctor.yaml": (engine_config(topology).encode(), 0o644),
        "etc/hostname": (f"{HOSTNAME}\n".encode(), 0o644),
        "strata-test/stub_engine.py": ((HERE / "guest_files" / "stub_engine.py").read_bytes(), 0o755),
        "strata-test/hugepage_holder.py": (
            (HERE / "guest_files" / "hugepage_holder.py").read_bytes(), 0o755),
    }
    return Payload(steps_for(topology), files)


__all__ = ["TOPOLOGIES", "payload_for", "steps_for"]
