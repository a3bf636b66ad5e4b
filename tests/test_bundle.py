"""Report bundles: replay gives the same findings and facts, the manifest is honest, the
archive is deterministic and small, and unpacking refuses anything unsafe."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any, Dict

import pytest

from strata_doctor.output.bundle import TOP
from strata_doctor.output.bundle_replay import unpack
from tests.conftest import copy_host, run_cli, two_node_files, write_tree
from tests.test_report import archive_views, planted_files


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


# -- replay (every host: tests/test_replay.py) --------------------------------------
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
    absent = {row["what"]: row["reason"] for row in manifest["absent"]}
    assert absent["/proc/uptime"] == "missing"
    assert absent["$ systemctl is-active systemd-oomd.service"].startswith("not found")
    assert not {row["what"] for row in manifest["unreadable"]} & set(absent)
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


@pytest.mark.parametrize(("recorded", "bundled"), [
    ("/a/../b", "/b"), ("/a/x/../../b", "/b"), ("/../b", "/b"), ("/a/..", "/"), ("/a/./x/../b", "/a/b"),
])
def test_a_recorded_path_with_dots_is_bundled_under_its_plain_name(tmp_path: Path, recorded: str,
                                                                   bundled: str) -> None:
    """``..`` back to the root gives ``/b``, never ``//b`` (a member name with an empty part)."""
    from strata_doctor.output.bundle import _Builder
    from strata_doctor.root import Root

    root = write_tree(tmp_path / "h", {"/a/x/f": "1\n", "/b": "2\n"})
    assert _Builder(Root(root)).resolve(recorded, follow_last=False) == bundled


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


# -- secrets stay on the host (docs/report.md, "Redaction") -------------------------
SECRETS = (
    "sk-PLANTED-api-key", "hf_PLANTEDtoken", "PLANTED-db-pass", "PLANTED/aws+secret", "PLANTED-cookie",
    "PLANTED-url-pass", "PLANTED-json-pw", "PLANTED-env-token", "PLANTED-env-aws", "PLANTED-sshpass",
    "PLANTED-other-host", "PLANTED-unit-token", "PLANTED-exec-key", "PLANTED-ca-path", "PLANTED-exec-auth",
)
"""Credentials planted in command lines, environments, JSON arguments and the unit file."""
ENGINE_CMDLINE = "\0".join((
    "python3", "serve/server.py", "--api-key", "sk-PLANTED-api-key", "--hf-token=hf_PLANTEDtoken",
    "DB_PASSWORD=PLANTED-db-pass", "--env",
    '{"AWS_CA_BUNDLE": "/etc/ssl/PLANTED-ca-path.pem", "AWS_SECRET_ACCESS_KEY": "PLANTED/aws+secret"}',
    "--session-cookie", "PLANTED-cookie", "--db", "postgres://strata:PLANTED-url-pass@db:5432/moe",
    "--opts", '{"auth": {"user": "svc", "password": "PLANTED-json-pw"}, "workers": 44}',
    "--port", "8000", "",
))


def _process(pid: int, name: str, uid: int) -> Dict[str, str]:
    stat = f"{pid} ({name}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 500 100 0 0 20 0 1 0 4000 " + "0 " * 31
    return {
        f"/proc/{pid}/status": f"Name:\t{name}\nPPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                               "Cpus_allowed_list:\t0-7\nHugetlbPages:\t0 kB\n",
        f"/proc/{pid}/stat": stat.rstrip() + "\n",
    }


def secret_files() -> Dict[str, str]:
    """The planted host, an engine started by hand with secrets on its command line and
    in its environment, another process with a password on its command line, and a unit
    file with a token."""
    files = planted_files()
    files.update(_process(4242, "python3", 1000))
    files.update(_process(777, "sshpass", 1000))
    files["/proc/4242/cmdline"] = ENGINE_CMDLINE
    files["/proc/4242/environ"] = "HF_TOKEN=PLANTED-env-token\0"  # read by no check
    files["/proc/1/environ"] = "HF_TOKEN=PLANTED-env-token\0AWS_SECRET_ACCESS_KEY=PLANTED-env-aws\0"
    files["/proc/777/cmdline"] = "sshpass\0-p\0PLANTED-sshpass\0ssh\0PLANTED-other-host\0"
    files["/proc/uptime"] = "90000.00 170000.00\n"
    files["/etc/systemd/system/strata.service"] += (
        "Environment=HF_TOKEN=PLANTED-unit-token\n"
        "ExecStartPre=/usr/bin/strata-fetch --api-key PLANTED-exec-key --auth PLANTED-exec-auth\n"
    )
    return files


def test_secrets_are_absent_from_the_report_and_every_byte_of_the_bundle(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "h", secret_files())
    bundle = tmp_path / "b.tar.gz"
    markdown = run_cli(["report", "--root", str(root), "--bundle", str(bundle)])
    assert markdown.exit_code == 0, markdown.stderr
    data = run_cli(["report", "--root", str(root), "--format", "json"])
    assert data.exit_code == 0, data.stderr
    views = {"Markdown": markdown.stdout.encode(), "JSON": data.stdout.encode(), **archive_views(bundle)}
    for where, content in views.items():
        for secret in SECRETS:
            assert secret.encode() not in content, f"{secret!r} survived in {where}"

    # The engine's command line is kept, masked, so the replay finds the same engine.
    cmdline = read_member(bundle, f"{TOP}/proc/4242/cmdline").split(b"\0")
    assert cmdline[:3] == [b"python3", b"serve/server.py", b"--api-key"]
    assert b"--port" in cmdline and b"8000" in cmdline and b"AWS_CA_BUNDLE" in b" ".join(cmdline)
    assert all(re.fullmatch(rb"secret-\d+", cmdline[i + 1]) for i, w in enumerate(cmdline)
               if w in (b"--api-key", b"--session-cookie"))
    # Another process's command line says nothing about the engine: it stays home.
    assert f"{TOP}/proc/777/cmdline" not in members(bundle)
    assert f"{TOP}/proc/777/status" in members(bundle)
    assert f"{TOP}/proc/4242/environ" not in members(bundle)
    assert read_member(bundle, f"{TOP}/proc/1/environ") == b"HF_TOKEN=\0AWS_SECRET_ACCESS_KEY=\0"

    manifest = json.loads(read_member(bundle, f"{TOP}/manifest.json"))
    masked = manifest["redactions"]["secret"]
    assert masked >= 10  # seven on the command line (two in JSON), three in the unit file
    assert f"{masked} secrets" in markdown.stdout
    replayed = check_json("--bundle", str(bundle))
    assert replayed == json.loads(read_member(bundle, f"{TOP}/check.json"))
    engine = check_json("--root", str(root))["facts"]
    assert json.dumps(engine).count("4242") == json.dumps(replayed["facts"]).count("4242") > 0


def test_command_line_secrets_are_masked_without_redaction_too(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "h", secret_files())
    bundle = make_bundle(root, tmp_path / "b.tar.gz", "--no-redact")
    everything = b"".join(archive_views(bundle).values())
    for secret in SECRETS[:10]:  # command lines and environments; the unit file is kept
        assert secret.encode() not in everything, secret
    assert b"PLANTED-unit-token" in read_member(bundle, f"{TOP}/etc/systemd/system/strata.service")


def test_passwd_loses_its_gecos_field(tmp_path: Path) -> None:
    root = copy_host("hugetlbfs-orphans", tmp_path / "h")
    passwd = root / "etc/passwd"
    gecos = "Maria Kowalski,Room 12,555-0199"
    passwd.write_text(passwd.read_text().replace("Strata inference engine", gecos))
    bundle = make_bundle(root, tmp_path / "b.tar.gz")
    for where, content in archive_views(bundle).items():
        assert b"Maria" not in content and b"555-0199" not in content, where
    rows = [line.split(b":") for line in read_member(bundle, f"{TOP}/etc/passwd").splitlines()]
    assert rows and all(len(row) == 7 and row[4] == b"" for row in rows)
    assert [b"strata", b"x", b"990", b"990", b"", b"/opt/strata", b"/usr/sbin/nologin"] in rows
    assert check_json("--bundle", str(bundle)) == json.loads(read_member(bundle, f"{TOP}/check.json"))
