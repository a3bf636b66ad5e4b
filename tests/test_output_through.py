"""Character devices and FIFOs are written through, as every Unix tool writes to them
(doctor/output/files.py, docs/report.md#output-paths): /dev/null takes any output, a FIFO's
reader gets the bytes, and neither is replaced. ``check --output`` takes every format."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import threading
from pathlib import Path
from typing import List

import pytest

from strata_doctor.output.files import OutputError, check_path, write_bytes
from tests.conftest import run_cli

# Every command line that names an output path, with {path} where the path goes.
WRITERS = {
    "check text": ["check", "--output", "{path}"],
    "check quiet": ["check", "-q", "--output", "{path}"],
    "check json": ["check", "--format", "json", "--output", "{path}"],
    "check prometheus": ["check", "--format", "prometheus", "--output", "{path}"],
    "check nfd": ["check", "--format", "nfd", "--output", "{path}"],
    "report": ["report", "--output", "{path}"],
    "report json": ["report", "--format", "json", "--output", "{path}"],
    "report --bundle": ["report", "--output", "{other}", "--bundle", "{path}"],
}


def command(name: str, host: Path, path: str, other: Path) -> List[str]:
    args = [a.replace("{path}", path).replace("{other}", str(other)) for a in WRITERS[name]]
    return [*args, "--root", str(host)]


class Reader(threading.Thread):
    """Reads a FIFO to its end, as the other side of a pipe would."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.data = b""

    def run(self) -> None:
        with open(self.path, "rb") as fifo:
            self.data = fifo.read()


def read_back(name: str, data: bytes) -> str:
    """What the reader got, as text (a bundle unpacked to its manifest)."""
    if name != "report --bundle":
        return data.decode("utf-8")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return "\n".join(tar.getnames())


EXPECTED = {
    "check text": "ready (exit",
    "check quiet": "",
    "check json": '"schema"',
    "check prometheus": "strata_doctor_",
    "check nfd": "strata-doctor.ready=",
    "report": "# ",
    "report json": '"report"',
    "report --bundle": "strata-doctor-bundle/manifest.json",
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_fifo_gets_the_output_and_stays_a_fifo(two_node_host: Path, tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fifo = out / "pipe"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    reader.start()
    result = run_cli(command(name, two_node_host, str(fifo), out / "report.md"))
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert result.exit_code in ((0, 1) if name.startswith("check") else (0,)), result.output
    assert result.stdout == ""  # everything went to the FIFO
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    got = read_back(name, reader.data)
    assert EXPECTED[name] in got
    if name == "check quiet":
        assert got == "" if result.exit_code == 0 else got.strip()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["pipe", "report.md"] if name == "report --bundle" else ["pipe"])  # no temporary file


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_dev_null_takes_the_output_of_every_writer(two_node_host: Path, tmp_path: Path, name: str) -> None:
    before = os.stat(os.devnull)
    result = run_cli(command(name, two_node_host, os.devnull, tmp_path / "report.md"))
    assert result.exit_code in ((0, 1) if name.startswith("check") else (0,)), result.output
    assert result.stdout == ""
    after = os.lstat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_folder_is_still_refused_in_one_line(two_node_host: Path, tmp_path: Path, name: str) -> None:
    folder = tmp_path / "dir"
    folder.mkdir()
    result = run_cli(command(name, two_node_host, str(folder), tmp_path / "report.md"))
    assert result.exit_code == 2
    option = "--bundle" if name == "report --bundle" else "--output"
    assert result.stderr.splitlines() == [
        f"strata-doctor: error: {option} {folder}: is a folder, not a regular file; refusing to replace it"]
    assert result.stdout == ""


def test_check_json_to_a_file_leaves_stdout_clean(two_node_host: Path, tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    result = run_cli(["check", "--root", str(two_node_host), "--format", "json", "--output", str(out)])
    plain = run_cli(["check", "--root", str(two_node_host), "--format", "json"])
    assert result.exit_code == plain.exit_code
    assert result.stdout == ""
    assert json.loads(out.read_text()) == json.loads(plain.stdout)


def test_check_text_to_a_file_has_no_colour(two_node_host: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("strata_doctor.cli.check.use_color", lambda: True)
    out = tmp_path / "check.txt"
    result = run_cli(["check", "--root", str(two_node_host), "--output", str(out)])
    assert result.stdout == ""
    text = out.read_text()
    assert "\x1b[" not in text and "(exit " in text


def test_write_bytes_writes_through_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    reader.start()
    assert write_bytes(str(fifo), b"x" * 200_000) == 200_000  # more than a pipe holds
    reader.join(timeout=30)
    assert reader.data == b"x" * 200_000
    check_path(str(fifo))  # taken, not refused


def test_a_socket_is_still_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()
    with pytest.raises(OutputError, match="is a socket, not a regular file"):
        write_bytes(str(path), b"data")
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_terminal_takes_the_report_but_not_the_bundle(two_node_host: Path, tmp_path: Path) -> None:
    """A terminal is a character device, written through; the bundle is binary, refused there."""
    main, side = os.openpty()
    try:
        terminal = os.ttyname(side)
        refused = run_cli(["report", "--root", str(two_node_host), "--output", str(tmp_path / "r.md"),
                           "--bundle", terminal])
        assert refused.exit_code == 2
        assert refused.stderr.splitlines() == [
            f"strata-doctor: error: --bundle {terminal}: is a terminal; the bundle is binary: "
            "name a file or a pipe"]
        shown = run_cli(["check", "--root", str(two_node_host), "-q", "--output", terminal])
        assert shown.exit_code in (0, 1) and shown.stdout == ""
    finally:
        os.close(side)
        os.close(main)
