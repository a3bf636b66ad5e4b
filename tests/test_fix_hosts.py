"""Small hosts for the fix tests, tree snapshots, and the version-aware fix builders.

The hosts are two-node trees (GPU on node 1) that differ only in what the fix depends
on: systemd's version (``systemctl --version`` captured as ``systemctl-version``), the
cgroup mode and offline CPUs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

from strata_doctor.config import load_config
from strata_doctor.context import HostContext
from strata_doctor.facts.engine import parse_systemd_version, read_systemd_support
from strata_doctor.fix.binding import binding_fix_for
from strata_doctor.root import Root
from tests.conftest import UNBOUND_UNIT, two_node_files, write_tree

UNIT_FILE = "[Unit]\nDescription=Strata engine\n\n[Service]\nExecStart=-/bin/true --serve\n"
SYNTHETIC = ("two-node-252", "two-node-243-v1", "two-node-239", "two-node-offline", "seed-model")


def host_files(name: str) -> Dict[str, str]:
    """The files of one synthetic host (see :data:`SYNTHETIC`)."""
    files = two_node_files(unit_show=UNBOUND_UNIT)
    files["/etc/systemd/system/strata.service"] = UNIT_FILE
    version = {"two-node-243-v1": 243, "two-node-239": 239}.get(name, 252)
    files["/.strata-doctor/commands/systemctl-version.txt"] = f"systemd {version} ({version}.1-1)\n+PAM\n"
    if name != "two-node-243-v1":
        files["/sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory pids\n"
    if name == "two-node-239":  # the unit starts through the wrapper, so numactl must be there
        files["/usr/bin/numactl"] = "#!/bin/sh\n"
    if name == "two-node-offline":
        files["/sys/devices/system/cpu/online"] = "0-6\n"
        files["/sys/devices/system/cpu/offline"] = "7\n"
    # A file the fixes must not touch, and a relative symlink that must stay a symlink.
    files["/etc/hostname"] = "seed\n"
    files["/etc/localtime"] = "->../usr/share/zoneinfo/UTC"
    if name == "seed-model":
        files.update(seed_model_files())
    return files


def seed_model_files() -> Dict[str, str]:
    """The seed box's numbers: 2 x 44 CPUs, 64 GiB per node, and its pool of 24,000 pages that
    the arena cannot use (no oomd here and 28 GiB left: the warning, whose fix is the same)."""
    node = "/sys/devices/system/node"
    pool = "hugepages/hugepages-2048kB"
    files = {
        f"{node}/node0/cpulist": "0-21,44-65\n",
        f"{node}/node1/cpulist": "22-43,66-87\n",
        "/sys/devices/system/cpu/online": "0-87\n",
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/local_cpulist": "22-43,66-87\n",
        "/proc/sys/vm/nr_hugepages": "24000\n",
        "/proc/sys/vm/nr_overcommit_hugepages": "0\n",
        "/proc/meminfo": "MemTotal:       131899392 kB\nMemFree:        80000000 kB\n"
        "MemAvailable:   82000000 kB\nHugePages_Total:   24000\nHugePages_Free:    15779\n"
        "HugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\n"
        "Hugetlb:        49152000 kB\n",
        "/etc/strata-doctor.yaml": "arena: 46.84GiB\nkv: 3.09GiB\n",
    }
    for n, free in ((0, 7779), (1, 8000)):
        files[f"{node}/node{n}/meminfo"] = (
            f"Node {n} MemTotal:       67108864 kB\nNode {n} MemFree:        40000000 kB\n")
        files[f"{node}/node{n}/{pool}/nr_hugepages"] = "12000\n"
        files[f"{node}/node{n}/{pool}/free_hugepages"] = f"{free}\n"
        files[f"{node}/node{n}/{pool}/surplus_hugepages"] = "0\n"
    sizes = {"nr_hugepages": 24000, "free_hugepages": 15779, "resv_hugepages": 0,
             "surplus_hugepages": 0, "nr_overcommit_hugepages": 0}
    for key, value in sizes.items():
        files[f"/sys/kernel/mm/{pool}/{key}"] = f"{value}\n"
    return files


def make_host(base: Path, name: str) -> Path:
    """Write the synthetic host ``name`` under ``base / name``."""
    return write_tree(base / name, host_files(name))


Entry = Tuple[str, int, bytes]


def snapshot(tree: Path) -> Dict[str, Entry]:
    """Every path under ``tree``: (kind, mode, bytes or link target), symlinks not followed."""
    found: Dict[str, Entry] = {}
    for top, dirs, files in os.walk(tree, followlinks=False):
        for name in dirs + files:
            path = Path(top) / name
            info = os.lstat(path)
            rel = str(path.relative_to(tree))
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", stat.S_IMODE(info.st_mode), b"")
            else:
                found[rel] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found


def context_for(tree: Path, numa: Optional[str] = None) -> HostContext:
    """A HostContext on ``tree`` with default engine settings."""
    root = Root(tree)
    config = load_config(root, None)
    if numa is not None:
        config = config._replace(numa=numa)
    return HostContext(root, config)


def test_parse_systemd_version() -> None:
    assert parse_systemd_version("systemd 252 (252.38-1~deb12u1)\n+PAM +AUDIT\n") == 252
    assert parse_systemd_version("systemd 239\n") == 239
    assert parse_systemd_version("garbage\n") is None
    assert parse_systemd_version("") is None


def test_support_inferred_from_systemctl_show(tmp_path: Path) -> None:
    files = two_node_files(unit_show=UNBOUND_UNIT)  # no systemctl-version capture
    tree = write_tree(tmp_path / "h", files)
    ctx = context_for(tree)
    support = read_systemd_support(ctx.root, ctx.unit)
    assert support.present and support.version == 244 and "AllowedCPUs" in support.inferred


@pytest.mark.parametrize("name", SYNTHETIC)
def test_binding_fix_follows_the_host(tmp_path: Path, name: str) -> None:
    ctx = context_for(make_host(tmp_path, name))
    plan = ctx.binding_plan
    assert plan is not None
    fix = binding_fix_for(ctx, plan)
    templates = {f.template: dict(f.context) for f in fix.files}
    assert "strata-numa.j2" in templates
    if name == "two-node-239":
        dropin = templates["numactl-exec-dropin.conf.j2"]
        assert dropin["exec_start"] == "/bin/true --serve"
        assert dropin["wrapper"] == "-/usr/local/bin/strata-numa"
        assert "NUMAPolicy= needs systemd 243+ and this host has systemd 239" in fix.summary
        return
    dropin = templates["numa-dropin.conf.j2"]
    assert dropin["numa_policy"] == "preferred" and dropin["numa_mask"] == "1"
    assert dropin["allowed_cpus"] is (name != "two-node-243-v1")
    expected = {"two-node-offline": "4-6", "seed-model": "22-43,66-87"}.get(name, "4-7")
    assert dropin["cpus"] == expected


def test_no_systemd_gets_the_wrapper_only(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "h", two_node_files())  # no systemctl captures at all
    ctx = context_for(tree)
    plan = ctx.binding_plan
    assert plan is not None
    fix = binding_fix_for(ctx, plan)
    assert [f.path for f in fix.files] == ["/usr/local/bin/strata-numa"]
    assert "no systemd" in fix.summary and not fix.actions
