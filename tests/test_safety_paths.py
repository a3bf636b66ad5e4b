"""Nothing is read, written, removed or chmod'ed outside ``--root`` (docs/fix.md#safety).

Every test runs twice: with ``openat2(RESOLVE_IN_ROOT)`` where this kernel has it, and
with the portable component-by-component walk forced.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from click.testing import Result

from strata_doctor.inroot import InRoot
from strata_doctor.root import Root
from tests.conftest import HOSTS, run_cli, seed_copy
from tests.test_fix_hosts import snapshot

SEED = HOSTS / "seed-box"
FIX = ["--reserve-node"]
# Every folder `fix --apply --reserve-node` writes into on the seed box, and the state folder.
WRITTEN_FOLDERS = [
    "etc/systemd/system/strata.service.d",
    "etc/systemd/system/system.slice.d",
    "etc/systemd/system",
    "etc/sysctl.d",
    "usr/local/bin",
    "var/lib/strata-doctor",
]


def _outside(tmp_path: Path) -> Tuple[Path, Dict[str, Tuple[str, int, bytes]]]:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.txt").write_text("outside data\n")
    (outside / "81-strata-doctor.conf").write_text("not yours\n")
    outside.chmod(0o755)
    return outside, snapshot(outside)


def _replace_with_link(tree: Path, folder: str, target: str) -> None:
    path = tree / folder
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _one_line_error(result: Result) -> None:
    stderr = result.stderr
    assert result.exit_code == 2, result.stdout + stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


# -- the resolver ----------------------------------------------------------------
def test_resolver_semantics(tmp_path: Path, resolver: str) -> None:
    root = tmp_path / "root"
    (root / "etc/real").mkdir(parents=True)
    (root / "etc/real/f").write_text("inside\n")
    (root / "etc/abs").symlink_to("/etc")
    (root / "etc/rel").symlink_to("../../../../../../etc/real")
    (root / "etc/dangling").symlink_to("nowhere")
    (root / "etc/loop1").symlink_to("loop2")
    (root / "etc/loop2").symlink_to("loop1")
    (root / "self").symlink_to("/")
    with InRoot(root) as tree:
        assert tree.resolve("/etc/abs/real/f") == "/etc/real/f"
        assert tree.resolve("/etc/rel/f") == "/etc/real/f"
        assert tree.resolve("/../../../etc/real/f") == "/etc/real/f"
        assert tree.resolve("/self/self/etc/real/f") == "/etc/real/f"
        assert tree.resolve("/etc/dangling/x") == "/etc/nowhere/x"
        assert tree.resolve("/etc/abs", follow_last=False) == "/etc/abs"
        with pytest.raises(OSError) as loop:
            tree.resolve("/etc/loop1/x")
        assert loop.value.errno == 40
        fd = tree.open("/etc/abs/real/../real/f")
        try:
            assert os.read(fd, 100) == b"inside\n"
            assert tree.host_of(fd) == "/etc/real/f"
        finally:
            os.close(fd)
        with pytest.raises(OSError):
            tree.open("/etc/abs", follow_last=False)  # O_NOFOLLOW on a final link
        assert tree.locate("/etc/real/new/deeper") == ("/etc/real", ["new", "deeper"])
        with pytest.raises(OSError, match="missing"):
            tree.locate("/etc/dangling/x")
        with pytest.raises(OSError):
            tree.locate("/etc/real/f/x")  # a file where a folder should be


# -- reads ---------------------------------------------------------------------
def test_reads_never_leave_the_root(tmp_path: Path, resolver: str) -> None:
    outside, _ = _outside(tmp_path)
    root = tmp_path / "root"
    (root / "captured-sys/devices/system/cpu").mkdir(parents=True)
    (root / "captured-sys/devices/system/cpu/online").write_text("0-3\n")
    (root / "sys").symlink_to("/captured-sys")  # absolute: relative to the root
    (root / "proc").symlink_to("/proc")  # the replaying machine's /proc must stay unseen
    (root / "etc").mkdir()
    (root / "etc/escape").symlink_to(f"../../../../../../../..{outside}")
    (root / "etc/abs-outside").symlink_to(str(outside))
    (root / "etc/file-link").symlink_to(str(outside / "keep.txt"))
    (root / "etc/hostname").symlink_to("/proc/sys/kernel/hostname")
    r = Root(root)
    assert r.read("/sys/devices/system/cpu/online") == "0-3\n"
    assert r.read("/proc/self/status") is None
    assert r.read("/proc/meminfo") is None
    assert r.read("/etc/hostname") is None
    assert r.read("/etc/escape/keep.txt") is None
    assert r.read("/etc/abs-outside/keep.txt") is None
    assert r.read("/etc/file-link") is None
    assert r.listdir("/etc/escape") == [] and r.listdir("/proc") == []
    assert not r.is_dir("/etc/abs-outside") and not r.is_dir("/proc/self")
    assert not r.exists("/proc/self/status") and r.stat("/proc/meminfo") is None
    assert r.is_dir("/sys/devices") and r.listdir("/sys/devices") == ["system"]
    assert r.readlink("/etc/escape") == f"../../../../../../../..{outside}"


def test_relative_in_tree_links_still_read(tmp_path: Path, resolver: str) -> None:
    root = tmp_path / "root"
    device = root / "sys/devices/pci0000:00/0000:00:01.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    (root / "sys/bus/pci/devices/0000:00:01.0").symlink_to("../../../devices/pci0000:00/0000:00:01.0")
    r = Root(root)
    assert r.read("/sys/bus/pci/devices/0000:00:01.0/numa_node") == "1\n"
    assert r.link_name("/sys/bus/pci/devices/0000:00:01.0") == "0000:00:01.0"
    assert r.is_dir("/sys/bus/pci/devices/0000:00:01.0")


def test_check_on_a_tree_whose_sys_links_to_the_real_sys(tmp_path: Path, resolver: str) -> None:
    tree = seed_copy(tmp_path)
    shutil.move(str(tree / "sys"), str(tree / "sys.captured"))
    (tree / "sys").symlink_to("/sys")
    opened: List[str] = []
    real_open = os.open

    def spy(path: object, *args: object, **kwargs: object) -> int:
        if isinstance(path, str) and path.startswith("/sys/") and "dir_fd" not in kwargs:
            opened.append(path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    os.open = spy  # type: ignore[assignment]
    try:
        result = run_cli(["check", "--root", str(tree), "--format", "json"])
    finally:
        os.open = real_open
    assert result.exit_code in (0, 1, 2), result.stderr
    assert "Traceback" not in result.stderr
    assert opened == []


# -- writes ----------------------------------------------------------------------
LAYOUTS = ["relative", "absolute", "dangling", "loop"]


def _layout(tree: Path, folder: str, kind: str, outside: Path) -> None:
    depth = folder.count("/") + 1
    if kind == "relative":
        _replace_with_link(tree, folder, "../" * (depth + 6) + str(outside).lstrip("/"))
    elif kind == "absolute":
        _replace_with_link(tree, folder, str(outside))
    elif kind == "dangling":
        _replace_with_link(tree, folder, "does-not-exist")
    else:
        _replace_with_link(tree, folder, folder.rsplit("/", 1)[-1])


@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize("folder", WRITTEN_FOLDERS)
def test_no_write_outside_the_root(tmp_path: Path, resolver: str, folder: str, kind: str) -> None:
    outside, before = _outside(tmp_path)
    tree = seed_copy(tmp_path)
    _layout(tree, folder, kind, outside)
    original = snapshot(tree)
    applied = run_cli(["fix", "--root", str(tree), "--apply", *FIX])
    assert "Traceback" not in applied.stderr
    if applied.exit_code == 2:
        _one_line_error(applied)
    else:
        assert applied.exit_code in (0, 1), applied.stderr
    assert snapshot(outside) == before, "something outside the root changed"
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
    reverted = run_cli(["fix", "--root", str(tree), "--revert"])
    assert reverted.exit_code == 0, reverted.stdout + reverted.stderr
    assert snapshot(tree) == original
    assert snapshot(outside) == before


def test_absolute_folder_link_is_taken_inside_the_root(tmp_path: Path, resolver: str) -> None:
    outside, before = _outside(tmp_path)
    tree = seed_copy(tmp_path)
    inside = tree / str(outside).lstrip("/")
    inside.mkdir(parents=True)
    _replace_with_link(tree, "usr/local/bin", str(outside))
    original = snapshot(tree)
    applied = run_cli(["fix", "--root", str(tree), "--apply", *FIX])
    assert applied.exit_code in (0, 1), applied.stderr
    assert (inside / "strata-numa").is_file()
    assert snapshot(outside) == before
    assert run_cli(["fix", "--root", str(tree), "--revert"]).exit_code == 0
    assert snapshot(tree) == original


@pytest.mark.parametrize("force", [False, True])
def test_revert_after_a_folder_became_a_link_outside(tmp_path: Path, resolver: str, force: bool) -> None:
    outside, before = _outside(tmp_path)
    tree = seed_copy(tmp_path)
    assert run_cli(["fix", "--root", str(tree), "--apply", *FIX]).exit_code in (0, 1)
    moved = tmp_path / "sysctl.d-moved"
    shutil.move(str(tree / "etc/sysctl.d"), str(moved))
    (tree / "etc/sysctl.d").symlink_to("../../../../../../.." + str(outside))
    reverted = run_cli(["fix", "--root", str(tree), "--revert", *(["--force"] if force else [])])
    assert "Traceback" not in reverted.stderr
    if reverted.exit_code == 2:
        _one_line_error(reverted)
    assert snapshot(outside) == before, "revert changed something outside the root"


def test_state_folder_link_outside_is_not_chmodded(tmp_path: Path, resolver: str) -> None:
    outside, before = _outside(tmp_path)
    tree = seed_copy(tmp_path)
    (tree / "var/lib").mkdir(parents=True)
    (tree / "var/lib/strata-doctor").symlink_to(str(outside))
    applied = run_cli(["fix", "--root", str(tree), "--apply", *FIX])
    _one_line_error(applied)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
    assert snapshot(outside) == before


def test_writes_in_an_inside_link_folder_round_trip(tmp_path: Path, resolver: str) -> None:
    """An administrator's folder link that stays inside the root is followed, as on a live host."""
    tree = seed_copy(tmp_path)
    shutil.move(str(tree / "etc/sysctl.d"), str(tree / "etc/sysctl.real"))
    (tree / "etc/sysctl.d").symlink_to("sysctl.real")
    original = snapshot(tree)
    applied = run_cli(["fix", "--root", str(tree), "--apply", *FIX])
    assert applied.exit_code in (0, 1), applied.stderr
    assert list((tree / "etc/sysctl.real").glob("*-strata-doctor.conf"))
    assert (tree / "etc/sysctl.d").is_symlink()
    assert run_cli(["fix", "--root", str(tree), "--revert"]).exit_code == 0
    assert snapshot(tree) == original


def test_final_component_link_is_refused(tmp_path: Path, resolver: str) -> None:
    outside, before = _outside(tmp_path)
    tree = seed_copy(tmp_path)
    (tree / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (tree / "usr/local/bin/strata-numa").symlink_to("/strata-numa-inside")
    (tree / "strata-numa-inside").write_text("# Managed by strata-doctor\n")
    original = snapshot(tree)
    applied = run_cli(["fix", "--root", str(tree), "--apply", *FIX])
    assert applied.exit_code == 2 and "symlink" in applied.stderr
    assert snapshot(tree) == original and snapshot(outside) == before


@pytest.mark.parametrize("how", ["applies-link", "originals-link", "original-escape", "garbage"])
def test_a_crafted_state_folder_reads_nothing_outside(tmp_path: Path, resolver: str, how: str) -> None:
    """The state folder is part of the tree: a journal planted there never makes revert read
    or write outside the root, and never crashes it."""
    outside, _ = _outside(tmp_path)
    (outside / "0").write_text("secret outside\n")
    before = snapshot(outside)
    tree = seed_copy(tmp_path)
    assert run_cli(["fix", "--root", str(tree), "--apply"]).exit_code in (0, 1)
    apply_dir = next((tree / "var/lib/strata-doctor/applies").iterdir())
    journal = json.loads((apply_dir / "journal.json").read_text())
    if how == "applies-link":
        shutil.move(str(apply_dir.parent), str(tmp_path / "applies-moved"))
        apply_dir.parent.symlink_to(str(tmp_path / "applies-moved"))
    elif how == "originals-link":
        shutil.rmtree(apply_dir / "originals")
        (apply_dir / "originals").symlink_to(str(outside))
        for entry in journal["files"]:
            entry.update(existed=True, original="originals/0", mode=0o644, uid=0, gid=0)
    elif how == "original-escape":
        for entry in journal["files"]:
            entry.update(existed=True, original="../../../../../../../../../.." + str(outside / "0"))
    else:
        journal["files"] = [{"path": 5}]
    (apply_dir / "journal.json").write_text(json.dumps(journal))
    reverted = run_cli(["fix", "--root", str(tree), "--revert", "--force"])
    assert "Traceback" not in reverted.stderr
    if reverted.exit_code == 2:
        _one_line_error(reverted)
    else:
        assert reverted.exit_code == 0, reverted.stdout + reverted.stderr
    for top, _, files in os.walk(tree):
        for name in files:
            path = Path(top) / name
            if not path.is_symlink():
                assert b"secret outside" not in path.read_bytes(), path
    assert snapshot(outside) == before


def test_the_walk_can_be_forced_from_the_environment() -> None:
    import subprocess
    import sys

    code = "from strata_doctor import inroot; print(inroot.openat2_available())"
    env = dict(os.environ, STRATA_DOCTOR_NO_OPENAT2="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"
