"""Report bundles: replay gives the same findings and facts, the manifest is honest, the
archive is deterministic and small, and unpacking refuses anything unsafe."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

from strata_doctor.bundle import TOP, unpack
from tests.conftest import HOSTS, run_cli, two_node_files, write_tree
from tests.test_report import planted_files

ROUND_TRIP_HOSTS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []
ONE_MIB = 2**20


def check_json(*args: str) -> Dict[str, Any]:
    """``strata-doctor check --format json`` as data."""
    result = run_cli(["check", *args, "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    data: Dict[str, Any] = json.loads(result.stdout)
    return data


def make_bundle(root: Path, out: Path, *extra: str) -> Path:
    """Run ``report --bundle`` on a captured root."""
    result = run_cli(["report", "--root", str(root), "--bundle", str(out), *extra])
    assert result.exit_code == 0, result.stderr
    return out


def members(bundle: Path) -> Dict[str, tarfile.TarInfo]:
    """The archive's members by name."""
    with tarfile.open(bundle) as tar:
        return {m.name: m for m in tar.getmembers()}


def read_member(bundle: Path, name: str) -> bytes:
    """One member's bytes."""
    with tarfile.open(bundle) as tar:
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read()


# -- replay ------------------------------------------------------------------------
@pytest.mark.parametrize("host", ROUND_TRIP_HOSTS)
def test_fixture_round_trip(host: str, tmp_path: Path) -> None:
    # Unredacted, a replay must match byte for byte in every fact and finding.
    bundle = make_bundle(HOSTS / host, tmp_path / "b.tar.gz", "--no-redact")
    assert check_json("--bundle", str(bundle)) == check_json("--root", str(HOSTS / host))
    assert bundle.stat().st_size < ONE_MIB


@pytest.mark.parametrize("host", ROUND_TRIP_HOSTS)
def test_redacted_fixture_round_trip_keeps_every_verdict(host: str, tmp_path: Path) -> None:
    # Redaction rewrites private strings (a scope's UUID, a user name), never a verdict.
    bundle = make_bundle(HOSTS / host, tmp_path / "b.tar.gz")

    def verdicts(data: Dict[str, Any]) -> List[Any]:
        return [(f["check"], f["id"], f["severity"]) for f in data["findings"]]

    replayed = check_json("--bundle", str(bundle))
    original = check_json("--root", str(HOSTS / host))
    assert verdicts(replayed) == verdicts(original)
    assert replayed["facts"]["numa"] == original["facts"]["numa"]


def test_planted_round_trip_through_unpacked_folder(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "h", planted_files())
    bundle = make_bundle(root, tmp_path / "b.tar.gz")
    unpacked = tmp_path / "unpacked"
    with tarfile.open(bundle) as tar:
        tar.extractall(unpacked)  # what a maintainer does by hand
    replayed = check_json("--root", str(unpacked / TOP))
    assert replayed == check_json("--root", str(root))
    assert replayed == check_json("--bundle", str(bundle))
    saved = json.loads(read_member(bundle, f"{TOP}/check.json"))
    assert saved["findings"] == replayed["findings"]


def test_settings_given_on_the_command_line_travel(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "h", two_node_files())
    config = tmp_path / "engine.yaml"
    config.write_text("arena: 10GiB\nkv: 1GiB\nheadroom: 2GiB\n")
    bundle = make_bundle(root, tmp_path / "b.tar.gz", "--config", str(config), "--unit", "moe.service")
    expected = check_json("--root", str(root), "--config", str(config), "--unit", "moe.service")
    replayed = check_json("--bundle", str(bundle))
    assert replayed == expected
    assert replayed["engine"]["arena_bytes"] == 10 * 2**30


def test_live_host_bundle_replays_with_the_same_findings(tmp_path: Path) -> None:
    if not Path("/proc/self/status").exists() or not Path("/sys/devices/system").exists():
        pytest.skip("needs a Linux /proc and /sys")
    bundle = tmp_path / "live.tar.gz"
    result = run_cli(["report", "--bundle", str(bundle)])
    assert result.exit_code == 0, result.stderr
    saved = json.loads(read_member(bundle, f"{TOP}/check.json"))
    replayed = check_json("--bundle", str(bundle))
    assert replayed == saved
    live = check_json()
    assert _finding_keys(live) == _finding_keys(replayed)
    manifest = json.loads(read_member(bundle, f"{TOP}/manifest.json"))
    reasons = {row["what"]: row["reason"] for row in manifest["unreadable"]}
    assert all(reasons.values()), "every missing piece says why"
    if shutil.which("nvidia-smi") is None:
        assert reasons["$ nvidia-smi"] == "not found"
    assert bundle.stat().st_size < ONE_MIB


def _finding_keys(data: Dict[str, Any]) -> List[Any]:
    return [(f["check"], f["id"], f["severity"]) for f in data["findings"]]


# -- manifest and archive ----------------------------------------------------------
def test_manifest_lists_every_member_with_size_and_hash(tmp_path: Path) -> None:
    bundle = make_bundle(write_tree(tmp_path / "h", planted_files()), tmp_path / "b.tar.gz")
    manifest = json.loads(read_member(bundle, f"{TOP}/manifest.json"))
    listed = {row["path"]: row for row in manifest["entries"]}
    found = members(bundle)
    for name, info in found.items():
        path = name[len(TOP):]
        if path in ("", "/manifest.json", "/report.md", "/check.json"):
            continue
        row = listed.pop(path)
        if info.isfile():
            data = read_member(bundle, name)
            assert (row["size"], row["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
        elif info.issym():
            assert row["target"] == info.linkname
    assert not listed, f"manifest lists entries the archive lacks: {sorted(listed)}"
    reasons = {row["what"]: row["reason"] for row in manifest["unreadable"]}
    assert reasons["/proc/uptime"] == "missing"
    assert reasons["$ systemctl is-active systemd-oomd.service"].startswith("not found")
    assert manifest["redacted"] is True and "host" in manifest["redactions"]


def test_links_stay_links_and_only_read_files_are_kept(tmp_path: Path) -> None:
    files = planted_files()
    files["/home/alice/secret.txt"] = "never read by any check\n"
    files["/sys/devices/system/node/node0/numastat"] = "numa_hit 1\n"
    bundle = make_bundle(write_tree(tmp_path / "h", files), tmp_path / "b.tar.gz")
    found = members(bundle)
    link = found[f"{TOP}/sys/bus/pci/devices/0000:81:00.0"]
    assert link.issym() and link.linkname == "../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0"
    driver = found[f"{TOP}/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/driver"]
    assert driver.issym() and driver.linkname.endswith("bus/pci/drivers/nvidia")
    assert found[f"{TOP}/sys/class/dmi/id"].issym()
    names = " ".join(found)
    assert "secret.txt" not in names and "numastat" not in names and "passwd" not in names
    assert all(m.mtime == 0 and m.uid == m.gid == 0 and not m.uname for m in found.values())


def test_bundles_are_byte_for_byte_deterministic(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "h", planted_files())
    first = make_bundle(root, tmp_path / "a.tar.gz").read_bytes()
    second = make_bundle(root, tmp_path / "b.tar.gz").read_bytes()
    assert first == second


def test_no_redact_bundle_keeps_values(tmp_path: Path) -> None:
    bundle = make_bundle(write_tree(tmp_path / "h", planted_files()), tmp_path / "b.tar.gz", "--no-redact")
    unit = read_member(bundle, f"{TOP}/etc/systemd/system/strata.service")
    assert b"/home/alice/" in unit
    assert json.loads(read_member(bundle, f"{TOP}/manifest.json"))["redacted"] is False


# -- unpacking refuses what a bundle never holds -----------------------------------
def _tar(tmp_path: Path, *infos: tarfile.TarInfo, manifest: bool = True) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        if manifest:
            data = b"{}"
            info = tarfile.TarInfo(f"{TOP}/manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in infos:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(("member", "message"), [
    (_member("/etc/passwd"), "unsafe member name"),
    (_member(f"{TOP}/../../x"), "unsafe member name"),
    (_member("elsewhere/x"), "outside"),
    (_member(f"{TOP}/dev/sda", tarfile.BLKTYPE), "not a file, folder or symlink"),
    (_member(f"{TOP}/dev/tty", tarfile.CHRTYPE), "not a file, folder or symlink"),
    (_member(f"{TOP}/fifo", tarfile.FIFOTYPE), "not a file, folder or symlink"),
    (_member(f"{TOP}/hard", tarfile.LNKTYPE, f"{TOP}/manifest.json"), "not a file, folder or symlink"),
    (_member(f"{TOP}/etc/abs", tarfile.SYMTYPE, "/etc/shadow"), "absolute"),
    (_member(f"{TOP}/etc/up", tarfile.SYMTYPE, "../../../etc/shadow"), "outside the bundle"),
])
def test_unpack_refuses(member: tarfile.TarInfo, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        unpack(_tar(tmp_path, member))


def test_unpack_needs_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"manifest\.json"):
        unpack(_tar(tmp_path, _member(f"{TOP}/proc/cpuinfo"), manifest=False))


def test_check_on_a_bad_bundle_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = _tar(tmp_path, _member(f"{TOP}/etc/abs", tarfile.SYMTYPE, "/etc/shadow"))
    result = run_cli(["check", "--bundle", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "absolute" in result.stderr
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    assert run_cli(["check", "--bundle", str(junk)]).exit_code == 2


def test_unpacked_links_stay_inside(tmp_path: Path) -> None:
    bundle = make_bundle(write_tree(tmp_path / "h", planted_files()), tmp_path / "b.tar.gz")
    top = unpack(bundle)
    base = os.path.realpath(top.parent)
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                assert os.path.realpath(path).startswith(base + os.sep)


def test_process_environments_keep_names_only(tmp_path: Path) -> None:
    files = planted_files()
    files["/proc/1/environ"] = "container=docker\0HF_TOKEN=hf_abcdef\0PATH=/usr/bin\0"
    bundle = make_bundle(write_tree(tmp_path / "h", files), tmp_path / "b.tar.gz")
    environ = read_member(bundle, f"{TOP}/proc/1/environ")
    assert environ == b"container=docker\0HF_TOKEN=\0PATH=\0"


def test_a_file_that_is_not_a_bundle_is_one_line_exit_2(tmp_path: Path) -> None:
    junk = tmp_path / "notes.tar.gz"
    junk.write_text("not an archive\n")
    result = run_cli(["check", "--bundle", str(junk)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and str(junk) in result.stderr
