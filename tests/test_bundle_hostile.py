"""Bundles from anyone (docs/report.md, "Replay"): a bundle that is no regular file, too
many members, too much data, a manifest nested too deeply or a member the manifest does not
list is refused with one line and exit 2; a signal during a replay leaves no temporary
folder behind."""

from __future__ import annotations

import fcntl
import gzip
import io
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from strata_doctor.output import bundle_replay
from strata_doctor.output.bundle import TOP
from strata_doctor.output.bundle_replay import unpack
from tests.conftest import HOSTS, REPO, run_cli, two_node_files, usage_error, write_tree

MEMBERS_BOUND = 50_000
"""The most members a bundle may hold, as docs/report.md says (a 4-socket server's holds 1,103)."""
UNPACKED_BOUND = 256 * 2**20
"""The most a bundle may unpack to, as docs/report.md says."""

Extra = Tuple[tarfile.TarInfo, Optional[bytes]]


@pytest.fixture(autouse=True)
def _own_signals() -> Iterator[None]:
    """Unpacking in this process takes SIGTERM and SIGINT over; give them back after each test."""
    yield
    bundle_replay.release()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of the small two-node host, as ``report --bundle`` writes it."""
    folder = tmp_path_factory.mktemp("bundle")
    root = write_tree(folder / "h", two_node_files())
    out = folder / "b.tar.gz"
    result = run_cli(["report", "--root", str(root), "--bundle", str(out)])
    assert result.exit_code == 0, result.stderr
    return out


def rebuild(source: Path, out: Path, replace: Optional[Dict[str, bytes]] = None,
            extra: Optional[List[Extra]] = None) -> Path:
    """``source`` with some members' bytes replaced and more members added."""
    buffer = io.BytesIO()
    with tarfile.open(source) as old, tarfile.open(fileobj=buffer, mode="w") as tar:
        for info in old.getmembers():
            handle = old.extractfile(info) if info.isfile() else None
            data = handle.read() if handle is not None else None
            if info.name in (replace or {}):
                data = (replace or {})[info.name]
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
        for info, data in extra or []:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    out.write_bytes(gzip.compress(buffer.getvalue()))
    return out


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"") -> Extra:
    info = tarfile.TarInfo(f"{TOP}/{name}")
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (data if kind == tarfile.REGTYPE else None)


# -- a manifest nested too deeply (a RecursionError before) ----------------------------
@pytest.mark.parametrize("manifest", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"entries": [{"path": "/x", "kind": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
], ids=["array", "inside-an-entry"])
def test_a_deeply_nested_manifest_is_one_line(bundle: Path, tmp_path: Path, manifest: bytes) -> None:
    deep = rebuild(bundle, tmp_path / "deep.tar.gz", {f"{TOP}/manifest.json": manifest})
    line = usage_error(["check", "--bundle", str(deep)])
    assert f"{TOP}/manifest.json" in line and "nested too deeply" in line, line


# -- a bundle that is no regular file (``/dev/zero`` hung before) -----------------------
def run_module(args: List[str], env: Optional[Dict[str, str]] = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m strata_doctor ARGS`` in a process of its own, killed after ``timeout``."""
    return subprocess.run([sys.executable, "-m", "strata_doctor", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO, check=False)


@pytest.mark.parametrize("kind", ["/dev/zero", "FIFO", "/dev/null"])
def test_a_bundle_that_is_no_regular_file_is_one_line(tmp_path: Path, kind: str) -> None:
    path = kind
    if kind == "FIFO":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)  # nobody writes: a blocking open waits for ever
    done = run_module(["check", "--bundle", path], timeout=30)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    words = "a FIFO" if kind == "FIFO" else "a character device"
    assert len(lines) == 1 and path in lines[0] and f"{words}, not a regular file" in lines[0], lines


def test_unpack_refuses_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a folder, not a regular file"):
        unpack(tmp_path)


# -- too many members, too much data -----------------------------------------------------
def many_members(path: Path, count: int) -> Path:
    """An archive of a manifest and ``count`` more empty files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for n in range(count):
            tar.addfile(tarfile.TarInfo(f"{TOP}/many/{n}"), io.BytesIO(b""))
    path.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=1))
    return path


def test_the_documented_bounds_are_the_code_s() -> None:
    assert (bundle_replay.MAX_MEMBERS, bundle_replay.MAX_UNPACKED) == (MEMBERS_BOUND, UNPACKED_BOUND)


def test_too_many_members_are_refused_before_unpacking(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    path = many_members(tmp_path / "many.tar.gz", MEMBERS_BOUND + 1)
    line = usage_error(["check", "--bundle", str(path)])
    assert str(path) in line and f"more than {MEMBERS_BOUND:,} members" in line, line
    assert list(scratch.iterdir()) == []  # nothing was unpacked


def test_the_count_stops_at_the_first_member_over_the_bound(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_replay, "MAX_MEMBERS", 10)
    read: List[str] = []
    real = tarfile.TarInfo.fromtarfile.__func__  # type: ignore[attr-defined]

    def counted(cls: type, tar: tarfile.TarFile) -> tarfile.TarInfo:
        info: tarfile.TarInfo = real(cls, tar)
        read.append(info.name)
        return info

    monkeypatch.setattr(tarfile.TarInfo, "fromtarfile", classmethod(counted))
    with pytest.raises(ValueError, match="more than 10 members"):
        unpack(many_members(tmp_path / "many.tar.gz", 1000))
    assert len(read) == 11  # the headers of the bound's members and one more, no further


def test_a_member_larger_than_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_replay, "MAX_UNPACKED", 2**20)
    path = tmp_path / "big.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"{TOP}/big")
        info.size = 2**20 + 1
        tar.addfile(info, io.BytesIO(b"\0" * info.size))
    with pytest.raises(ValueError, match="unpacks to more than 1 MiB"):
        unpack(path)


def test_headers_count_toward_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pax header is data tarfile reads whole: 2 MiB of it is over a 1 MiB bound."""
    monkeypatch.setattr(bundle_replay, "MAX_UNPACKED", 2**20)
    path = tmp_path / "pax.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"{TOP}/manifest.json")
        info.pax_headers = {"comment": "x" * 2 * 2**20}
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(ValueError, match="unpacks to more than 1 MiB"):
        unpack(path)


# -- members the manifest does not list, at every level -----------------------------------
@pytest.mark.parametrize(("extra", "name"), [
    (member("extra", tarfile.SYMTYPE, "manifest.json"), "extra"),
    (member("etc-again", tarfile.SYMTYPE, "etc"), "etc-again"),
    (member("notes.txt", data=b"hello\n"), "notes.txt"),
    (member("junk", tarfile.DIRTYPE), "junk"),
    (member("proc/junk", tarfile.DIRTYPE), "proc/junk"),
], ids=["link-to-a-file", "link-to-a-folder", "file", "folder", "folder-below"])
def test_an_unlisted_member_at_the_top_is_refused(bundle: Path, tmp_path: Path, extra: Extra,
                                                  name: str) -> None:
    edited = rebuild(bundle, tmp_path / "edited.tar.gz", extra=[extra])
    line = usage_error(["check", "--bundle", str(edited)])
    assert f"member '{TOP}/{name}' is not listed in manifest.json" in line, line


def test_a_hard_link_at_the_top_is_refused(bundle: Path, tmp_path: Path) -> None:
    hard = member("hard", tarfile.LNKTYPE, f"{TOP}/manifest.json")
    line = usage_error(["check", "--bundle", str(rebuild(bundle, tmp_path / "e.tar.gz", extra=[hard]))])
    assert f"'{TOP}/hard'" in line, line


def test_a_member_listed_twice_is_refused_not_written_over(bundle: Path, tmp_path: Path) -> None:
    # Every file of the replay is created new: a second member of the same name (here the
    # host's meminfo, the second holding other bytes) is refused, never written over.
    with tarfile.open(bundle) as tar:
        name = next(n for n in tar.getnames() if n.endswith("/proc/meminfo"))
    again = member(name[len(TOP) + 1:], data=b"MemTotal: 1 kB\n")
    line = usage_error(["check", "--bundle", str(rebuild(bundle, tmp_path / "e.tar.gz", extra=[again]))])
    assert f"member '{name}' appears twice" in line, line


def test_a_document_that_is_a_link_is_refused(bundle: Path, tmp_path: Path) -> None:
    """``report.md`` and ``check.json`` are not listed: they may be read, so they must be files."""
    buffer = io.BytesIO()
    with tarfile.open(bundle) as old, tarfile.open(fileobj=buffer, mode="w") as tar:
        for info in old.getmembers():
            if info.name == f"{TOP}/report.md":
                info, _ = member("report.md", tarfile.SYMTYPE, "proc/meminfo")
                tar.addfile(info)
                continue
            handle = old.extractfile(info) if info.isfile() else None
            tar.addfile(info, handle)
    edited = tmp_path / "edited.tar.gz"
    edited.write_bytes(gzip.compress(buffer.getvalue()))
    line = usage_error(["check", "--bundle", str(edited)])
    assert f"member '{TOP}/report.md' is not listed in manifest.json" in line, line


# -- a signal during a replay removes its temporary folder --------------------------------
def _block_when_full(fd: int) -> None:
    """A pipe of one page: the replay's JSON fills it, so the process waits, folder and all."""
    fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)


def _wait_for(predicate: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the replay never made its temporary folder")
        time.sleep(0.01)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_replay_leaves_no_folder_behind(tmp_path: Path, signum: int) -> None:
    seed = HOSTS / "seed-box"
    if not seed.is_dir():
        pytest.skip("tests/fixtures/hosts/seed-box is missing")
    out = tmp_path / "seed.tar.gz"
    assert run_cli(["report", "--root", str(seed), "--bundle", str(out)]).exit_code == 0
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    read_end, write_end = os.pipe()
    _block_when_full(write_end)
    # Started from a shell's background job, SIGINT would be ignored: the replay keeps that.
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata_doctor", "check", "--bundle", str(out), "--format", "json"],
        stdout=write_end, stderr=subprocess.PIPE, env={**os.environ, "TMPDIR": str(scratch)},
        cwd=REPO, preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))
    os.close(write_end)
    try:
        _wait_for(lambda: any(scratch.iterdir()))
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)
    assert list(scratch.iterdir()) == []
    assert proc.returncode == -signum, stderr
    assert b"Traceback" not in stderr
