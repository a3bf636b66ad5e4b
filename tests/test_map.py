"""``strata-doctor map``: golden pictures in three formats, ASCII fallback, Mermaid shape.

Regenerate the goldens after an intended change with ``STRATA_UPDATE_GOLDEN=1 python -m
pytest tests/test_map.py`` and check every number against the fixture's files.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Set

import pytest
from click.testing import CliRunner

from strata_doctor.cli import main
from strata_doctor.config import EngineConfig
from strata_doctor.context import HostContext
from strata_doctor.output.hostmap import build_map
from strata_doctor.output.map import encodable, to_ascii, to_text
from strata_doctor.output.map_mermaid import to_mermaid
from strata_doctor.root import Root
from tests.conftest import HOSTS, REPO, compare_golden, run_cli, two_node_files, write_tree
from tests.corpus import SNAPSHOTS

if TYPE_CHECKING:
    from tests.corpus import Corpus

GOLDEN = REPO / "tests" / "golden" / "map"
GOLDEN_HOSTS = ("seed-box", "seed-box-mirror", "seed-box-gguf", "xeon-snc2", "no-gpu",
                "mi210-8x", "mi300x-8x", "radeon-apu-desktop")
ALL_HOSTS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []
SUFFIX = {"text": "txt", "mermaid": "mmd", "json": "json"}


@pytest.mark.parametrize("fmt", sorted(SUFFIX))
@pytest.mark.parametrize("host", GOLDEN_HOSTS)
def test_golden(host: str, fmt: str) -> None:
    result = run_cli(["map", "--root", str(HOSTS / host), "--format", fmt])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    compare_golden(GOLDEN / f"{host}.{SUFFIX[fmt]}", result.stdout)


def test_json_numbers_are_the_fixtures() -> None:
    """The seed box's nodes as its sysfs files say (MemTotal in kB), its GPUs and plan."""
    data = json.loads(run_cli(["map", "--root", str(HOSTS / "seed-box"), "--format", "json"]).stdout)
    assert data["schema"] == "strata-doctor/map/v1"
    node_dir = HOSTS / "seed-box" / "sys" / "devices" / "system" / "node"
    for node in data["nodes"]:
        meminfo = (node_dir / f"node{node['id']}" / "meminfo").read_text()
        total_kb = int(re.search(r"MemTotal:\s+(\d+) kB", meminfo).group(1))  # type: ignore[union-attr]
        free_kb = int(re.search(r"MemFree:\s+(\d+) kB", meminfo).group(1))  # type: ignore[union-attr]
        assert node["memory_total_bytes"] == total_kb * 1024
        assert node["memory_free_bytes"] == free_kb * 1024
        assert node["cpus"] == (node_dir / f"node{node['id']}" / "cpulist").read_text().strip()
    assert [n["distances"] for n in data["nodes"]] == [{"0": 10, "1": 21}, {"0": 21, "1": 10}]
    compute = [g for g in data["gpus"] if g["compute"]]
    assert [(g["address"], g["model"], g["node"]) for g in compute] == [
        ("0000:84:00.0", "NVIDIA GeForce GTX 1080 Ti", 1)]
    assert data["plan"]["numactl"] == ["numactl", "--preferred=1", "--cpunodebind=1"]
    assert data["engine"]["pid"] == 48213 and data["engine"]["follows_plan"] is False
    assert [c["what"] for c in data["fix"]["changes"]] == ["CPUs", "memory"]
    assert data["fix"]["changes"][0] == {"what": "CPUs", "now": "0-87", "after": "22-43,66-87"}


def test_bound_engine_needs_no_fix() -> None:
    data = json.loads(run_cli(["map", "--root", str(HOSTS / "seed-box-bound"), "--format", "json"]).stdout)
    assert data["engine"]["follows_plan"] is True
    assert data["fix"]["changes"] == []
    assert data["fix"]["summary"].startswith("nothing to change")


# -- ASCII when the stream cannot encode box drawing --------------------------------
def test_ascii_under_a_latin1_stream() -> None:
    runner = CliRunner(charset="latin-1")
    result = runner.invoke(main, ["map", "--root", str(HOSTS / "seed-box")], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout.isascii()
    assert "+- socket 1 -" in result.stdout and "0-87 -> 22-43,66-87" in result.stdout
    assert result.stdout == to_ascii(run_cli(["map", "--root", str(HOSTS / "seed-box")]).stdout)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_ascii_from_the_console_script(encoding: str) -> None:
    """A real process whose stdout cannot encode box drawing (PYTHONIOENCODING, a C locale
    on an old Python, a console code page) draws the same picture in ASCII."""
    env = dict(os.environ, PYTHONIOENCODING=encoding)
    result = subprocess.run([sys.executable, "-m", "strata_doctor", "map", "--root", str(HOSTS / "seed-box")],
                            env=env, capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stdout.isascii()
    assert result.stdout.decode() == to_ascii((GOLDEN / "seed-box.txt").read_text())


def test_encodable() -> None:
    assert encodable("utf-8")
    assert not encodable("latin-1")
    assert not encodable("ascii")
    assert not encodable("no-such-codec")


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_boxes_line_up(host: str) -> None:
    """Every line of a box has the same width as its top edge, on every fixture host."""
    text = run_cli(["map", "--root", str(HOSTS / host)]).stdout
    boxed = [line for line in text.splitlines() if line[:1] in ("┌", "│", "└")]
    assert len({len(line) for line in boxed}) <= 1, text


# -- Mermaid: the basic flowchart subset, checked line by line --------------------------
ID = r"[A-Za-z][A-Za-z0-9_]*"
TEXT = r'(?:[^"<>;#]|#[0-9a-z]+;)*'  # quotes, brackets, '#' and ';' only in entity codes
LABEL = rf'\["{TEXT}"\]'  # quoted (the <br/> line breaks are taken out first)
EDGE_LABEL = rf'\|"{TEXT}"\|'
STATEMENTS = [
    re.compile(rf"^  (?:  )?({ID}){LABEL}$"),  # a node
    re.compile(rf"^  subgraph ({ID}){LABEL}$"),
    re.compile(r"^  end$"),
    re.compile(rf"^  ({ID}) (?:---|-\.->|==>)(?:{EDGE_LABEL})? ({ID})$"),
    re.compile(rf"^  classDef {ID} [a-z-]+:[0-9a-z]+$"),
    re.compile(rf"^  class {ID}(?:,{ID})* {ID}$"),
]


def check_mermaid(text: str) -> None:
    """Fail unless ``text`` is a flowchart made only of the statements above, its subgraphs
    closed, every node defined once and every link between defined nodes."""
    lines = text.replace("<br/>", " ").splitlines()
    assert lines[0] == "flowchart TB"
    defined: Set[str] = set()
    linked: List[str] = []
    depth = 0
    for line in lines[1:]:
        found = [(kind, m) for kind, m in ((k, s.match(line)) for k, s in enumerate(STATEMENTS)) if m]
        assert found, f"not in the basic subset: {line!r}"
        kind, match = found[0]
        if kind == 0:  # a node
            assert match.group(1) not in defined and match.group(1) != "end", f"defined twice: {line}"
            defined.add(match.group(1))
        elif kind == 1:  # subgraph
            depth += 1
        elif kind == 2:
            depth -= 1
            assert depth >= 0
        elif kind == 3:  # a link
            linked.extend(match.groups())
    assert depth == 0
    assert set(linked) <= defined, set(linked) - defined


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_mermaid_shape(host: str) -> None:
    result = run_cli(["map", "--root", str(HOSTS / host), "--format", "mermaid"])
    assert result.exit_code == 0, result.stderr
    check_mermaid(result.stdout)
    assert result.stdout.isascii()


def test_mermaid_escapes_host_text(tmp_path: Path) -> None:
    """A GPU name is host text: quotes and angle brackets become entity codes."""
    files = two_node_files()
    files["/.strata-doctor/commands/nvidia-smi-query.txt"] = (
        '00000000:81:00.0, Evil "GPU" <script>#1 é\x1b[2J, 11264 MiB, 550.54.15, GPU-x, 0, 3, 3, 16, 16\n')
    ctx = HostContext(Root(str(write_tree(tmp_path / "host", files))), EngineConfig())
    host = build_map(ctx)
    text = to_mermaid(host)
    check_mermaid(text)
    assert text.isascii()
    assert "Evil #quot;GPU#quot; #lt;script#gt;#35;1 #233;?[2J" in text
    assert "#59;" not in text  # no ";" of its own
    assert 'Evil "GPU" <script>#1 é?[2J' in to_text(host)


def test_gpu_names_come_from_the_context(tmp_path: Path) -> None:
    """The map names GPUs from ``ctx.smi_query``, the one reader of nvidia-smi's GPU query."""
    files = two_node_files()
    files["/.strata-doctor/commands/nvidia-smi-query.txt"] = (
        "00000000:81:00.0, NVIDIA GeForce GTX 1080 Ti, 11264 MiB, 550.54.15, GPU-x, 0, 3, 3, 16, 16\n")
    ctx = HostContext(Root(str(write_tree(tmp_path / "host", files))), EngineConfig())
    assert ctx.smi_query["0000:81:00.0"].name == "NVIDIA GeForce GTX 1080 Ti"
    host = build_map(ctx)
    assert [gpu.model for gpu in host.gpus] == ["NVIDIA GeForce GTX 1080 Ti"]


@pytest.mark.parametrize("host", ["seed-box", "desktop-1s"])
def test_map_and_report_write_a_link_alike(host: str) -> None:
    """One writer of link text (facts.PcieLink.text): the map and the report's Hardware agree,
    and neither says PCIe twice."""
    drawn = json.loads(run_cli(["map", "--root", str(HOSTS / host), "--format", "json"]).stdout)
    report = json.loads(run_cli(["report", "--root", str(HOSTS / host), "--format", "json"]).stdout)
    links = {gpu["address"]: gpu["link"] for gpu in drawn["gpus"]}
    assert links == {gpu["address"]: gpu["link"] for gpu in report["report"]["hardware"]["gpus"]}
    assert all(link and "PCIe" not in link for link in links.values()), links


def test_mermaid_links_the_plan_and_the_gpu() -> None:
    text = run_cli(["map", "--root", str(HOSTS / "xeon-snc2"), "--format", "mermaid"]).stdout
    assert "  gpu_0000_98_00_0 --- node2" in text
    assert '  engine ==>|"plan: numactl --interleave=2,3 --cpunodebind=2,3"| node2' in text
    assert '  engine ==>|"plan: numactl --interleave=2,3 --cpunodebind=2,3"| node3' in text
    assert '  node0 ---|"distance 12"| node1' in text


# -- options and errors -------------------------------------------------------------
def test_listed_in_help() -> None:
    assert "map" in run_cli(["--help"]).stdout


def test_unknown_node_is_a_usage_error(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "host", {**two_node_files(), "/etc/strata-doctor.yaml": "numa: 7\n"})
    result = run_cli(["map", "--root", str(root)])
    assert result.exit_code == 2
    assert "no such NUMA node on this host (nodes: 0,1)" in result.stderr
    assert "Traceback" not in result.stderr


def test_host_options_reach_the_plan() -> None:
    """--arena changes where the arena sits (the same options as check)."""
    small = json.loads(run_cli(["map", "--root", str(HOSTS / "xeon-snc2"), "--arena", "20GiB",
                                "--format", "json"]).stdout)
    assert small["plan"]["nodes"] == [2]
    assert small["arena"]["nodes"] == "2"


def test_no_numa_facts(tmp_path: Path) -> None:
    """A GPU on no known node, on a host without NUMA folders, is still drawn."""
    files = {k: v for k, v in two_node_files().items() if "/system/node/" not in k}
    root = write_tree(tmp_path / "host", files)
    result = run_cli(["map", "--root", str(root)])
    assert result.exit_code == 0, result.stderr
    assert "no NUMA information" in result.stdout
    assert "GPU on no known node" in result.stdout
    check_mermaid(run_cli(["map", "--root", str(root), "--format", "mermaid"]).stdout)


# -- the docs show what the tool prints ---------------------------------------------
def test_docs_show_the_golden_picture() -> None:
    doc = (REPO / "docs" / "map.md").read_text()
    assert (GOLDEN / "seed-box.txt").read_text() in doc
    excerpt = doc.split("```mermaid\n", 1)[1].split("```", 1)[0]
    golden = (GOLDEN / "seed-box.mmd").read_text().splitlines()
    assert set(excerpt.splitlines()) <= set(golden)


def test_report_has_the_same_picture() -> None:
    """`report` puts the map's Mermaid in its Markdown, fenced for GitHub and GitLab."""
    report = run_cli(["report", "--root", str(HOSTS / "seed-box")]).stdout
    block = report.split("### Host map\n", 1)[1].split("```mermaid\n", 1)[1].split("```\n", 1)[0]
    assert block == run_cli(["map", "--root", str(HOSTS / "seed-box"), "--format", "mermaid"]).stdout
    check_mermaid(block)


def test_report_with_numa_off_draws_no_plan(tmp_path: Path) -> None:
    """numa: off: the report's diagram has the nodes and the GPU, and no plan arrow."""
    root = write_tree(tmp_path / "host", {**two_node_files(), "/etc/strata-doctor.yaml": "numa: \"off\"\n"})
    result = run_cli(["report", "--root", str(root)])
    assert result.exit_code == 0, result.stderr
    block = result.stdout.split("```mermaid\n", 1)[1].split("```\n", 1)[0]
    check_mermaid(block)
    assert "gpu_0000_81_00_0 --- node1" in block and "==>" not in block


def test_a_bundle_replays_the_same_picture(tmp_path: Path) -> None:
    """The report's bundle holds everything the map reads (nvidia-smi's names included)."""
    bundle = tmp_path / "host.tar.gz"
    seed = str(HOSTS / "seed-box")
    made = run_cli(["report", "--root", seed, "--bundle", str(bundle), "-o", str(tmp_path / "r.md")])
    assert made.exit_code == 0, made.stderr
    for fmt in ("text", "json"):
        replayed = run_cli(["map", "--bundle", str(bundle), "--format", fmt])
        assert replayed.exit_code == 0, replayed.stderr
        assert replayed.stdout == run_cli(["map", "--root", seed, "--format", fmt]).stdout


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_json_on_every_fixture(host: str) -> None:
    result = run_cli(["map", "--root", str(HOSTS / host), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "strata-doctor/map/v1"
    assert sum(n["threads"] for n in data["nodes"]) in (0, data["cpus"])


# -- real hosts ----------------------------------------------------------------------
@pytest.mark.corpus
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_real_hosts(corpus: Corpus, name: str) -> None:
    """Every real snapshot draws in all three formats: boxes aligned, Mermaid in the subset,
    one JSON node per NUMA folder."""
    root = str(corpus.root(name))
    args = ["map", "--root", root, "--arena", "46.84GiB", "--kv", "3.09GiB"]
    text = run_cli(args)
    if text.exit_code == 2:  # a snapshot that is no host: map refuses it as check does
        check = run_cli(["check", "--root", root])
        assert (check.exit_code, check.stderr) == (2, text.stderr)
        return
    assert text.exit_code == 0, text.stderr
    boxed = [line for line in text.stdout.splitlines() if line[:1] in ("┌", "│", "└")]
    assert len({len(line) for line in boxed}) <= 1, text.stdout
    mermaid = run_cli([*args, "--format", "mermaid"])
    assert mermaid.exit_code == 0, mermaid.stderr
    check_mermaid(mermaid.stdout)
    data = json.loads(run_cli([*args, "--format", "json"]).stdout)
    node_dir = Path(root) / "sys" / "devices" / "system" / "node"
    folders = [p for p in node_dir.glob("node*") if p.name[4:].isdigit()] if node_dir.is_dir() else []
    assert len(data["nodes"]) == len(folders)
