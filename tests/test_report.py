"""``strata-doctor report``: golden Markdown, the JSON form, and redaction of planted secrets
in the report, its JSON and every byte of its bundle.

Regenerate the golden reports after an intended change with ``STRATA_UPDATE_GOLDEN=1
python -m pytest tests/test_report.py`` and review the diff like code.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Dict, List

import pytest

from strata_doctor.facts.nvidia_smi import parse_smi_query
from tests.conftest import HOSTS, REPO, UNBOUND_UNIT, compare_golden, run_cli, two_node_files, write_tree

GOLDEN = REPO / "tests" / "golden" / "report"
GOLDEN_HOSTS = ("seed-box", "seed-box-gguf", "desktop-1s", "vm-gpu-nonuma")
DEVICE = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"

PLANTED: List[str] = [
    "gpubox7", "lab.example.com", "10.20.30.40", "192.168.7.21", "fe80::1ff:fe23:4567:890a",
    "52:54:00:12:34:56", "alice", "4f1c0e2b9a8d4c6e8f0a1b2c3d4e5f60", "SN-8C3X9Q2", "BSN12345678",
    "4c4c4544-0042-3510-8052-b7c04f4e4d32", "1c2f3a4b-5d6e-7f80-91a2-b3c4d5e6f708", "0324117012345",
]
"""Private strings planted in :func:`planted_files`; none may survive redaction."""


def planted_files() -> Dict[str, str]:
    """The two-node host with a GPU on node 1, plus private strings where the checks and
    the report read: the unit file, command captures, DMI, nvidia-smi."""
    files = two_node_files(unit_show=UNBOUND_UNIT + (
        "Description=Strata on gpubox7 (10.20.30.40)\n"
        "ControlGroup=/system.slice/strata.service\n"
        "Environment=PEER=fe80::1ff:fe23:4567:890a MAC=52:54:00:12:34:56 OWNER=alice\n"
    ))
    files.update({
        "/etc/hostname": "gpubox7\n",
        "/proc/sys/kernel/hostname": "gpubox7\n",
        "/etc/hosts": "10.20.30.40 gpubox7.lab.example.com gpubox7\n",
        "/etc/machine-id": "4f1c0e2b9a8d4c6e8f0a1b2c3d4e5f60\n",
        "/etc/passwd": "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/bash\n",
        "/sys/class/dmi/id": "->../../devices/virtual/dmi/id",
        "/sys/devices/virtual/dmi/id/sys_vendor": "Dell Inc.\n",
        "/sys/devices/virtual/dmi/id/product_name": "PowerEdge R730 (gpubox7)\n",
        "/sys/devices/virtual/dmi/id/product_serial": "SN-8C3X9Q2\n",
        "/sys/devices/virtual/dmi/id/board_serial": "BSN12345678\n",
        "/sys/devices/virtual/dmi/id/product_uuid": "4c4c4544-0042-3510-8052-b7c04f4e4d32\n",
        "/etc/systemd/system/strata.service": (
            "[Service]\nUser=alice\nWorkingDirectory=/home/alice/strata\n"
            "ExecStart=/home/alice/strata/serve --host gpubox7.lab.example.com --listen 10.20.30.40 "
            "--peer 192.168.7.21 --id 4f1c0e2b9a8d4c6e8f0a1b2c3d4e5f60\n"
        ),
        "/proc/sys/kernel/osrelease": "6.1.0-18-amd64\n",
        "/etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n',
        f"{DEVICE}/driver": "->../../../../bus/pci/drivers/nvidia",
        "/.strata-doctor/commands/nvidia-smi-query.txt": (
            "00000000:81:00.0, NVIDIA GeForce GTX 1080 Ti, 11264 MiB, 550.54.15, "
            "GPU-1c2f3a4b-5d6e-7f80-91a2-b3c4d5e6f708, 0324117012345\n"
        ),
        "/.strata-doctor/commands/nvidia-smi.txt": (
            "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |\n"
            "|   0  NVIDIA GeForce GTX 1080 Ti  Off | 00000000:81:00.0  On |   N/A |\n"
        ),
        "/.strata-doctor/commands/systemctl-version.txt": "systemd 252 (252.22-1~deb12u1)\n+PAM +AUDIT\n",
    })
    return files


@pytest.fixture
def planted_host(tmp_path: Path) -> Path:
    """A captured host with private strings planted where the report reads."""
    return write_tree(tmp_path / "planted", planted_files())


def assert_clean(data: bytes, where: str) -> None:
    """None of the planted strings, in any case, occurs in ``data``."""
    lowered = data.lower()
    for secret in PLANTED:
        assert secret.lower().encode() not in lowered, f"{secret!r} survived in {where}"


def archive_views(path: Path) -> Dict[str, bytes]:
    """Every byte of a bundle: the compressed file, the tar stream, and each member."""
    raw = path.read_bytes()
    views = {"archive": raw, "tar stream": gzip.decompress(raw)}
    with tarfile.open(fileobj=io.BytesIO(views["tar stream"])) as tar:
        for member in tar.getmembers():
            views[f"member name {member.name}"] = (member.name + member.linkname).encode()
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is not None:
                views[member.name] = handle.read()
    return views


# -- golden Markdown ---------------------------------------------------------------
@pytest.mark.parametrize("host", GOLDEN_HOSTS)
def test_golden_markdown(host: str) -> None:
    if not (HOSTS / host).is_dir():
        pytest.skip(f"fixture host {host} is not in tests/fixtures/hosts")
    result = run_cli(["report", "--root", str(HOSTS / host)])
    assert result.exit_code == 0, result.stderr
    compare_golden(GOLDEN / f"{host}.md", result.stdout)


def test_planted_host_golden(planted_host: Path) -> None:
    result = run_cli(["report", "--root", str(planted_host), "--arena", "10GiB", "--kv", "1GiB"])
    assert result.exit_code == 0, result.stderr
    compare_golden(GOLDEN / "planted-two-node.md", result.stdout)


# -- shape and formats -------------------------------------------------------------
def test_markdown_has_the_seed_shape(planted_host: Path) -> None:
    text = run_cli(["report", "--root", str(planted_host), "--arena", "10GiB"]).stdout
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections == ["Hardware", "Engine", "Memory", "Findings", "Versions", "What was not seen"]
    assert text.splitlines()[2].startswith("**Not ready: numa-binding:")
    assert "- GPU: **NVIDIA GeForce GTX 1080 Ti**, 11264 MiB" in text
    assert "on **NUMA node 1**" in text
    assert "| **1** | 21 | 10 |" in text
    assert "Driver: 550.54.15" in text.replace("NVIDIA driver", "Driver")
    assert "CUDA 12.4" in text and "systemd: 252 (252.22-1~deb12u1)" in text
    assert "**Fix:**" in text and "<details>" in text and "</details>" in text


def test_json_is_the_check_json_plus_report(planted_host: Path) -> None:
    result = run_cli(["report", "--root", str(planted_host), "--format", "json"])
    data = json.loads(result.stdout)
    check = json.loads(run_cli(["check", "--root", str(planted_host), "--format", "json"]).stdout)
    assert data["schema"] == "strata-doctor/check/v1"
    assert data["findings"] == check["findings"]
    assert data["report"]["schema"] == "strata-doctor/report/v1"
    assert data["report"]["hardware"]["gpus"][0]["model"] == "NVIDIA GeForce GTX 1080 Ti"
    assert data["report"]["versions"]["cuda"] == "12.4"
    assert data["report"]["redaction"]["enabled"] is True
    assert_clean(result.stdout.encode(), "report JSON")


def test_output_file(planted_host: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    result = run_cli(["report", "--root", str(planted_host), "--output", str(out)])
    assert result.exit_code == 0 and result.stdout == ""
    assert out.read_text().startswith("# strata-doctor report")


def test_no_redact_keeps_values_and_says_so(planted_host: Path) -> None:
    text = run_cli(["report", "--root", str(planted_host), "--no-redact"]).stdout
    assert "**Not redacted**" in text.split("## Hardware")[0]
    assert "gpubox7" in text


def test_host_without_systemd_or_nvidia_smi(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "bare", two_node_files())
    result = run_cli(["report", "--root", str(root)])
    assert result.exit_code == 0, result.stderr
    assert "systemd: not found" in result.stdout
    assert "NVIDIA driver: not found" in result.stdout
    assert "- `nvidia-smi`: not found (not captured)" in result.stdout


def test_smi_query_parser() -> None:
    rows = parse_smi_query(
        "pci.bus_id, name, memory.total [MiB]\n"
        "00000000:84:00.0, NVIDIA GeForce GTX 1080 Ti, 11264 MiB, 550.54.15, GPU-x, 1\n"
        "garbage\n0000:03:00.0, NVIDIA GeForce GT 710\n"
        "00000000:41:00.0, NVIDIA H100 PCIe, 81559 MiB, 550.54.15, GPU-y, 1654, 4, 5, 16, 16\n"
    )
    assert rows["0000:84:00.0"].name == "NVIDIA GeForce GTX 1080 Ti"
    assert rows["0000:84:00.0"].memory == "11264 MiB"
    assert rows["0000:84:00.0"].driver == "550.54.15"
    assert not rows["0000:84:00.0"].link_known
    assert rows["0000:03:00.0"].memory is None
    h100 = rows["0000:41:00.0"]
    assert (h100.name, h100.uuid, h100.serial) == ("NVIDIA H100 PCIe", "GPU-y", "1654")
    assert (h100.gen_current, h100.gen_max, h100.width_current, h100.width_max) == (4, 5, 16, 16)


def test_the_gpu_query_is_parsed_once(planted_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One parser (facts.parse_smi_query), read once per host through ctx.smi_query: the
    checks, the Hardware section, the map and redaction all take its rows."""
    from strata_doctor.facts import nvidia_smi as facts

    calls: List[str] = []
    parse = facts.parse_smi_query

    def counted(text: str) -> Dict[str, facts.SmiGpuState]:
        calls.append(text)
        return parse(text)

    monkeypatch.setattr(facts, "parse_smi_query", counted)
    result = run_cli(["report", "--root", str(planted_host)])
    assert result.exit_code == 0, result.stderr
    assert "- GPU: **NVIDIA GeForce GTX 1080 Ti**, 11264 MiB" in result.stdout
    assert len(calls) == 1


def test_docs_list_exactly_the_fields_of_the_query() -> None:
    """docs/report.md names every field ``nvidia-smi --query-gpu`` asks for, in order, and
    the command line as it runs."""
    from strata_doctor.facts.nvidia_smi import NVIDIA_SMI_QUERY

    doc = (REPO / "docs" / "report.md").read_text()
    option = next(arg for arg in NVIDIA_SMI_QUERY.argv if arg.startswith("--query-gpu="))
    fields = option[len("--query-gpu="):].split(",")
    table = doc[doc.index("| `nvidia-smi --query-gpu` field |"):]
    rows = re.findall(r"^\| ([^|]+) \|", table.split("\n\n")[0], re.M)[1:]  # less the header
    documented = [name for row in rows for name in re.findall(r"`([^`]+)`", row)]
    assert documented == fields
    assert f"`{' '.join(NVIDIA_SMI_QUERY.argv)}`" in doc


# -- what was not seen, counted once -----------------------------------------------
def _not_seen(text: str) -> str:
    start = text.index("## What was not seen")
    return text[start:text.index("<details>", start)]


def test_a_missing_program_is_named_once(tmp_path: Path) -> None:
    """nvidia-smi runs three ways (its table, --query-gpu, -q); a host without it says so once."""
    root = write_tree(tmp_path / "bare", two_node_files())
    section = _not_seen(run_cli(["report", "--root", str(root)]).stdout)
    assert [line for line in section.splitlines() if "nvidia-smi" in line] == [
        "- `nvidia-smi`: not found (not captured)"]
    assert len([line for line in section.splitlines() if "systemctl" in line]) == 1


def test_a_program_captured_in_part_is_one_line_naming_what_is_not(planted_host: Path) -> None:
    section = _not_seen(run_cli(["report", "--root", str(planted_host)]).stdout)
    lines = [line for line in section.splitlines() if "nvidia-smi" in line]
    assert lines == ["- `nvidia-smi`: not captured: `$ nvidia-smi -q`"], section


def _counts(report: str, message: str) -> tuple[int, int]:
    said = re.search(r"^- (\d+) paths? or commands? could not be read", report, re.M)
    bundled = re.search(r"(\d+) paths? or commands? could not be read, listed in manifest.json", message)
    assert said and bundled, (report, message)
    return int(said.group(1)), int(bundled.group(1))


def test_report_and_bundle_count_the_same_unreadable_things(tmp_path: Path) -> None:
    """Absent optional files (no /etc/strata-doctor.yaml, no oomd.conf.d) are facts, not
    read failures; a file that cannot be read and a command that failed are, in both counts."""
    files = two_node_files()
    commands = "/.strata-doctor/commands"
    files.update({
        "/proc/sys/kernel/osrelease/stray": "a folder where a file should be\n",
        f"{commands}/oomctl-dump.txt": "",
        f"{commands}/oomctl-dump.rc": "1\n",
        f"{commands}/oomctl-dump.err": "Failed to connect to systemd-oomd\n",
        # is-active's status is its answer: "inactive" with exit 3 was read
        f"{commands}/systemctl-is-active-systemd-oomd.service.txt": "inactive\n",
        f"{commands}/systemctl-is-active-systemd-oomd.service.rc": "3\n",
    })
    root = write_tree(tmp_path / "h", files)
    bundle = tmp_path / "b.tar.gz"
    result = run_cli(["report", "--root", str(root), "--bundle", str(bundle)])
    assert result.exit_code == 0, result.stderr
    said, bundled = _counts(result.stdout, result.stderr)
    assert said == bundled == 2
    evidence = result.stdout[result.stdout.index("#### Could not be read"):]
    unread = evidence.split("####")[1]
    assert "`/proc/sys/kernel/osrelease`: is a directory" in unread
    assert "`$ oomctl dump`: exit 1: Failed to connect to systemd-oomd" in unread
    assert "strata-doctor.yaml" not in unread and "oomd.conf.d" not in unread
    assert "is-active" not in unread
    with tarfile.open(bundle) as tar:
        handle = tar.extractfile("strata-doctor-bundle/manifest.json")
        assert handle is not None
        manifest = json.loads(handle.read())
    assert len(manifest["unreadable"]) == said
    absent = {row["what"]: row["reason"] for row in manifest["absent"]}
    assert absent["/etc/strata-doctor.yaml"] == "missing"
    assert absent["/etc/systemd/oomd.conf.d/"] == "No such file or directory"
    assert absent["$ nvidia-smi"] == "not found"


# -- redaction end to end ----------------------------------------------------------
def test_planted_secrets_never_leave(planted_host: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "report.tar.gz"
    md = run_cli(["report", "--root", str(planted_host), "--bundle", str(bundle)])
    js = run_cli(["report", "--root", str(planted_host), "--format", "json"])
    assert md.exit_code == js.exit_code == 0
    assert_clean(md.stdout.encode(), "report")
    assert_clean(md.stderr.encode(), "messages")
    assert_clean(js.stdout.encode(), "report JSON")
    for where, data in archive_views(bundle).items():
        assert_clean(data, where)
    assert re.search(r"Redacted before sharing: .*host name.*IP address.*user name", md.stdout)


def test_placeholders_agree_between_report_and_bundle(planted_host: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "report.tar.gz"
    md = run_cli(["report", "--root", str(planted_host), "--bundle", str(bundle)]).stdout
    views = archive_views(bundle)
    system = re.search(r"System: Dell Inc. PowerEdge R730 \((host-\d+)\)", md)
    assert system, md
    unit = views["strata-doctor-bundle/etc/systemd/system/strata.service"].decode()
    show = views["strata-doctor-bundle/.strata-doctor/commands/systemctl-show-strata.service.txt"].decode()
    assert f"Strata on {system.group(1)} (" in show
    listen = re.search(r"--listen (ip-\d+)", unit)
    assert listen and f"({listen.group(1)})" in show
    owner = re.search(r"/home/(user-\d+)/", unit)
    assert owner and f"OWNER={owner.group(1)}" in show and f"User={owner.group(1)}" in unit
    assert views["strata-doctor-bundle/report.md"].decode() == md
