"""The hugepages, transparent-hugepages and oomd checks on small trees and on the fixture hosts.

The trees here model the seed box's trap (pool 24,000, 8,221 taken, oomd killing the
engine in a loop) and its variants; the same expectations run on the hand-made fixture
hosts in ``tests/fixtures/hosts/`` when those are present.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from strata_doctor.model import Severity
from strata_doctor.registry import run_checks
from strata_doctor.rules.trap import CHAIN
from tests.conftest import HOSTS, copy_host, run_cli, two_node_files, write_tree

MIB = 1024**2
C = "/.strata-doctor/commands"
HP = "/sys/kernel/mm/hugepages/hugepages-2048kB"
THP = "/sys/kernel/mm/transparent_hugepage"
SEED_SUMMARY = "pool 24,000, free 15,779, needed 23,983"

OOMD_ACTIVE = "Id=systemd-oomd.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
DUMP_SYSTEM = """Dry Run: no
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
\tPath: /system.slice
\t\tMemory Pressure Limit: 50.00%
\t\tMemory Pressure Duration: 20s
\t\tPressure: Avg10: 62.10, Avg60: 40.00, Avg300: 12.00, Total: 2min 3s
\t\tCurrent Memory Usage: 80.1G
"""
KILLS = (
    "2026-11-28T21:14:03+0100 seedbox systemd-oomd[912]: Killed /system.slice/strata.service due to "
    "memory pressure for /system.slice being 81.20% > 50.00% for > 20s with reclaim activity\n"
    "2026-11-28T21:16:40+0100 seedbox systemd-oomd[912]: Killed /system.slice/strata.service due to "
    "memory pressure for /system.slice being 77.02% > 50.00% for > 20s with reclaim activity\n"
)


def _unit(**props: str) -> str:
    base = {
        "Id": "strata.service",
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "running",
        "Result": "success",
        "NRestarts": "0",
        "MainPID": "0",
        "ControlGroup": "",
        "Slice": "system.slice",
        "ManagedOOMMemoryPressure": "auto",
        "ManagedOOMSwap": "auto",
        "ManagedOOMPreference": "none",
        "NUMAPolicy": "",
        "NUMAMask": "",
        "CPUAffinity": "",
        "AllowedCPUs": "",
    }
    base.update(props)
    return "".join(f"{k}={v}\n" for k, v in base.items())


def _pool(node_counts: Dict[int, tuple], surplus: int = 0, overcommit: int = 0) -> Dict[str, str]:  # type: ignore[type-arg]
    total = sum(t for t, _ in node_counts.values())
    free = sum(f for _, f in node_counts.values())
    files = {
        f"{HP}/nr_hugepages": f"{total}\n",
        f"{HP}/free_hugepages": f"{free}\n",
        f"{HP}/resv_hugepages": "0\n",
        f"{HP}/surplus_hugepages": f"{surplus}\n",
        f"{HP}/nr_overcommit_hugepages": f"{overcommit}\n",
        "/proc/sys/vm/nr_hugepages": f"{total}\n",
        "/proc/sys/vm/nr_overcommit_hugepages": f"{overcommit}\n",
    }
    for node, (t, f) in node_counts.items():
        d = f"/sys/devices/system/node/node{node}/hugepages/hugepages-2048kB"
        files.update(
            {f"{d}/nr_hugepages": f"{t}\n", f"{d}/free_hugepages": f"{f}\n", f"{d}/surplus_hugepages": "0\n"}
        )
    return files


def seed_box(
    pool: Optional[Dict[int, tuple]] = None,  # type: ignore[type-arg]
    orphan_pages: int = 8221,
    looping: bool = True,
    mode: str = "auto",
    thp: str = "always [madvise] never",
    defrag: str = "always defer defer+madvise [madvise] never",
    oomd: Optional[str] = OOMD_ACTIVE,
    dump: Optional[str] = DUMP_SYSTEM,
    journal: Optional[str] = KILLS,
    extra: Optional[Dict[str, str]] = None,
    node_gib: int = 64,
) -> Dict[str, str]:
    """The seed box as a small tree: two nodes, GPU on node 1, the engine in strata.service."""
    pool = {0: (12000, 3779), 1: (12000, 12000)} if pool is None else pool
    total = sum(t for t, _ in pool.values())
    free = sum(f for _, f in pool.values())
    files = two_node_files()
    node = "/sys/devices/system/node"
    for n in (0, 1):
        files[f"{node}/node{n}/meminfo"] = (
            f"Node {n} MemTotal:       {node_gib * 1048576} kB\n"
            f"Node {n} MemFree:        {node_gib * 1048576 // 2} kB\n"
        )
    files.update(
        {
            "/proc/meminfo": (
                "MemTotal:       131941376 kB\nMemFree:        40000000 kB\nMemAvailable:   "
                f"{131941376 - total * 2048 - 6 * 1048576} kB\n"
                "SwapTotal:       8388604 kB\nSwapFree:        8000000 kB\nAnonHugePages:   2048 kB\n"
                f"HugePages_Total:   {total}\nHugePages_Free:    {free}\nHugePages_Rsvd:        0\n"
                f"HugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:        {total * 2048} kB\n"
            ),
            **_pool(pool),
            f"{THP}/enabled": thp + "\n",
            f"{THP}/defrag": defrag + "\n",
            f"{THP}/shmem_enabled": "always within_size advise [never] deny force\n",
            f"{THP}/khugepaged/defrag": "1\n",
            "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
            "/proc/pressure/memory": (
                "some avg10=62.10 avg60=40.00 avg300=12.00 total=123456789\n"
                "full avg10=55.00 avg60=30.00 avg300=9.00 total=99999999\n"
            ),
            "/proc/mounts": (
                "sysfs /sys sysfs rw,nosuid 0 0\n"
                "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"
            ),
            "/etc/passwd": "root:x:0:0::/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n",
            "/etc/strata-doctor.yaml": f"arena: 46.84GiB\nkv: 3.09GiB\nhugepages: {mode}\n",
            f"{C}/systemctl-show-system.slice.txt": (
                "Id=system.slice\nLoadState=loaded\nActiveState=active\nManagedOOMMemoryPressure=kill\n"
                "ManagedOOMSwap=auto\nManagedOOMPreference=none\n"
            ),
            f"{C}/systemctl-show--.slice.txt": (
                "Id=-.slice\nLoadState=loaded\nActiveState=active\nManagedOOMMemoryPressure=auto\n"
                "ManagedOOMSwap=kill\nManagedOOMPreference=none\n"
            ),
            "/etc/systemd/oomd.conf": "[OOM]\nDefaultMemoryPressureDurationSec=20s\n",
        }
    )
    if total:
        files["/etc/sysctl.d/50-hugepages.conf"] = f"# for the engine\nvm.nr_hugepages = {total}\n"
    if orphan_pages:
        files["/dev/hugepages/strata-arena.old"] = ""
        stat = {"size": orphan_pages * 2 * MIB, "uid": 1000, "mode": 0o100600}
        files["/.strata-doctor/stat.json"] = json.dumps({"/dev/hugepages/strata-arena.old": stat})
    if looping:
        files[f"{C}/systemctl-show-strata.service.txt"] = _unit(
            ActiveState="activating", SubState="auto-restart", Result="oom-kill", NRestarts="17"
        )
    else:
        files[f"{C}/systemctl-show-strata.service.txt"] = _unit(
            MainPID="4242", ControlGroup="/system.slice/strata.service"
        )
        files.update(
            {
                "/proc/4242/status": "Name:\tpython3\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\n"
                "Cpus_allowed_list:\t4-7\nMems_allowed_list:\t0-1\n",
                "/proc/4242/stat": "4242 (python3) S 1 " + "0 " * 40 + "\n",
                "/proc/4242/cgroup": "0::/system.slice/strata.service\n",
                "/proc/4242/numa_maps": (
                    "7f0000000000 prefer:1 anon=13088768 dirty=13088768 N1=13088768 kernelpagesize_kB=4\n"
                ),
                "/proc/4242/cmdline": "python3\0serve/server.py\0",
            }
        )
    if oomd is not None:
        files[f"{C}/systemctl-show-systemd-oomd.service.txt"] = oomd
    if dump is not None:
        files[f"{C}/oomctl-dump.txt"] = dump
    if journal is not None:
        files[f"{C}/journalctl-oomd.txt"] = journal
    files.update(extra or {})
    return files


def check(tmp_path: Path, files: Dict[str, str], *args: str) -> Dict[str, Any]:
    """Run ``check --format json`` on a tree; returns the JSON with ``by_id`` added."""
    root = write_tree(tmp_path / "host", files)
    result = run_cli(["check", "--root", str(root), "--format", "json", *args])
    data: Dict[str, Any] = json.loads(result.stdout)
    data["by_id"] = {}
    for f in data["findings"]:
        data["by_id"].setdefault(f"{f['check']}/{f['id']}", f)
    data["rc"] = result.exit_code
    return data


def findings(data: Dict[str, Any], check_id: str) -> List[Dict[str, Any]]:
    return [f for f in data["findings"] if f["check"] == check_id]


def status(data: Dict[str, Any], check_id: str) -> str:
    return next(c["status"] for c in data["checks"] if c["id"] == check_id)


# -- the seed's trap ------------------------------------------------------------------------
def test_seed_trap_is_one_chain_with_the_numbers_and_exits_1(tmp_path: Path) -> None:
    data = check(tmp_path, seed_box())
    assert data["rc"] == 1
    trap = data["by_id"]["hugepages/trap"]
    assert trap["severity"] == "error"
    assert SEED_SUMMARY in trap["summary"]
    assert "46.84 GiB / 2 MiB → 23,983 pages" in trap["summary"]
    assert "46.88 GiB" in trap["summary"]
    assert "oomd/trap-chain" in trap["detail"] and CHAIN in trap["detail"]
    assert "Projected after the start" in trap["detail"]
    fix = trap["fix"]
    assert [f["path"] for f in fix["files"]] == ["/etc/sysctl.d/60-strata-doctor.conf"]
    assert fix["actions"] == [{"kind": "sysctl", "target": "vm.nr_hugepages", "value": "0"}]

    oomd = findings(data, "oomd")
    assert [f["id"] for f in oomd] == ["trap-chain"], "the chain replaces a separate exposure finding"
    chain = oomd[0]
    assert chain["severity"] == "error"
    assert CHAIN in chain["summary"] and SEED_SUMMARY in chain["summary"]
    assert "NRestarts=17" in chain["summary"] and "2 kills" in chain["summary"]
    steps = [
        chain["detail"].index(s)
        for s in (
            "1. Hugepage trap",
            "2. THP fallback",
            "3. Memory pressure",
            "4. oomd kill",
            "5. Restart loop",
        )
    ]
    assert steps == sorted(steps)
    assert (
        chain["fix"]["files"][0]["path"] == "/etc/systemd/system/strata.service.d/60-strata-doctor-oomd.conf"
    )
    assert chain["fix"]["files"][0]["template"] == "oomd-dropin.conf.j2"

    orphans = data["by_id"]["hugepages/orphans"]
    assert orphans["severity"] == "warning"
    assert "/dev/hugepages/strata-arena.old (16.06 GiB, 8,221 pages, alice (uid 1000))" in orphans["summary"]
    assert data["by_id"]["transparent-hugepages/madvise"]["severity"] == "ok"


def test_seed_trap_text_output_shows_the_chain_once(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "host", seed_box())
    out = run_cli(["check", "--root", str(root)], env={"NO_COLOR": "1"}).stdout
    assert out.count(CHAIN) == 1
    assert out.index("hugepages") < out.index("oomd")


def test_fix_data_for_the_templates(tmp_path: Path) -> None:
    from strata_doctor.config import load_config
    from strata_doctor.context import HostContext
    from strata_doctor.registry import builtin_checks
    from strata_doctor.root import Root

    root = Root(write_tree(tmp_path / "host", seed_box()))
    ctx = HostContext(root, load_config(root, None))
    results = run_checks(ctx, [c for c in builtin_checks() if c.id in ("hugepages", "oomd")])
    fixes = {f"{f.check}/{f.id}": f.fix for r in results for f in r.findings if f.fix}
    sysctl = dict(fixes["hugepages/trap"].files[0].context)  # type: ignore[union-attr]
    assert sysctl["finding"] == "hugepages/trap"
    assert sysctl["settings"] == (
        ("vm.nr_hugepages", "0", "MAP_HUGETLB cannot get the arena; the engine runs on THP"),
    )
    dropin = dict(fixes["oomd/trap-chain"].files[0].context)  # type: ignore[union-attr]
    assert dropin == {"unit": "strata.service", "finding": "oomd/trap-chain"}


def test_fixed_box_passes(tmp_path: Path) -> None:
    """Pool 0, the engine running, oomd watching only the desktop sessions (user@.service)."""
    dump = DUMP_SYSTEM.split("Memory Pressure Monitored CGroups:")[0].replace(
        "Swap Monitored CGroups:\n\tPath: /\n\t\tSwap Usage: (see System Context)\n",
        "Swap Monitored CGroups:\n",
    )
    files = seed_box(
        pool={0: (0, 0), 1: (0, 0)},
        orphan_pages=0,
        looping=False,
        dump=dump
        + (
            "Memory Pressure Monitored CGroups:\n\tPath: /user.slice/user-1000.slice/user@1000.service\n"
            "\t\tMemory Pressure Limit: 50.00%\n"
        ),
        journal=KILLS,
    )
    files[f"{C}/systemctl-show-system.slice.txt"] = (
        "Id=system.slice\nLoadState=loaded\nManagedOOMMemoryPressure=auto\n"
    )
    files[f"{C}/systemctl-show--.slice.txt"] = "Id=-.slice\nLoadState=loaded\nManagedOOMSwap=auto\n"
    data = check(tmp_path, files)
    assert [f["id"] for f in findings(data, "hugepages")] == ["no-pool"]
    assert status(data, "hugepages") == "ok"
    assert [f["id"] for f in findings(data, "oomd")] == ["not-watched"]
    assert status(data, "oomd") == "ok"
    assert status(data, "transparent-hugepages") == "ok"


def test_fixed_pool_but_engine_still_watched_is_a_warning_not_an_error(tmp_path: Path) -> None:
    data = check(tmp_path, seed_box(pool={0: (0, 0), 1: (0, 0)}, orphan_pages=0, looping=False))
    exposed = data["by_id"]["oomd/exposed"]
    assert exposed["severity"] == "warning"
    assert "/system.slice for memory pressure > 50% for 20s" in exposed["summary"]
    assert "2 earlier kills" in exposed["detail"]
    assert exposed["fix"]["files"][0]["template"] == "oomd-dropin.conf.j2"


def test_written_fixes_show_as_configured_and_pending(tmp_path: Path) -> None:
    files = seed_box(
        extra={
            "/etc/sysctl.d/60-strata-doctor.conf": "# Managed by strata-doctor\nvm.nr_hugepages = 0\n",
            "/etc/systemd/system/strata.service.d/60-strata-doctor-oomd.conf": (
                "[Service]\nManagedOOMPreference=avoid\n"
            ),
        }
    )
    data = check(tmp_path, files)
    hp = data["by_id"]["hugepages/configured"]
    assert hp["severity"] == "info"
    assert "vm.nr_hugepages = 0 in /etc/sysctl.d/60-strata-doctor.conf" in hp["summary"]
    assert "takes effect after `sysctl --system` (or a reboot)" in hp["summary"]
    oomd = data["by_id"]["oomd/configured"]
    assert oomd["severity"] == "info"
    assert "takes effect after `systemctl daemon-reload` and a restart of strata.service" in oomd["summary"]
    assert "hugepages/trap" not in data["by_id"] and "oomd/trap-chain" not in data["by_id"]


def test_a_later_sysctl_file_overrides_the_fix(tmp_path: Path) -> None:
    files = seed_box(
        extra={
            "/etc/sysctl.d/60-strata-doctor.conf": "vm.nr_hugepages = 0\n",
            "/etc/sysctl.conf": "vm.nr_hugepages = 24000\n",
        }
    )
    data = check(tmp_path, files)
    trap = data["by_id"]["hugepages/trap"]
    assert "vm.nr_hugepages = 0 in /etc/sysctl.d/60-strata-doctor.conf is overridden by" in trap["detail"]
    assert any("/etc/sysctl.conf" in step for step in trap["fix"]["manual"])


def test_the_fix_outranks_a_later_sysctl_file(tmp_path: Path) -> None:
    """The seed box set the pool in 80-strata-hugepages.conf, which sorts after 60-: the fix
    takes a name that sorts after it, and once written it shows as configured."""
    files = seed_box()
    files["/etc/sysctl.d/80-strata-hugepages.conf"] = files.pop("/etc/sysctl.d/50-hugepages.conf")
    trap = check(tmp_path / "a", files)["by_id"]["hugepages/trap"]
    assert [f["path"] for f in trap["fix"]["files"]] == ["/etc/sysctl.d/81-strata-doctor.conf"]
    assert trap["fix"]["manual"] == []
    files["/etc/sysctl.d/81-strata-doctor.conf"] = "vm.nr_hugepages = 0\n"
    data = check(tmp_path / "b", files)
    assert (
        "vm.nr_hugepages = 0 in /etc/sysctl.d/81-strata-doctor.conf"
        in data["by_id"]["hugepages/configured"]["summary"]
    )
    assert "hugepages/trap" not in data["by_id"]


# -- pool variants ---------------------------------------------------------------------------
def test_pool_on_the_wrong_node(tmp_path: Path) -> None:
    data = check(
        tmp_path, seed_box(pool={0: (24000, 24000), 1: (0, 0)}, orphan_pages=0, mode="hugetlb", looping=False)
    )
    wrong = data["by_id"]["hugepages/wrong-node"]
    assert wrong["severity"] == "warning"
    assert "node 0: 24,000 (free 24,000), node 1: 0 (free 0)" in wrong["summary"]
    assert "23,983 of the arena's 23,983 pages" in wrong["summary"]
    actions = wrong["fix"]["actions"]
    assert {
        "kind": "write-sysfs",
        "value": "23983",
        "target": "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages",
    } in actions
    assert {
        "kind": "write-sysfs",
        "value": "0",
        "target": "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages",
    } in actions
    assert any("hugepages=1:23983" in step for step in wrong["fix"]["manual"])


def test_pool_too_small_for_hugetlb_mode(tmp_path: Path) -> None:
    data = check(tmp_path, seed_box(mode="hugetlb", looping=False, orphan_pages=0))
    small = data["by_id"]["hugepages/too-small"]
    assert small["severity"] == "error" and SEED_SUMMARY in small["summary"]
    assert small["fix"]["actions"][0]["target"].endswith("node1/hugepages/hugepages-2048kB/nr_hugepages")


def test_unused_pool_with_a_thp_engine(tmp_path: Path) -> None:
    data = check(
        tmp_path,
        seed_box(pool={0: (12000, 12000), 1: (12000, 12000)}, orphan_pages=0, mode="thp", looping=False),
    )
    unused = data["by_id"]["hugepages/unused-pool"]
    assert unused["severity"] == "warning"
    assert "24,000 2 MiB pages (46.88 GiB) that nobody uses" in unused["summary"]
    assert unused["fix"]["actions"] == [{"kind": "sysctl", "target": "vm.nr_hugepages", "value": "0"}]


def test_orphans_that_block_a_hugetlb_engine_are_the_error(tmp_path: Path) -> None:
    data = check(tmp_path, seed_box(mode="hugetlb", looping=False))
    orphans = data["by_id"]["hugepages/orphans"]
    assert orphans["severity"] == "error" and SEED_SUMMARY in orphans["summary"]
    assert "delete them and the pool suffices" in orphans["summary"]
    assert orphans["fix"]["manual"][0].startswith("rm -- /dev/hugepages/strata-arena.old")
    assert "hugepages/too-small" not in data["by_id"]


def test_pool_that_fits(tmp_path: Path) -> None:
    data = check(tmp_path, seed_box(pool={0: (0, 0), 1: (24000, 24000)}, orphan_pages=0, looping=False))
    fits = data["by_id"]["hugepages/fits"]
    assert fits["severity"] == "ok" and "23,983 pages fit MAP_HUGETLB" in fits["summary"]
    assert "hugepages/wrong-node" not in data["by_id"]


def test_surplus_is_info(tmp_path: Path) -> None:
    files = seed_box(pool={0: (0, 0), 1: (0, 0)}, orphan_pages=0, looping=False)
    files.update({f"{HP}/nr_overcommit_hugepages": "512\n", "/proc/sys/vm/nr_overcommit_hugepages": "512\n"})
    data = check(tmp_path, files)
    assert data["by_id"]["hugepages/surplus"]["severity"] == "info"
    assert "up to 512 surplus 2 MiB pages" in data["by_id"]["hugepages/surplus"]["summary"]


def test_no_arena_means_no_fit_verdict(tmp_path: Path) -> None:
    files = seed_box(pool={0: (100, 100), 1: (0, 0)}, orphan_pages=0, looping=False)
    files["/etc/strata-doctor.yaml"] = "hugepages: auto\n"
    data = check(tmp_path, files)
    unused = data["by_id"]["hugepages/unused-pool"]
    assert unused["severity"] == "warning" and "--arena" in unused["summary"] and unused["fix"] is None


# -- transparent hugepages -----------------------------------------------------------------------
def test_thp_never_while_the_engine_relies_on_it(tmp_path: Path) -> None:
    data = check(
        tmp_path,
        seed_box(
            pool={0: (0, 0), 1: (0, 0)},
            orphan_pages=0,
            looping=False,
            thp="always madvise [never]",
            defrag="[always] defer defer+madvise madvise never",
        ),
    )
    never = data["by_id"]["transparent-hugepages/never"]
    assert never["severity"] == "warning" and "4 KiB pages" in never["summary"]
    assert never["fix"]["actions"][0]["value"] == "madvise"
    assert "transparent-hugepages/defrag-stalls" not in data["by_id"]  # THP is off: no THP faults


def test_thp_defrag_always_is_noted(tmp_path: Path) -> None:
    data = check(
        tmp_path,
        seed_box(
            pool={0: (0, 0), 1: (0, 0)},
            orphan_pages=0,
            looping=False,
            defrag="[always] defer defer+madvise madvise never",
        ),
    )
    assert data["by_id"]["transparent-hugepages/defrag-stalls"]["severity"] == "info"


def test_thp_never_is_fine_for_hugetlb_mode(tmp_path: Path) -> None:
    data = check(
        tmp_path,
        seed_box(
            pool={0: (0, 0), 1: (24000, 24000)},
            orphan_pages=0,
            mode="hugetlb",
            looping=False,
            thp="always madvise [never]",
        ),
    )
    assert data["by_id"]["transparent-hugepages/off"]["severity"] == "ok"


# -- oomd variants -------------------------------------------------------------------------------
def test_desktop_session_engine_under_fedora_oomd(tmp_path: Path) -> None:
    scope = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-strata-5150.scope"
    files = seed_box(
        pool={0: (0, 0), 1: (0, 0)},
        orphan_pages=0,
        looping=False,
        journal="-- No entries --\n",
        dump=DUMP_SYSTEM.split("Memory Pressure Monitored CGroups:")[0]
        + "Memory Pressure Monitored CGroups:\n\tPath: /user.slice/user-1000.slice/user@1000.service\n"
        "\t\tMemory Pressure Limit: 50.00%\n\t\tMemory Pressure Duration: 20s\n",
    )
    files[f"{C}/systemctl-show-strata.service.txt"] = (
        "Id=strata.service\nLoadState=not-found\nActiveState=inactive\n"
    )
    for key in ("status", "stat", "numa_maps"):
        files[f"/proc/5150/{key}"] = files.pop(f"/proc/4242/{key}")
    files.pop("/proc/4242/cgroup")
    files.pop("/proc/4242/cmdline")
    files["/proc/5150/cgroup"] = f"0::{scope}\n"
    files["/proc/5150/cmdline"] = "python3\0serve/server.py\0--port\08000\0"
    files[f"{C}/systemctl-show-user@1000.service.txt"] = (
        "Id=user@1000.service\nLoadState=loaded\nManagedOOMMemoryPressure=kill\nManagedOOMSwap=auto\n"
        "ManagedOOMPreference=none\n"
    )
    files[f"{C}/systemctl-show-user-1000.slice.txt"] = "Id=user-1000.slice\nLoadState=loaded\n"
    files[f"{C}/systemctl-show-user.slice.txt"] = "Id=user.slice\nLoadState=loaded\n"
    files["/usr/lib/systemd/system/user@.service.d/10-oomd-user-service-defaults.conf"] = (
        "[Service]\nManagedOOMMemoryPressure=kill\nManagedOOMMemoryPressureLimit=50%\n"
    )
    files["/usr/lib/systemd/oomd.conf.d/10-oomd-defaults.conf"] = (
        "[OOM]\nDefaultMemoryPressureDurationSec=20s\n"
    )
    data = check(tmp_path, files)
    exposed = data["by_id"]["oomd/exposed"]
    assert exposed["severity"] in ("warning", "error")
    assert "pid 5150" in exposed["summary"]
    assert (
        "/user.slice/user-1000.slice/user@1000.service for memory pressure > 50% for 20s"
        in exposed["summary"]
    )
    assert "not honoured" in exposed["detail"]
    assert exposed["fix"]["files"] == [] and "system service" in exposed["fix"]["summary"]
    assert "Do not turn systemd-oomd off host-wide" in exposed["fix"]["manual"][0]
    assert data["facts"]["oomd"]["engine"]["cgroup"] == scope


def test_server_without_oomd(tmp_path: Path) -> None:
    data = check(
        tmp_path,
        seed_box(
            pool={0: (0, 0), 1: (0, 0)},
            orphan_pages=0,
            looping=False,
            dump=None,
            journal=None,
            oomd="Id=systemd-oomd.service\nLoadState=not-found\nActiveState=inactive\n",
        ),
    )
    assert [(f["id"], f["severity"]) for f in findings(data, "oomd")] == [("inactive", "ok")]
    assert "not-found" in data["by_id"]["oomd/inactive"]["summary"]


def test_unknown_cgroup_says_why_the_watched_cgroups_are_unknown(tmp_path: Path) -> None:
    files = seed_box(pool={0: (0, 0), 1: (0, 0)}, orphan_pages=0, looping=False, dump=None)
    for path in [p for p in files if p.startswith("/proc/4242/")]:
        del files[path]  # no engine process
    files[f"{C}/systemctl-show-strata.service.txt"] = "Id=strata.service\nLoadState=not-found\n"
    data = check(tmp_path, files)
    summary = data["by_id"]["oomd/unknown-cgroup"]["summary"]
    assert "(watching: unknown: oomctl not found)" in summary


def test_cgroup_v1_host(tmp_path: Path) -> None:
    files = seed_box(pool={0: (0, 0), 1: (0, 0)}, orphan_pages=0, looping=False)
    files.pop("/sys/fs/cgroup/cgroup.controllers")
    files["/sys/fs/cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712\n"
    data = check(tmp_path, files)
    assert data["by_id"]["oomd/cgroup-v1"]["severity"] == "info"


def test_container_with_read_only_sys(tmp_path: Path) -> None:
    files = seed_box(looping=False, oomd=None, dump=None, journal=None)
    files.pop(f"{C}/systemctl-show-strata.service.txt")
    files.update({"/.dockerenv": "", "/proc/mounts": "sysfs /sys sysfs ro,nosuid,nodev,noexec 0 0\n"})
    data = check(tmp_path, files)
    oomd = next(c for c in data["checks"] if c["id"] == "oomd")
    assert oomd["status"] == "skipped" and "docker container" in oomd["reason"]
    # No oomd to see and 23 GiB left after the fallback: the pool only holds memory back.
    pool = data["by_id"]["hugepages/unusable-pool"]
    assert pool["severity"] == "warning" and "hugepages/trap" not in data["by_id"]
    assert pool["fix"] is None and "the pool belongs to the host" in pool["detail"]
    assert data["facts"]["hugepages"]["sys_readonly"] is True


def test_unreadable_journal_is_said(tmp_path: Path) -> None:
    files = seed_box(pool={0: (0, 0), 1: (0, 0)}, orphan_pages=0, looping=False, journal="")
    files[f"{C}/journalctl-oomd.err"] = (
        "Hint: You are currently not seeing messages from other users and the system.\n"
    )
    data = check(tmp_path, files)
    ev = data["by_id"]["oomd/exposed"]["evidence"]
    assert any("needs root" in e["value"] for e in ev)


def test_memory_checks_never_crash_on_an_empty_tree(tmp_path: Path) -> None:
    data = check(tmp_path, {"/proc/cpuinfo": "", "/proc/meminfo": ""})  # empty, yet a host
    for check_id in ("hugepages", "transparent-hugepages", "oomd"):
        assert status(data, check_id) in ("skipped", "ok", "info"), status(data, check_id)
    assert Severity.parse(status(data, "oomd") if status(data, "oomd") != "skipped" else "ok") is not None


# -- the hand-made fixture hosts (when present) ------------------------------------------------------
def _host(name: str) -> Path:
    path = HOSTS / name
    if not path.is_dir():
        pytest.skip(f"fixture host {name} is not there yet")
    return path


def _fixture(name: str, *args: str) -> Dict[str, Any]:
    result = run_cli(["check", "--root", str(_host(name)), "--format", "json", *args])
    data: Dict[str, Any] = json.loads(result.stdout)
    data["rc"] = result.exit_code
    data["by_id"] = {}
    for f in data["findings"]:
        data["by_id"].setdefault(f"{f['check']}/{f['id']}", f)
    return data


def test_fixture_seed_box_trap_chain() -> None:
    data = _fixture("seed-box")
    assert data["rc"] == 1
    trap = data["by_id"]["hugepages/trap"]
    assert trap["severity"] == "error" and SEED_SUMMARY in trap["summary"]
    assert "46.84 GiB / 2 MiB → 23,983 pages" in trap["summary"]
    assert "strata-bench pid 30201: 8,221" in trap["detail"]
    assert trap["fix"]["actions"] == [{"kind": "sysctl", "target": "vm.nr_hugepages", "value": "0"}]
    # 80-strata-hugepages.conf sets the pool and sorts after 60-: the fix must sort after it.
    assert [f["path"] for f in trap["fix"]["files"]] == ["/etc/sysctl.d/81-strata-doctor.conf"]
    oomd = [f for f in data["findings"] if f["check"] == "oomd"]
    assert [f["id"] for f in oomd] == ["trap-chain"]
    chain = oomd[0]
    assert chain["severity"] == "error" and CHAIN in chain["summary"] and SEED_SUMMARY in chain["summary"]
    assert "7 kills" in chain["summary"] and "NRestarts=7" in chain["summary"]
    assert "50% for 20s on /system.slice" in chain["summary"]
    assert data["by_id"]["transparent-hugepages/madvise"]["severity"] == "ok"


def test_fixture_seed_box_bound_passes() -> None:
    data = _fixture("seed-box-bound")
    for check_id in ("hugepages", "transparent-hugepages", "oomd"):
        assert status(data, check_id) == "ok", (
            check_id,
            [(f["id"], f["severity"], f["summary"]) for f in data["findings"] if f["check"] == check_id],
        )
    assert "hugepages/no-pool" in data["by_id"] and "oomd/protected" in data["by_id"]


def test_fixture_hugepages_wrong_node() -> None:
    data = _fixture("hugepages-wrong-node")
    wrong = data["by_id"]["hugepages/wrong-node"]
    assert wrong["severity"] == "warning"
    assert "node 0: 24,000 (free 17), node 1: 0 (free 0)" in wrong["summary"]
    actions = {(a["target"].split("/")[5], a["value"]) for a in wrong["fix"]["actions"]}
    assert actions == {("node1", "23983"), ("node0", "0")}
    assert any(
        "replace `hugepagesz=2M hugepages=0:24000` with `hugepagesz=2M hugepages=1:23983`" in m
        for m in wrong["fix"]["manual"]
    )


def test_fixture_hugetlbfs_orphans() -> None:
    data = _fixture("hugetlbfs-orphans")
    orphans = data["by_id"]["hugepages/orphans"]
    assert orphans["severity"] == "error"
    assert "pool 26,000, free 434, needed 23,983" in orphans["summary"]
    assert "hold 49.93 GiB (25,566 pages)" in orphans["summary"]
    assert "/dev/hugepages/strata-arena.0 (46.84 GiB, 23,983 pages, strata (uid 990))" in orphans["summary"]
    assert "/dev/hugepages/strata-kv.0 (3.09 GiB, 1,583 pages, strata (uid 990))" in orphans["summary"]
    assert "hugepages/too-small" not in data["by_id"]


def test_fixture_desktop_user_oomd() -> None:
    data = _fixture("desktop-user-oomd")
    exposed = data["by_id"]["oomd/exposed"]
    assert exposed["severity"] == "error"
    assert (
        "pid 9412" in exposed["summary"]
        and "user@1000.service for memory pressure > 50% for 20s" in exposed["summary"]
    )
    assert "leaves 3.86 GiB, less than the 4.00 GiB headroom" in exposed["summary"]
    assert "not honoured" in exposed["detail"] and "already killed 1 other cgroup" in exposed["detail"]
    assert exposed["fix"]["files"] == [] and "system service" in exposed["fix"]["summary"]
    assert data["rc"] == 1


def test_fixture_server_no_oomd() -> None:
    data = _fixture("server-no-oomd")
    assert [f["id"] for f in data["findings"] if f["check"] == "oomd"] == ["inactive"]
    assert data["by_id"]["transparent-hugepages/never"]["severity"] == "warning"
    assert status(data, "hugepages") == "ok"


def test_fixture_container_ro_sys() -> None:
    data = _fixture("container-ro-sys")
    assert status(data, "oomd") == "skipped"
    reason = next(c["reason"] for c in data["checks"] if c["id"] == "oomd")
    assert "no systemd" in reason and "container" in reason
    assert status(data, "hugepages") == "ok" and status(data, "transparent-hugepages") == "ok"
    assert data["facts"]["hugepages"]["sys_readonly"] is True


@pytest.mark.parametrize(
    "name", sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []
)
def test_fixture_memory_checks_never_crash(name: str) -> None:
    data = _fixture(name)
    for check_id in ("hugepages", "transparent-hugepages", "oomd"):
        assert status(data, check_id) != "crashed", next(c for c in data["checks"] if c["id"] == check_id)


def test_desktop_engine_holding_its_own_pool_is_not_a_failing_map(tmp_path: Path) -> None:
    """The engine started by hand (no unit) holds 23,984 of a 24,000-page pool: one engine
    PID for every check, so its own pages count as available at its restart."""
    import re

    host = copy_host("desktop-user-oomd", tmp_path / "host")

    def edit(path: str, old: str, new: str) -> None:
        file = host / path.lstrip("/")
        text = file.read_text()
        assert re.search(old, text, re.M), (path, old)
        file.write_text(re.sub(old, new, text, flags=re.M))

    held_kb = 23984 * 2048
    edit("/proc/meminfo", r"^HugePages_Total:.*$", "HugePages_Total:   24000")
    edit("/proc/meminfo", r"^HugePages_Free:.*$", "HugePages_Free:       16")
    edit("/proc/meminfo", r"^Hugetlb:.*$", f"Hugetlb:        {24000 * 2048} kB")
    edit("/proc/9412/status", r"^HugetlbPages:.*$", f"HugetlbPages:\t{held_kb} kB")
    files = {
        f"{HP}/nr_hugepages": "24000\n", f"{HP}/free_hugepages": "16\n", f"{HP}/resv_hugepages": "0\n",
        f"{HP}/surplus_hugepages": "0\n", f"{HP}/nr_overcommit_hugepages": "0\n",
        "/proc/sys/vm/nr_hugepages": "24000\n",
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages": "24000\n",
        "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages": "16\n",
    }
    write_tree(host, files)
    result = run_cli(["check", "--root", str(host), "--format", "json"])
    data = json.loads(result.stdout)
    ids = {f"{f['check']}/{f['id']}": f for f in data["findings"]}
    assert "hugepages/trap" not in ids and "hugepages/too-small" not in ids, sorted(ids)
    assert not any("MAP_HUGETLB will fail" in f["summary"] for f in data["findings"])
    assert "oomd/trap-chain" not in ids
    assert ids["oomd/exposed"]["severity"] == "error" and "pid 9412" in ids["oomd/exposed"]["summary"]


def test_cpu_contention_does_not_count_the_engine_started_by_hand(tmp_path: Path) -> None:
    """No loaded unit: the engine found by its command line is not 'another process'."""
    from strata_doctor.checks.cpu_contention import CpuContention
    from strata_doctor.config import EngineConfig
    from strata_doctor.context import HostContext
    from strata_doctor.root import Root

    files = two_node_files()
    files.update({
        "/proc/4242/status": "Name:\tpython3\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\n"
                             "Cpus_allowed_list:\t0-7\nHugetlbPages:\t0 kB\n",
        "/proc/4242/stat": "4242 (python3) S 1" + " 0" * 9 + " 500 100 0 0 20 0 1 0 100 0 0\n",
        "/proc/4242/cmdline": "python3\0serve/server.py\0",
        "/proc/uptime": "1000.00 500.00\n",
    })
    ctx = HostContext(Root(str(write_tree(tmp_path, files))), EngineConfig())
    assert ctx.engine_pid == 4242
    check = CpuContention()
    assert check.applies(ctx) is None
    assert [f.id for f in check.run(ctx)] == ["reserved"]
