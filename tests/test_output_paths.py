"""One rule for every option that writes a file (doctor/output/files.py, docs/report.md#output-paths):
``-`` is standard output; a character device or a FIFO is written through
(tests/test_output_through.py); a folder, socket or symbolic link is refused with one line and
exit 2, and left as it was; a regular file is replaced atomically."""

from __future__ import annotations

import io
import os
import socket
import stat
import tarfile
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from strata_doctor.output.files import OutputError, check_path, write_bytes
from tests.conftest import run_cli

# (command line before the path, the option): every writer of output files.
WRITERS = {
    "report --bundle": (["report", "-o", "{other}"], "--bundle"),
    "report --output": (["report"], "--output"),
    "check --output": (["check", "--format", "prometheus"], "--output"),
    "check --format json --output": (["check", "--format", "json"], "--output"),
}


def command(name: str, host: Path, path: str, other: Path) -> List[str]:
    head, option = WRITERS[name]
    return [a.replace("{other}", str(other)) for a in head] + ["--root", str(host), option, path]


def make_folder(path: Path) -> None:
    path.mkdir()
    (path / "kept").write_text("kept\n")


def make_socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays


def make_link(path: Path) -> None:
    (path.parent / "target").write_text("target\n")
    path.symlink_to("target")


def make_dangling_link(path: Path) -> None:
    path.symlink_to("nowhere")


REFUSED = {
    "folder": (make_folder, "is a folder"),
    "socket": (make_socket, "is a socket"),
    "symlink": (make_link, "is a symbolic link (to target)"),
    "dangling symlink": (make_dangling_link, "is a symbolic link (to nowhere)"),
}


def snapshot(path: Path) -> object:
    info = os.lstat(path)
    extra = os.readlink(path) if stat.S_ISLNK(info.st_mode) else sorted(os.listdir(path)) \
        if stat.S_ISDIR(info.st_mode) else None
    return stat.S_IFMT(info.st_mode), info.st_ino, extra


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_refused_paths_are_left_alone(two_node_host: Path, tmp_path: Path, writer: str, kind: str) -> None:
    make, words = REFUSED[kind]
    out = tmp_path / "out" / "x"
    out.parent.mkdir()
    make(out)
    before = snapshot(out)
    result = run_cli(command(writer, two_node_host, str(out), tmp_path / "report.md"))
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    option = WRITERS[writer][1]
    assert len(lines) == 1 and lines[0].startswith(f"strata-doctor: error: {option} {out}: {words}")
    assert snapshot(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        ["x", "target"] if kind == "symlink" else ["x"])  # no temporary file left
    if kind == "symlink":
        assert (out.parent / "target").read_text() == "target\n"


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_full_device_is_written_through_and_says_so(two_node_host: Path, tmp_path: Path,
                                                      writer: str) -> None:
    """/dev/full is written to, as a shell's > would, and its answer is one line."""
    device = "/dev/full"
    if not os.path.exists(device):
        pytest.skip(f"{device} is missing")
    result = run_cli(command(writer, two_node_host, device, tmp_path / "report.md"))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"strata-doctor: error: {WRITERS[writer][1]} {device}: cannot write: No space left on device"]
    assert stat.S_ISCHR(os.stat(device).st_mode)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_dev_null_takes_any_output(two_node_host: Path, tmp_path: Path, writer: str) -> None:
    """Writing to /dev/null writes nothing and succeeds, as everywhere else."""
    before = os.stat(os.devnull)
    result = run_cli(command(writer, two_node_host, os.devnull, tmp_path / "report.md"))
    assert result.exit_code in ((0, 1) if writer.startswith("check") else (0,)), result.output
    after = os.lstat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert not [p for p in Path("/dev").iterdir() if p.name.startswith(".strata-doctor.")]


def test_dev_null_for_both_report_outputs(two_node_host: Path) -> None:
    result = run_cli(["report", "--root", str(two_node_host), "--bundle", os.devnull, "--output", os.devnull])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "nothing kept" in result.stderr and f"--bundle {os.devnull}" not in result.stderr  # no replay
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)


def test_write_bytes_to_dev_null_writes_nothing() -> None:
    assert write_bytes(os.devnull, b"data") == 4
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)


def _spellings(tmp_path: Path) -> Dict[str, str]:
    """Other names of ``tmp_path/out/r``, which each test below gives to --bundle."""
    (tmp_path / "alias").symlink_to("out")
    return {
        "the same": str(tmp_path / "out" / "r"),
        "with /./": f"{tmp_path}/out/./r",
        "with /../": f"{tmp_path}/out/../out/r",
        "relative": "out/r",
        "through a linked folder": str(tmp_path / "alias" / "r"),
    }


SPELLINGS = ["the same", "with /./", "with /../", "relative", "through a linked folder"]


@pytest.mark.parametrize(("spelling", "exists"), [
    *((name, False) for name in SPELLINGS), *((name, True) for name in SPELLINGS), ("a hard link", True),
])
def test_report_refuses_one_file_for_report_and_bundle(two_node_host: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       spelling: str, exists: bool) -> None:
    monkeypatch.chdir(tmp_path)
    bundle = tmp_path / "out" / "r"
    bundle.parent.mkdir()
    names = _spellings(tmp_path)
    if spelling == "a hard link":  # of an existing file
        names[spelling] = str(tmp_path / "out" / "r2")
    if exists:
        bundle.write_text("kept\n")
        if spelling == "a hard link":
            os.link(bundle, names[spelling])
    output = names[spelling]
    result = run_cli(["report", "--root", str(two_node_host), "--bundle", str(bundle), "--output", output])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"strata-doctor: error: --output {output}: is the file --bundle names ({bundle}); "
        "give each its own file"]
    if exists:
        assert bundle.read_text() == "kept\n"
    else:
        assert not bundle.exists()
    assert sorted(p.name for p in bundle.parent.iterdir()) == (
        ["r", "r2"] if spelling == "a hard link" else ["r"] if exists else [])


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_regular_file_is_replaced(two_node_host: Path, tmp_path: Path, writer: str) -> None:
    out = tmp_path / "out"
    out.write_text("old\n")
    out.chmod(0o640)
    result = run_cli(command(writer, two_node_host, str(out), tmp_path / "report.md"))
    assert result.exit_code in ((0, 1) if writer.startswith("check") else (0,)), result.output
    assert out.read_bytes() != b"old\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".strata-doctor.")]
    if writer != "check --output":  # the fleet files are 0644 for the collector
        assert out.stat().st_mode & 0o777 == 0o640


def test_dash_is_standard_output_for_check_and_report(two_node_host: Path) -> None:
    check = run_cli(["check", "--root", str(two_node_host), "--format", "nfd", "--output", "-"])
    assert check.exit_code in (0, 1) and "strata-doctor.ready=" in check.stdout
    assert not Path("-").exists()
    report = run_cli(["report", "--root", str(two_node_host), "--output", "-"])
    assert report.exit_code == 0 and report.stdout.startswith("#")
    assert not Path("-").exists()


def test_bundle_dash_is_standard_output(two_node_host: Path, tmp_path: Path) -> None:
    md = tmp_path / "report.md"
    result = run_cli(["report", "--root", str(two_node_host), "--output", str(md), "--bundle", "-"])
    assert result.exit_code == 0, result.output
    with tarfile.open(fileobj=io.BytesIO(result.stdout_bytes), mode="r:gz") as tar:
        names = tar.getnames()
    assert "strata-doctor-bundle/manifest.json" in names
    assert md.read_text().startswith("#")
    assert "wrote the bundle to standard output" in result.stderr
    assert not Path("-").exists() and not (tmp_path / "-").exists()


def test_bundle_dash_needs_the_report_elsewhere(two_node_host: Path) -> None:
    for extra in ([], ["--output", "-"]):
        result = run_cli(["report", "--root", str(two_node_host), "--bundle", "-", *extra])
        assert result.exit_code == 2
        assert len(result.stderr.splitlines()) == 1 and "--output FILE" in result.stderr


def test_a_missing_folder_is_one_line(two_node_host: Path, tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "file"
    for writer in WRITERS:
        result = run_cli(command(writer, two_node_host, str(out), tmp_path / "report.md"))
        assert result.exit_code == 2, writer
        assert result.stderr.splitlines() == [
            f"strata-doctor: error: {WRITERS[writer][1]} {out}: cannot write: No such file or directory"]


def test_write_bytes_refuses_a_path_that_changed_while_writing(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule is checked again right before the rename."""
    out = tmp_path / "out"
    calls: List[str] = []
    real: Callable[[str], None] = check_path

    def swap_then_check(path: str) -> None:
        calls.append(path)
        if len(calls) == 2:
            os.mkfifo(path)
        real(path)

    monkeypatch.setattr("strata_doctor.output.files.check_path", swap_then_check)
    with pytest.raises(OutputError, match="is a FIFO"):
        write_bytes(str(out), b"data")
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
