"""docs/writing-checks.md's plug-in, installed and run exactly as the page writes it: the
walk a newcomer follows cannot go stale without this failing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from tests.conftest import HOSTS, REPO, copy_host

PAGE = REPO / "docs" / "writing-checks.md"


def _blocks(text: str) -> List[Tuple[str, str]]:
    """Every fenced block of the page as (language, body)."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)


def _page_parts() -> Tuple[str, str, str, str]:
    """The plug-in's module and file name, its entry-point table, and the example run."""
    blocks = _blocks(PAGE.read_text(encoding="utf-8"))
    module = next(body for lang, body in blocks if lang == "python" and body.startswith("# "))
    toml = next(body for lang, body in blocks if lang == "toml")
    run = next(body for lang, body in blocks if not lang and body.startswith("$ strata-doctor check"))
    return module.split("\n", 1)[0][2:].strip(), module, toml, run


def _install(site: Path) -> Dict[str, str]:
    """The plug-in laid out as pip installs a distribution; its environment."""
    name, module, toml, _ = _page_parts()
    site.mkdir()
    (site / name).write_text(module, encoding="utf-8")
    group = re.search(r'^\[project\.entry-points\."([^"]+)"\]$', toml, re.M)
    assert group, toml
    points = re.findall(r'^([\w-]+)\s*=\s*"([^"]+)"$', toml, re.M)
    info = site / "swap_doctor-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: swap-doctor\nVersion: 0.1\n")
    lines = [f"[{group.group(1)}]"] + [f"{key} = {value}" for key, value in points]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dict(os.environ, PYTHONPATH=str(site), NO_COLOR="1", COLUMNS="80")


def _check(env: Dict[str, str], root: Path, cwd: Path, *more: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "strata_doctor", "check", "swap-present", "--root", str(root), *more]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)


def test_the_pages_plug_in_runs_as_the_page_shows(tmp_path: Path) -> None:
    env = _install(tmp_path / "site")
    *_, run = _page_parts()
    command, *shown = run.strip("\n").splitlines()
    root = command.split("--root ", 1)[1]
    done = _check(env, REPO / root, REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown


def test_the_plug_ins_warning_and_its_exit_code(tmp_path: Path) -> None:
    env = _install(tmp_path / "site")
    host = copy_host("seed-box", tmp_path / "host")
    meminfo = host / "proc" / "meminfo"
    text = re.sub(r"^SwapTotal:.*$", "SwapTotal:             0 kB", meminfo.read_text(), flags=re.M)
    meminfo.write_text(text)
    done = _check(env, host, tmp_path)
    warned = ("arena 46.84 GiB: arena: in /etc/strata-doctor.yaml; K/V 3.09 GiB: kv: in "
              "/etc/strata-doctor.yaml\n\n"
              "! swap-present/no-swap  no swap configured\n"
              "                        → more: https://example.org/swap-doctor#swap-present\n"
              "\n1 warning: ready (exit 0)\n")
    assert (done.returncode, done.stdout) == (0, warned)
    assert _check(env, host, tmp_path, "--fail-on", "warning").returncode == 1


def test_the_plug_ins_rule_is_a_function_of_facts_alone(tmp_path: Path) -> None:
    name, module, *_ = _page_parts()
    namespace: Dict[str, object] = {"__name__": name[:-3]}
    exec(compile(module, name, "exec"), namespace)  # the page's module, as Python loads it
    verdict = namespace["swap_verdict"]
    assert verdict({"SwapTotal": 0}) == (0,)  # type: ignore[operator]
    assert verdict({}) == (None,)  # type: ignore[operator]
    assert HOSTS.is_dir()
