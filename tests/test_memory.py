"""Hugepage, THP and systemd-oomd facts: parsers on strings, readers on small trees."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Dict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata_doctor.config import EngineConfig
from strata_doctor.facts.cmdline import parse_grub_cmdline, parse_hugepage_cmdline
from strata_doctor.facts.engine import UnitState
from strata_doctor.facts.hugepage_pools import parse_size_dir
from strata_doctor.facts.hugepages import detect_container, format_page_size, read_hugepages
from strata_doctor.facts.hugetlbfs import parse_maps_paths
from strata_doctor.facts.meminfo import parse_meminfo, read_meminfo
from strata_doctor.facts.oomd import read_oomd
from strata_doctor.facts.oomd_conf import read_oomd_settings
from strata_doctor.facts.oomd_dump import parse_oomctl_dump, parse_percent, parse_timespan
from strata_doctor.facts.oomd_journal import parse_oomd_journal
from strata_doctor.facts.oomd_units import cgroup_units, parse_proc_cgroup, slice_path
from strata_doctor.facts.parse import format_count, parse_mounts, parse_size
from strata_doctor.facts.pressure import parse_pressure
from strata_doctor.facts.processes import read_processes
from strata_doctor.facts.sysctl import normalize_sysctl_key, parse_sysctl_conf, read_sysctl_config
from strata_doctor.facts.thp import read_thp
from strata_doctor.facts.unitfile import parse_ini
from strata_doctor.facts.units import unit_file_paths
from strata_doctor.root import Root
from strata_doctor.rules.pool import HugepageNeed, assess_pool
from strata_doctor.rules.trap import CHAIN
from tests.conftest import SHARED, write_tree

GIB = 1024**3
MIB = 1024**2


# -- the engine's need ------------------------------------------------------------------
def test_seed_need_is_23983_pages_with_the_arithmetic_shown() -> None:
    need = HugepageNeed(parse_size("46.84GiB"), 2 * MIB)
    assert need.pages == 23_983
    assert need.arithmetic == "46.84 GiB / 2 MiB → 23,983 pages"


@given(st.integers(min_value=1, max_value=2**50), st.sampled_from([4096, 64 * 1024, 2 * MIB, GIB]))
def test_need_is_the_ceiling(arena: int, page: int) -> None:
    need = HugepageNeed(arena, page)
    assert (need.pages - 1) * page < arena <= need.pages * page


def test_page_sizes_and_counts_read_as_people_say_them() -> None:
    assert format_page_size(2 * MIB) == "2 MiB"
    assert format_page_size(GIB) == "1 GiB"
    assert format_page_size(64 * 1024) == "64 KiB"
    assert format_count(24000) == "24,000"
    assert parse_size_dir("hugepages-2048kB") == 2 * MIB
    assert parse_size_dir("hugepages-1048576kB") == GIB
    assert parse_size_dir("hugepages") is None
    assert "→" in CHAIN and CHAIN.index("hugepage trap") < CHAIN.index("oomd kill") < CHAIN.index("restart")


# -- meminfo and mounts: property tests ---------------------------------------------------------
_KEY = st.from_regex(r"[A-Za-z][A-Za-z0-9_()]{0,20}", fullmatch=True)


@given(st.dictionaries(_KEY, st.tuples(st.integers(0, 2**40), st.booleans()), max_size=30))
def test_meminfo_round_trip(values: Dict[str, tuple]) -> None:  # type: ignore[type-arg]
    text = "".join(
        f"{k}:{' ' * (16 - len(k) % 8)}{v}{' kB' if kb else ''}\n" for k, (v, kb) in values.items()
    )
    parsed = parse_meminfo(text)
    assert parsed == {k: v * 1024 if kb else v for k, (v, kb) in values.items()}


@given(st.text(max_size=200))
def test_meminfo_never_raises(text: str) -> None:
    parse_meminfo(text)


def test_meminfo_node_prefix_and_nul_padding() -> None:
    text = "Node 1 MemTotal:       67108864 kB\nNode 1 HugePages_Total: 12000\n\0\0"
    assert parse_meminfo(text) == {"MemTotal": 64 * GIB, "HugePages_Total": 12000}


_PATH_PART = st.text(
    st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters="/\\"), min_size=1, max_size=12
)


@given(
    st.lists(
        st.tuples(
            st.lists(_PATH_PART, min_size=1, max_size=4),
            st.sampled_from(["hugetlbfs", "ext4", "tmpfs", "cgroup2"]),
            st.sampled_from(["rw,relatime", "rw,relatime,pagesize=2M", "ro,nosuid"]),
        ),
        max_size=10,
    )
)
def test_mounts_round_trip_with_octal_escapes(rows: list) -> None:  # type: ignore[type-arg]
    def escape(text: str) -> str:
        return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in text)

    lines = []
    expected = []
    for parts, fstype, options in rows:
        mount_point = "/" + "/".join(parts)
        lines.append(f"none {escape(mount_point)} {fstype} {options} 0 0")
        expected.append(("none", mount_point, fstype, options))
    assert parse_mounts("\n".join(lines) + "\n") == expected


@given(st.text(max_size=300))
def test_mounts_never_raise(text: str) -> None:
    parse_mounts(text)


# -- sysctl.d, the kernel command line, maps ---------------------------------------------------
def test_sysctl_conf_lines() -> None:
    text = "# c\n; c\nvm.nr_hugepages = 24000\n-vm.swappiness=10\nvm/overcommit_memory = 1\nnot a line\n"
    assert parse_sysctl_conf(text) == [
        ("vm.nr_hugepages", "24000"),
        ("vm.swappiness", "10"),
        ("vm.overcommit_memory", "1"),
    ]
    assert normalize_sysctl_key("net/ipv4/conf/eth0.100/forwarding") == "net.ipv4.conf.eth0/100.forwarding"
    assert normalize_sysctl_key("net.ipv4.ip_forward") == "net.ipv4.ip_forward"


@given(st.text(max_size=300))
def test_sysctl_conf_never_raises(text: str) -> None:
    parse_sysctl_conf(text)


def test_hugepage_cmdline() -> None:
    c = parse_hugepage_cmdline(
        "BOOT_IMAGE=/vmlinuz ro default_hugepagesz=2M hugepagesz=1G hugepages=4 "
        "hugepagesz=2M hugepages=1:23983,0:0 transparent_hugepage=madvise\n"
    )
    assert c.default_size == 2 * MIB
    assert c.pools == ((GIB, None, 4), (2 * MIB, 1, 23983), (2 * MIB, 0, 0))
    assert c.count_for(2 * MIB, 2 * MIB) == 23983
    assert c.node_counts(2 * MIB, 2 * MIB) == {1: 23983, 0: 0}
    assert c.thp == "madvise"
    plain = parse_hugepage_cmdline("hugepages=24000")
    assert plain.count_for(2 * MIB, 2 * MIB) == 24000
    assert parse_hugepage_cmdline("").count_for(2 * MIB, 2 * MIB) is None
    grub = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX="hugepages=1:10"\n'
    assert parse_grub_cmdline(grub) == "quiet splash hugepages=1:10"


@given(st.text(max_size=300))
def test_cmdline_never_raises(text: str) -> None:
    parse_hugepage_cmdline(text)


def test_maps_paths_skip_deleted_and_anonymous() -> None:
    text = (
        "7f0000000000-7f0400000000 rw-s 00000000 00:2f 12345    /dev/hugepages/arena\n"
        "7f0400000000-7f0500000000 rw-s 00000000 00:2f 12346    /dev/hugepages/gone (deleted)\n"
        "7f0500000000-7f0500001000 rw-p 00000000 00:00 0 \n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0          [stack]\n"
        "7f0600000000-7f0600001000 r--p 00000000 08:01 99         /opt/with\\040space\n"
    )
    assert parse_maps_paths(text) == {"/dev/hugepages/arena", "/opt/with space"}


# -- oomd parsers ---------------------------------------------------------------------------------
def test_percent_and_timespan() -> None:
    assert parse_percent("50%") == 50.0
    assert parse_percent("50.00%") == 50.0
    assert parse_percent("50") is None
    assert parse_timespan("20s") == 20.0
    assert parse_timespan("1min 30s") == 90.0
    assert parse_timespan("30") == 30.0
    assert parse_timespan("soon") is None


@given(st.text(max_size=80))
def test_timespan_and_percent_never_raise(text: str) -> None:
    parse_timespan(text)
    parse_percent(text)


def test_pressure() -> None:
    rows = parse_pressure(
        "some avg10=0.10 avg60=2.00 avg300=3.85 total=15\nfull avg10=0.20 avg60=3.00 avg300=4.95 total=25\n"
    )
    assert [(p.kind, p.avg10, p.avg300, p.total) for p in rows] == [
        ("some", 0.10, 3.85, 15),
        ("full", 0.20, 4.95, 25),
    ]
    assert parse_pressure("some avg10=x\n") == ()


@given(st.text(max_size=200))
def test_pressure_never_raises(text: str) -> None:
    parse_pressure(text)


OOMCTL_DUMP = """Dry Run: no
Swap Used Limit: 90.00%
Default Memory Pressure Limit: 60.00%
Default Memory Pressure Duration: 20s
System Context:
\tMemory: Used: 95.2G, Total: 125.8G
\tSwap: Used: 370.0M, Total: 8.0G
Swap Monitored CGroups:
\tPath: /
\t\tSwap Usage: (see System Context)
Memory Pressure Monitored CGroups:
\tPath: /user.slice/user-1000.slice/user@1000.service
\t\tMemory Pressure Limit: 50.00%
\t\tMemory Pressure Duration: 20s
\t\tPressure: Avg10: 0.00, Avg60: 0.00, Avg300: 0.00, Total: 2s
\t\tCurrent Memory Usage: 5.6G
\t\tMemory Min: 0B
\t\tMemory Low: 0B
\t\tPgscan: 0
\t\tLast Pgscan: 0
"""


def test_oomctl_dump() -> None:
    dump = parse_oomctl_dump(OOMCTL_DUMP)
    assert (dump.swap_used_limit, dump.pressure_limit, dump.pressure_duration) == (90.0, 60.0, 20.0)
    assert [(w.path, w.kind, w.limit, w.duration) for w in dump.watched] == [
        ("/", "swap", None, None),
        ("/user.slice/user-1000.slice/user@1000.service", "memory-pressure", 50.0, 20.0),
    ]
    assert parse_oomctl_dump("").watched == ()


def test_oomd_journal_old_and_new_kill_lines() -> None:
    text = (
        "-- Journal begins at Mon 2026-11-23 08:00:00 CET. --\n"
        "2026-11-28T21:14:03+0100 box systemd-oomd[912]: Killed /system.slice/strata.service due to "
        "memory pressure for /system.slice being 81.20% > 50.00% for > 20s with reclaim activity\n"
        "2026-11-28T21:20:00+0100 box systemd-oomd[912]: Marked /user.slice/user-1000.slice/"
        "user@1000.service/app.slice/app-x.scope for killing due to memory pressure for "
        "/user.slice/user-1000.slice/user@1000.service being 61.00% > 50.00% for > 20s "
        "with reclaim activity\n"
        "2026-11-28T21:21:00+0100 box systemd-oomd[912]: Considered 3 cgroups for killing, "
        "top candidates were:\n"
    )
    kills = parse_oomd_journal(text)
    assert [(k.time, k.cgroup) for k in kills] == [
        ("2026-11-28T21:14:03+0100", "/system.slice/strata.service"),
        ("2026-11-28T21:20:00+0100", "/user.slice/user-1000.slice/user@1000.service/app.slice/app-x.scope"),
    ]
    assert kills[0].reason.startswith("memory pressure for /system.slice being 81.20%")


def test_cgroup_paths_and_units() -> None:
    assert parse_proc_cgroup("0::/system.slice/strata.service\n") == ("/system.slice/strata.service", False)
    assert parse_proc_cgroup("12:memory:/x\n1:name=systemd:/x\n0::/\n") == ("/", True)
    assert cgroup_units("/system.slice/strata.service") == [
        ("strata.service", "/system.slice/strata.service"),
        ("system.slice", "/system.slice"),
        ("-.slice", "/"),
    ]
    user = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-strata.scope"
    assert [u for u, _ in cgroup_units(user)] == [
        "app-strata.scope",
        "app.slice",
        "user@1000.service",
        "user-1000.slice",
        "user.slice",
        "-.slice",
    ]
    assert slice_path("user-1000.slice") == "/user.slice/user-1000.slice"
    assert slice_path("system.slice") == "/system.slice"
    assert slice_path("-.slice") == ""
    assert parse_ini("[OOM]\nSwapUsedLimit=80%\n# x\n") == [("OOM", "SwapUsedLimit", "80%")]


# -- readers on trees ------------------------------------------------------------------------------
def _pool_files(
    base: str, total: int, free: int, resv: int = 0, surp: int = 0, over: int = 0
) -> Dict[str, str]:
    return {
        f"{base}/nr_hugepages": f"{total}\n",
        f"{base}/free_hugepages": f"{free}\n",
        f"{base}/resv_hugepages": f"{resv}\n",
        f"{base}/surplus_hugepages": f"{surp}\n",
        f"{base}/nr_overcommit_hugepages": f"{over}\n",
    }


def test_read_hugepages_every_size_and_node(tmp_path: Path) -> None:
    files = {
        "/proc/meminfo": "MemTotal: 131941376 kB\nHugePages_Total: 24000\nHugePages_Free: 15779\n"
        "HugePages_Rsvd: 0\nHugePages_Surp: 0\nHugepagesize: 2048 kB\nHugetlb: 53346304 kB\n",
        "/proc/sys/vm/nr_hugepages": "24000\n",
        "/proc/sys/vm/nr_overcommit_hugepages": "0\n",
        **_pool_files("/sys/kernel/mm/hugepages/hugepages-2048kB", 24000, 15779),
        **_pool_files("/sys/kernel/mm/hugepages/hugepages-1048576kB", 4, 4),
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages": "12000\n",
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages": "3779\n",
        "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages": "12000\n",
        "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages": "12000\n",
    }
    root = Root(write_tree(tmp_path, files))
    facts = read_hugepages(root, (), read_meminfo(root))
    assert [(p.size, p.total, p.free) for p in facts.pools] == [(2 * MIB, 24000, 15779), (GIB, 4, 4)]
    assert facts.default_pool is not None and facts.default_pool.used == 8221
    assert [(n.node, n.total, n.free) for n in facts.nodes_of(2 * MIB)] == [
        (0, 12000, 3779),
        (1, 12000, 12000),
    ]
    assert facts.hugetlb_bytes == 53346304 * 1024
    a = assess_pool(facts, EngineConfig(arena_bytes=parse_size("46.84GiB")), None)
    assert (a.available, a.missing, a.fails, a.trap, a.relies_on_thp) == (15779, 8204, True, True, True)
    assert not assess_pool(
        facts, EngineConfig(arena_bytes=parse_size("46.84GiB"), hugepages="hugetlb"), None
    ).trap


def test_read_hugepages_from_meminfo_alone(tmp_path: Path) -> None:
    """Old kernels and trimmed captures: no /sys/kernel/mm/hugepages."""
    root = Root(
        write_tree(
            tmp_path,
            {
                "/proc/meminfo": "MemTotal: 1000 kB\nHugePages_Total: 10\n"
                "HugePages_Free: 10\nHugepagesize: 2048 kB\n"
            },
        )
    )
    facts = read_hugepages(root, (), read_meminfo(root))
    assert [(p.total, p.free, p.source) for p in facts.pools] == [(10, 10, "/proc/meminfo")]


def test_read_hugepages_on_an_empty_tree(tmp_path: Path) -> None:
    root = Root(tmp_path)
    facts = read_hugepages(root, (), read_meminfo(root))
    assert facts.pools == () and facts.mounts == () and facts.default_pool is None
    assert ("/proc/meminfo", "missing") in facts.unreadable
    assert read_thp(root, read_meminfo(root)).available is False


def test_hugetlbfs_orphans_and_holders(tmp_path: Path) -> None:
    files = {
        "/proc/mounts": "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"
        "none /mnt/huge\\0401G hugetlbfs rw,pagesize=1024M 0 0\n",
        "/dev/hugepages/live": "",
        "/dev/hugepages/sub/stale": "",
        "/mnt/huge 1G/empty-dir-marker": "",
        "/.strata-doctor/stat.json": json.dumps(
            {"/dev/hugepages/sub/stale": {"size": 4 * MIB, "uid": 1000, "mode": 0o100600}}
        ),
        "/etc/passwd": "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
        "/proc/42/status": "Name:\tengine\nPPid:\t1\nUid:\t0\t0\t0\t0\nHugetlbPages:\t  20480 kB\n",
        "/proc/42/maps": "7f00-7f01 rw-s 00000000 00:2f 1 /dev/hugepages/live\n",
        "/proc/43/status": "Name:\tbash\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\n",
        "/proc/43/maps": "",
    }
    root = Root(write_tree(tmp_path, files))
    facts = read_hugepages(root, read_processes(root), read_meminfo(root))
    assert [(h.pid, h.name, h.bytes) for h in facts.holders] == [(42, "engine", 20 * MIB)]
    mounts = {m.mount_point: m for m in facts.mounts}
    assert set(mounts) == {"/dev/hugepages", "/mnt/huge 1G"}
    assert mounts["/dev/hugepages"].page_size == 2 * MIB and mounts["/mnt/huge 1G"].page_size == GIB
    by_path = {f.path: f for f in facts.files}
    assert by_path["/dev/hugepages/live"].mapped_by == (42,)
    stale = by_path["/dev/hugepages/sub/stale"]
    assert (stale.orphan, stale.size, stale.uid, stale.owner) == (True, 4 * MIB, 1000, "alice")
    assert "/dev/hugepages/sub/stale" in {f.path for f in facts.orphans}


def test_sysctl_d_order_and_override(tmp_path: Path) -> None:
    files = {
        "/usr/lib/sysctl.d/50-default.conf": "vm.nr_hugepages = 1\n",
        "/usr/lib/sysctl.d/60-strata-doctor.conf": "vm.nr_hugepages = 2\n",  # hidden by /etc
        "/etc/sysctl.d/60-strata-doctor.conf": "vm.nr_hugepages = 0\n",
        "/run/sysctl.d/70-run.conf": "vm.swappiness = 10\n",
        "/etc/sysctl.d/80-masked.conf": "->/dev/null",
        "/usr/lib/sysctl.d/80-masked.conf": "vm.nr_hugepages = 9\n",
        "/etc/sysctl.d/99-sysctl.conf": "->../sysctl.conf",
        "/etc/sysctl.conf": "vm.nr_hugepages = 24000\n",
        "/etc/sysctl.d/README": "vm.nr_hugepages = 7\n",
    }
    config = read_sysctl_config(Root(write_tree(tmp_path, files)))
    assert config.files == (
        "/usr/lib/sysctl.d/50-default.conf",
        "/etc/sysctl.d/60-strata-doctor.conf",
        "/run/sysctl.d/70-run.conf",
        "/etc/sysctl.conf",
    )
    assert [s.value for s in config.setters("vm.nr_hugepages")] == ["1", "0", "24000"]
    assert config.int_value("vm.nr_hugepages") == 24000


def test_detect_container(tmp_path: Path) -> None:
    assert (
        detect_container(Root(write_tree(tmp_path / "a", {"/run/systemd/container": "docker\n"}))) == "docker"
    )
    assert detect_container(Root(write_tree(tmp_path / "b", {"/.dockerenv": ""}))) == "docker"
    assert (
        detect_container(Root(write_tree(tmp_path / "c", {"/proc/1/environ": "PATH=/x\0container=podman\0"})))
        == "podman"
    )
    assert detect_container(Root(write_tree(tmp_path / "d", {"/proc/1/cgroup": "0::/init.scope\n"}))) is None


def test_read_thp(tmp_path: Path) -> None:
    thp = "/sys/kernel/mm/transparent_hugepage"
    files = {
        f"{thp}/enabled": "always madvise [never]\n",
        f"{thp}/defrag": "[always] defer defer+madvise madvise never\n",
        f"{thp}/shmem_enabled": "always within_size advise [never] deny force\n",
        f"{thp}/khugepaged/defrag": "1\n",
        "/proc/meminfo": "AnonHugePages: 2048 kB\n",
        "/etc/default/grub": 'GRUB_CMDLINE_LINUX="transparent_hugepage=madvise"\n',
    }
    root = Root(write_tree(tmp_path, files))
    facts = read_thp(root, read_meminfo(root))
    assert (facts.enabled, facts.defrag, facts.shmem_enabled, facts.khugepaged_defrag) == (
        "never",
        "always",
        "never",
        1,
    )
    assert facts.anon_huge_bytes == 2 * MIB
    assert facts.configured == (("/etc/default/grub", "madvise"),)


def test_oomd_settings_and_unit_dropins(tmp_path: Path) -> None:
    files = {
        "/usr/lib/systemd/oomd.conf": "[OOM]\nSwapUsedLimit=80%\n",
        "/usr/lib/systemd/oomd.conf.d/10-oomd-defaults.conf": "[OOM]\nDefaultMemoryPressureDurationSec=20s\n",
        "/etc/systemd/oomd.conf.d/20-local.conf": "[OOM]\nDefaultMemoryPressureLimit=50%\n",
        "/usr/lib/systemd/system/user@.service": "[Service]\nExecStart=/usr/lib/systemd/systemd --user\n",
        "/usr/lib/systemd/system/user@.service.d/10-oomd-user-service-defaults.conf": (
            "[Service]\nManagedOOMMemoryPressure=kill\nManagedOOMMemoryPressureLimit=50%\n"
        ),
        "/etc/systemd/system/user@1000.service.d/10-oomd-user-service-defaults.conf": "[Service]\n",
        "/usr/lib/systemd/system/user-.slice.d/10-defaults.conf": "[Slice]\nTasksMax=33%\n",
    }
    root = Root(write_tree(tmp_path, files))
    settings = read_oomd_settings(root)
    assert (settings.swap_used_limit, settings.pressure_limit, settings.pressure_duration) == (
        80.0,
        50.0,
        20.0,
    )
    # The instance's drop-in of the same name replaces the template's.
    assert unit_file_paths(root, "user@1000.service") == [
        "/usr/lib/systemd/system/user@.service",
        "/etc/systemd/system/user@1000.service.d/10-oomd-user-service-defaults.conf",
    ]
    assert unit_file_paths(root, "user-1000.slice") == [
        "/usr/lib/systemd/system/user-.slice.d/10-defaults.conf"
    ]


def test_read_oomd_without_systemd_says_why(tmp_path: Path) -> None:
    root = Root(write_tree(tmp_path, {"/proc/meminfo": "SwapTotal: 0 kB\nSwapFree: 0 kB\n"}))
    facts = read_oomd(root, UnitState("strata.service", (), False, "systemctl not found (no systemd)"), None,
                      read_meminfo(root))
    assert not facts.systemd and not facts.active
    assert facts.engine_cgroup is None and facts.units == ()
    assert "PSI" in facts.pressure_reason
    assert facts.journal_reason == "journalctl not found"


# -- the prometheus/procfs snapshot: real nr_hugepages and pressure files -------------------------
PROCFS = SHARED / "corpus" / "procfs" / "prometheus-procfs-fixtures.tar.gz"


@pytest.mark.corpus
@pytest.mark.skipif(not PROCFS.is_file(), reason="../shared/corpus/procfs is absent")
def test_prometheus_procfs_snapshot(tmp_path: Path) -> None:
    with tarfile.open(PROCFS) as archive:
        members = [
            m
            for m in archive.getmembers()
            if not m.name.startswith(("/", ".."))
            and ".." not in Path(m.name).parts
            and (m.isfile() or m.isdir() or m.issym())
        ]
        archive.extractall(tmp_path, members=members)
    base = tmp_path / "fixtures"
    root = Root(base)
    facts = read_hugepages(root, read_processes(root), read_meminfo(root))
    assert facts.nr_hugepages == int((base / "proc/sys/vm/nr_hugepages").read_text())
    assert facts.nr_overcommit == int((base / "proc/sys/vm/nr_overcommit_hugepages").read_text())
    assert facts.mem("HugePages_Total") == 0 and facts.default_size == 2 * MIB
    assert facts.default_pool is not None and facts.default_pool.total == 0
    oomd = read_oomd(root, UnitState("strata.service", (), False, "not captured"), None, read_meminfo(root))
    some, full = oomd.pressure_of("some"), oomd.pressure_of("full")
    assert some is not None and full is not None
    assert (some.avg10, some.avg60, some.avg300, some.total) == (0.10, 2.00, 3.85, 15)
    assert (full.avg10, full.total) == (0.20, 25)
    assert oomd.pressure_reason == ""
