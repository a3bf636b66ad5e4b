"""Every host read under ``--root`` stays inside the root in the call that opens it, every
read is bounded, and what cannot be read is a fact (docs/fix.md#safety, "Reads").

The race tests run twice: with ``openat2(RESOLVE_IN_ROOT)`` where this kernel has it, and
with the portable component-by-component walk forced.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Iterator, List, Optional, Set

import pytest

import strata_doctor
from strata_doctor import fileread, inroot
from strata_doctor.capture import captured_stats
from strata_doctor.root import Root
from tests.conftest import run_cli, seed_copy

SECRET = b"OUTSIDE-BYTES-7f3a"
"""A marker only the folder outside the root holds."""


# -- 1. a folder swapped for a link between two reads ------------------------------
def _outside_copy(tree: Path, pid: str, outside: Path) -> None:
    """The process folder's files, copied outside the root, each marked with the secret."""
    shutil.copytree(tree / "proc" / pid, outside / pid)
    for name in ("cmdline", "numa_maps", "status", "maps", "cgroup", "stat"):
        with open(outside / pid / name, "ab") as out:
            out.write(SECRET + b"\n")


def _swap_after_first_read(monkeypatch: pytest.MonkeyPatch, tree: Path, outside: Path) -> Set[str]:
    """Wrap Root.read_bytes: right after the first read below ``/proc/PID``, that folder
    becomes a link to its marked copy outside the root. A resolver that trusts an answer
    about the folder from the first read then reads the copy's bytes."""
    swapped: Set[str] = set()
    real_read = Root.read_bytes

    def read_then_swap(self: Root, host_path: str) -> Optional[bytes]:
        data = real_read(self, host_path)
        found = re.match(r"^/proc/(\d+)/", host_path)
        if found and found.group(1) not in swapped and (tree / "proc" / found.group(1)).is_dir():
            pid = found.group(1)
            swapped.add(pid)
            _outside_copy(tree, pid, outside)
            shutil.rmtree(tree / "proc" / pid)
            (tree / "proc" / pid).symlink_to(outside / pid)
        return data

    monkeypatch.setattr(Root, "read_bytes", read_then_swap)
    return swapped


def _bundle_bytes(bundle: Path) -> List[bytes]:
    with tarfile.open(bundle) as tar:
        found = []
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            data = handle.read() if handle else member.linkname.encode()
            found.append(member.name.encode() + b"\0" + data)
        return found


def test_a_process_folder_swapped_for_an_outside_link_reads_nothing_outside(
        tmp_path: Path, resolver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = seed_copy(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    swapped = _swap_after_first_read(monkeypatch, tree, outside)
    bundle = tmp_path / "b.tar.gz"
    result = run_cli(["report", "--root", str(tree), "--bundle", str(bundle)])
    assert result.exit_code in (0, 1), result.output + result.stderr
    assert swapped, "no process file was read: the test swapped nothing"
    assert SECRET.decode() not in result.output + result.stderr
    leaked = [member.split(b"\0")[0] for member in _bundle_bytes(bundle) if SECRET in member]
    assert not leaked


def test_every_kind_of_look_resolves_inside_the_root_each_time(tmp_path: Path, resolver: str) -> None:
    """After a folder was read once, a link put in its place is taken inside the root by
    read, listdir, readlink, stat, exists and is_dir alike."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "proc/7").mkdir(parents=True)
    (root / "proc/7/status").write_text("Name:\tinside\n")
    (outside / "7").mkdir(parents=True)
    (outside / "7/status").write_bytes(SECRET)
    (outside / "7/exe").symlink_to("/secret-target")
    r = Root(root)
    assert r.read("/proc/7/status") == "Name:\tinside\n"
    assert r.listdir("/proc/7") == ["status"] and r.is_dir("/proc/7")
    shutil.rmtree(root / "proc/7")
    (root / "proc/7").symlink_to(outside / "7")
    r._cache.clear()  # a second run of the same reads, as a later check would make them
    assert r.read_bytes("/proc/7/status") is None
    assert r.listdir("/proc/7/") == []
    assert r.readlink("/proc/7/exe") is None
    assert not r.exists("/proc/7/exe") and not r.is_dir("/proc/7/.")
    assert r.stat("/proc/7/status") is None and r.file_size("/proc/7/exe") is None


# -- 2. bounded reads --------------------------------------------------------------
def test_a_huge_sparse_file_is_too_large_not_a_memory_error(tmp_path: Path) -> None:
    meminfo = tmp_path / "proc/meminfo"
    meminfo.parent.mkdir(parents=True)
    with open(meminfo, "wb") as out:
        out.truncate(1 << 40)  # 1 TiB, sparse: costs no disk
    r = Root(tmp_path)
    assert r.read("/proc/meminfo") is None
    bound = fileread.READ_BOUND
    assert r.reads["/proc/meminfo"] == f"too large ({1 << 40} bytes, over the {bound}-byte bound)"


def test_the_checks_say_unknown_for_a_too_large_file(tmp_path: Path) -> None:
    tree = seed_copy(tmp_path)
    os.truncate(tree / "proc/meminfo", 1 << 40)
    result = run_cli(["check", "--root", str(tree), "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    report = run_cli(["report", "--root", str(tree), "--output", "-"])
    assert report.exit_code in (0, 1), report.stderr
    assert "too large" in report.output and "/proc/meminfo" in report.output


def test_a_file_whose_size_lies_stops_at_the_bound(tmp_path: Path) -> None:
    """A pipe says size 0, as procfs files do: the read stops one byte past the bound."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    written = 0
    try:
        while written < 300:
            written += os.write(write_end, b"x" * 100)
    except BlockingIOError:
        pass
    os.close(write_end)
    with pytest.raises(OSError) as refused:
        fileread.read_all(read_end, 256)
    assert refused.value.errno == errno.EFBIG
    assert refused.value.strerror == "too large (over the 256-byte bound)"
    read_end, write_end = os.pipe()
    os.write(write_end, b"y" * 256)
    os.close(write_end)
    assert fileread.read_all(read_end, 256) == b"y" * 256


def test_per_process_maps_get_the_larger_bound(tmp_path: Path) -> None:
    assert fileread.read_bound("/proc/48213/numa_maps") == fileread.LARGE_READ_BOUND
    assert fileread.read_bound("/proc/48213/smaps") == fileread.LARGE_READ_BOUND
    assert fileread.read_bound("/proc/meminfo") == fileread.READ_BOUND < fileread.LARGE_READ_BOUND
    big = tmp_path / "proc/1/numa_maps"
    big.parent.mkdir(parents=True)
    with open(big, "wb") as out:
        out.truncate(fileread.READ_BOUND + 1)  # over the ordinary bound, under the large one
    assert Root(tmp_path).read_bytes("/proc/1/numa_maps") == b"\0" * (fileread.READ_BOUND + 1)


def test_a_too_large_command_capture_or_stat_file_is_not_read(tmp_path: Path) -> None:
    capture = tmp_path / ".strata-doctor"
    (capture / "commands").mkdir(parents=True)
    with open(capture / "stat.json", "wb") as out:
        out.truncate(1 << 40)
    with open(capture / "commands/nvidia-smi.txt", "wb") as out:
        out.truncate(1 << 40)
    (tmp_path / "f").write_text("x")
    r = Root(tmp_path)
    assert r.stat("/f") is not None
    from strata_doctor.root import Command

    result = r.run(Command("nvidia-smi", ("nvidia-smi",)))
    assert result.stdout == "" and result.status is None


# -- 3. unreadable folders ---------------------------------------------------------
def _deny(monkeypatch: pytest.MonkeyPatch, folder: str) -> None:
    """Make every open, stat and listing of ``folder`` (by any route) fail as EACCES does."""
    real_open, real_stat, real_listdir = os.open, os.stat, os.listdir

    def denied(path: object) -> bool:
        name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else ""
        return isinstance(name, str) and (name.rstrip("/").endswith(folder) or f"{folder}/" in name)

    def fail(path: object) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    def spy_open(path: object, *args: object, **kwargs: object) -> int:
        if denied(path) or (path == folder.rpartition("/")[2] and "dir_fd" in kwargs):
            fail(path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    def spy_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if denied(path):
            fail(path)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    def spy_listdir(path: object = ".") -> List[str]:
        if denied(path):
            fail(path)
        return real_listdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "stat", spy_stat)
    monkeypatch.setattr(os, "lstat", spy_stat)
    monkeypatch.setattr(os, "listdir", spy_listdir)
    inroot.use_openat2(False)  # the ctypes call cannot be spied on: take the walk's os calls
    monkeypatch.setattr(inroot, "use_openat2", lambda enabled: None)


def test_an_unreadable_folder_is_a_fact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = seed_copy(tmp_path)
    try:
        _deny(monkeypatch, "sys/devices/system")
        r = Root(tree)
        assert r.read("/sys/devices/system/node/online") is None
        assert r.reads["/sys/devices/system/node/online"] == "permission denied (needs root)"
        assert r.listdir("/sys/devices/system/node") == []
        assert r.reads["/sys/devices/system/node/"] == "permission denied (needs root)"
        assert not r.exists("/sys/devices/system/cpu") and not r.is_dir("/sys/devices/system/cpu")
        for command in (["check"], ["report", "--output", "-"], ["map"], ["numa-plan"]):
            result = run_cli([*command, "--root", str(tree)])
            assert "Traceback" not in result.stderr, (command, result.stderr)
            assert result.exit_code in (0, 1, 2), (command, result.stderr)
    finally:
        monkeypatch.undo()
        inroot.use_openat2(True)


UNREACHABLE = 77
"""The exit status of :func:`_as_nobody` when nobody cannot reach ``reach``."""


def _as_nobody(python: str, args: List[str], reach: str = "/") -> subprocess.CompletedProcess[str]:
    # The package this test imported, then the other packages' folders: another interpreter
    # must keep its own standard library.
    mine = str(Path(strata_doctor.__file__).resolve().parent.parent)
    path = os.pathsep.join([mine, *(p for p in sys.path if "site-packages" in p or "__editable__" in p)])
    words = ["env", f"PYTHONPATH={path}", "PYTHONDONTWRITEBYTECODE=1", python, "-m", "strata_doctor", *args]
    line = f"test -r {shlex.quote(reach)} || exit {UNREACHABLE}; " + " ".join(shlex.quote(w) for w in words)
    return subprocess.run(["su", "nobody", "-s", "/bin/sh", "-c", line], capture_output=True, text=True,
                          timeout=300, check=False, cwd="/")


def _nobody_python() -> Optional[str]:
    """An interpreter of this version the user nobody may run with this checkout, or None
    (not root, no su, no such user, or only an interpreter under root's home)."""
    if os.geteuid() != 0 or not shutil.which("su"):
        return None
    try:
        import pwd

        pwd.getpwnam("nobody")
    except KeyError:
        return None
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for python in (sys.executable, shutil.which(version), f"/usr/bin/{version}"):
        if python and os.path.exists(python) and _as_nobody(python, ["--help"]).returncode == 0:
            return python
    return None


def _searchable_by_others(tmp_path: Path) -> Iterator[None]:
    """tmp_path and the folders above it up to /tmp searchable by others for the test's
    length (pytest makes its base folder 0700), restored after."""
    changed = []
    for folder in [tmp_path, *tmp_path.parents]:
        if folder in (Path("/"), Path("/tmp")):
            break
        mode = folder.stat().st_mode
        if mode & 0o001 == 0:
            changed.append((folder, mode))
            folder.chmod(mode | 0o001)
    try:
        yield
    finally:
        for folder, mode in changed:
            folder.chmod(mode)


@pytest.mark.parametrize("command", [["check"], ["report", "--output", "-"], ["map"], ["numa-plan"]])
def test_a_mode_000_folder_as_nobody_is_a_fact(tmp_path: Path, command: List[str]) -> None:
    python = _nobody_python()
    if python is None:
        pytest.skip("needs root, su, the user nobody and an interpreter of this version it may run")
    tree = seed_copy(tmp_path)
    subprocess.run(["chmod", "-R", "o+rX", str(tree)], check=True)
    (tree / "sys/devices/system").chmod(0)
    try:
        for _ in _searchable_by_others(tmp_path):
            result = _as_nobody(python, [*command, "--root", str(tree)], str(tree / "proc/meminfo"))
    finally:
        (tree / "sys/devices/system").chmod(0o755)  # so the tree can be removed as any user
    if result.returncode == UNREACHABLE:  # pytest makes its base folder 0700 at each session's start
        pytest.skip("another pytest session made the base temporary folder private again")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), result.stderr


# -- 4. an odd stat.json -----------------------------------------------------------
@pytest.mark.parametrize("size", ["1e400", "-1e400", "1.5", '"12"', "true"])
def test_an_odd_stat_json_size_is_not_recorded(size: str) -> None:
    text = '{"/a": {"size": SIZE, "uid": 0, "mode": 33188}, "/b": {"size": 3, "uid": 0, "mode": 33188}}'
    text = text.replace("SIZE", size)
    rows = dict(captured_stats(text))
    assert "/a" not in rows and rows["/b"].size == 3


def test_a_stat_json_nested_too_deeply_gives_no_rows() -> None:
    assert list(captured_stats("[" * 200000)) == []


def test_an_odd_stat_json_replays_the_stand_in(tmp_path: Path) -> None:
    (tmp_path / ".strata-doctor").mkdir()
    (tmp_path / ".strata-doctor/stat.json").write_text(json.dumps({"/f": {"size": 1, "uid": 0, "mode": 1}})
                                                      .replace('"size": 1', '"size": 1e400'))
    (tmp_path / "f").write_text("abc")
    found = Root(tmp_path).stat("/f")
    assert found is not None and found.size == 3



def test_a_hugetlbfs_walk_never_leaves_the_root(tmp_path: Path, resolver: str) -> None:
    # The mount point links outside with an absolute target (taken inside the root), and a
    # folder in it is swapped for a link to an outside folder while the walk runs: neither
    # lists a file that is not the tree's.
    outside = tmp_path / "outside"
    (outside / "dev/hugepages").mkdir(parents=True)
    (outside / "dev/hugepages/OUTSIDE-orphan").write_bytes(b"")
    tree = tmp_path / "tree"
    (tree / "real/hugepages/sub").mkdir(parents=True)
    (tree / "real/hugepages/sub/stale").write_bytes(b"")
    (tree / "real/hugepages/zz").mkdir()
    (tree / "dev").mkdir()
    os.symlink("/real/hugepages", tree / "dev/hugepages")
    root = Root(tree)
    real_fwalk = os.fwalk

    def swapping(*args: object, **kwargs: object) -> Iterator[object]:
        for step in real_fwalk(*args, **kwargs):  # type: ignore[call-overload]
            if step[0] == ".":  # after the top is listed, before "zz" is opened
                shutil.rmtree(tree / "real/hugepages/zz")
                os.symlink(outside / "dev/hugepages", tree / "real/hugepages/zz")
            yield step

    os.fwalk = swapping  # type: ignore[assignment]
    try:
        found, why = root.files_below("/dev/hugepages", 100)
    finally:
        os.fwalk = real_fwalk
    assert (found, why) == (["/dev/hugepages/sub/stale"], None)
    assert root.files_below("/dev/nothing", 100) == ([], None)
