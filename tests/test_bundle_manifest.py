"""A replayed bundle is the one that was written: ``check --bundle`` verifies each member
against the manifest's size and sha256 (and each link's target), and refuses, with one
line naming the member and exit 2, a bundle changed after it was written."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Callable, Dict, Optional

import pytest

from strata_doctor.output.bundle import TOP
from strata_doctor.output.bundle_replay import unpack
from tests.conftest import run_cli, two_node_files, write_tree
from tests.test_bundle import read_member

Edit = Callable[[str, tarfile.TarInfo, Optional[bytes]], Optional[tarfile.TarInfo]]


def _bundle(tmp_path: Path) -> Path:
    root = write_tree(tmp_path / "h", two_node_files())
    out = tmp_path / "b.tar.gz"
    result = run_cli(["report", "--root", str(root), "--bundle", str(out)])
    assert result.exit_code == 0, result.stderr
    return out


def _rewrite(bundle: Path, out: Path, replace: Dict[str, bytes], drop: str = "",
             add: Optional[Dict[str, bytes]] = None) -> Path:
    """The bundle with members' bytes replaced, one dropped, some added."""
    buffer = io.BytesIO()
    with tarfile.open(bundle) as source, tarfile.open(fileobj=buffer, mode="w") as tar:
        for info in source.getmembers():
            if info.name == drop:
                continue
            data = source.extractfile(info).read() if info.isfile() else None  # type: ignore[union-attr]
            if info.name in replace:
                data = replace[info.name]
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
        for name, data in (add or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out.write_bytes(gzip.compress(buffer.getvalue()))
    return out


def _refused(bundle: Path) -> str:
    result = run_cli(["check", "--bundle", str(bundle)])
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("strata-doctor: error: "), result.stderr
    return lines[0]


def test_an_untouched_bundle_replays(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    assert run_cli(["check", "--bundle", str(bundle)]).exit_code in (0, 1)
    assert (unpack(bundle) / "proc" / "meminfo").is_file()


@pytest.mark.parametrize("name", ["proc/meminfo", "sys/devices/system/node/node1/cpulist"])
def test_a_changed_member_is_refused_by_name(tmp_path: Path, name: str) -> None:
    bundle = _bundle(tmp_path)
    member = f"{TOP}/{name}"
    data = read_member(bundle, member)
    edited = _rewrite(bundle, tmp_path / "edited.tar.gz", {member: data.replace(b"1", b"2", 1) + b" "})
    line = _refused(edited)
    assert f"member '{member}'" in line and "manifest.json" in line and "sha256" in line, line


def test_same_size_other_bytes_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    member = f"{TOP}/proc/meminfo"
    data = read_member(bundle, member)
    flipped = data[:-2] + (b"0" if data[-2:-1] != b"0" else b"1") + data[-1:]
    assert len(flipped) == len(data) and flipped != data
    line = _refused(_rewrite(bundle, tmp_path / "edited.tar.gz", {member: flipped}))
    assert f"member '{member}'" in line


def test_a_listed_member_that_is_gone_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    member = f"{TOP}/proc/meminfo"
    line = _refused(_rewrite(bundle, tmp_path / "edited.tar.gz", {}, drop=member))
    assert f"member '{member}'" in line and "missing" in line


def test_a_member_the_manifest_does_not_list_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    member = f"{TOP}/proc/sys/vm/nr_hugepages"
    line = _refused(_rewrite(bundle, tmp_path / "edited.tar.gz", {}, add={member: b"4096\n"}))
    assert f"member '{member}'" in line and "not listed" in line


def test_a_manifest_without_entries_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    line = _refused(_rewrite(bundle, tmp_path / "edited.tar.gz", {f"{TOP}/manifest.json": b"{}\n"}))
    assert "manifest.json" in line


def test_a_manifest_path_that_leaves_the_bundle_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    manifest = json.loads(read_member(bundle, f"{TOP}/manifest.json"))
    manifest["entries"].append({"path": "/../../../etc/hostname", "kind": "file", "size": 1, "sha256": "0"})
    edited = _rewrite(bundle, tmp_path / "edited.tar.gz",
                      {f"{TOP}/manifest.json": json.dumps(manifest).encode()})
    assert "manifest.json" in _refused(edited)


def test_the_documents_are_not_replayed_and_may_be_read(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    edited = _rewrite(bundle, tmp_path / "edited.tar.gz", {f"{TOP}/report.md": b"# edited by hand\n"})
    assert run_cli(["check", "--bundle", str(edited)]).exit_code in (0, 1)
