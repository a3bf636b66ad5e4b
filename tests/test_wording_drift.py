"""One wording per fact, in every command: what each fixture host's check, fix, map and
report print (their goldens, which tests/test_golden*.py, test_map*.py and test_report.py
hold to the output), and what numa-plan and probe print, never drift apart again.

- nodes are ``node 1`` or ``nodes 0,1``, never ``node(s)``; no ``(s)`` at all;
- a host without a display-class function has "no GPU found", one phrase for check, map,
  report and numa-plan;
- a PCIe speed is named by its generation and its rate once: ``Gen1 (2.5 GT/s) x16``;
- a count of 1,000 or more has its thousands separators in human text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

import pytest

from strata_doctor.facts.gpu import PcieLink, pcie_speed
from strata_doctor.facts.parse import format_nodes
from tests.conftest import HOSTS, run_cli

GOLDEN = Path(__file__).parent / "golden"
TEXTS = ("check/*.txt", "fix/*.txt", "map/*.txt", "map/*.mmd", "report/*.md", "variant/*.txt",
         "variant/*.md", "probe/*.txt")

# A count is a number before the word of what it counts; sizes, ids, addresses and values
# quoted from files are not (a GiB, a pid, "vm.nr_hugepages = 23983", CPUs 0-4095).
COUNT_WORDS = ("CPUs", "CPU", "cores", "processes", "pages", "functions", "threads", "kills",
               "entries", "GPUs", "cells", "characters", "members", "files", "cgroups", "times")
BARE_COUNT = re.compile(r"(?<![\d,.\-=/:x])\b(\d{4,})\s+(?:[a-z]+\s+)?(?:" + "|".join(COUNT_WORDS) + r")\b")
BARE_GEN = re.compile(r"\bGen\d x\d+")  # a generation without its rate
BARE_RATE = re.compile(r"(?<![\d.(])\d+(?:\.\d+)? GT/s(?! PCIe)")  # a rate without its generation


def human_texts() -> Dict[str, str]:
    """Every golden that is text for people (JSON, Prometheus and NFD files are for programs)."""
    found = {str(p.relative_to(GOLDEN)): p.read_text(encoding="utf-8")
             for pattern in TEXTS for p in sorted(GOLDEN.glob(pattern))}
    assert len(found) > 50, sorted(found)  # the goldens are where they were
    return found


def drift(text: str) -> List[str]:
    """Every phrase of ``text`` that says a fact in a wording other than its one."""
    found = [m.group(0) for m in re.finditer(r"\w+\(s\)", text)]
    found += [m.group(0) for m in re.finditer("no display-class PCI function found", text)]
    found += [m.group(0) for m in BARE_GEN.finditer(text)]
    found += [m.group(0) for m in BARE_RATE.finditer(text)
              if not _quoted_file(text, m.start())]
    found += [m.group(0) for m in BARE_COUNT.finditer(text)]
    return found


def _quoted_file(text: str, at: int) -> bool:
    """The rate is evidence quoting a link file as the kernel wrote it (``(max 8.0 GT/s PCIe)``,
    ``at 2.5 GT/s PCIe (upstream)``)."""
    line = text[text.rfind("\n", 0, at) + 1:text.find("\n", at) if "\n" in text[at:] else len(text)]
    return "current_link_speed" in line or "GT/s PCIe" in line


def test_the_drift_finder_finds_each_old_wording() -> None:
    old = ("bind to node(s) 1: CPUs 0-3; skipped: no display-class PCI function found; "
           "link at Gen1 x16 (max 8.0 GT/s x16); 15779 processes, 2048 CPUs")
    assert drift(old) == ["node(s)", "no display-class PCI function found", "Gen1 x16", "8.0 GT/s",
                          "15779 processes", "2048 CPUs"]
    new = ("bind to node 1: CPUs 0-4095; no GPU found; link at Gen1 (2.5 GT/s) x16 (max Gen3 "
           "(8.0 GT/s) x16); 15,779 processes, 2,048 CPUs; vm.nr_hugepages = 23983; pid 48213")
    assert drift(new) == []


@pytest.mark.parametrize("name", sorted(human_texts()))
def test_no_golden_words_a_fact_another_way(name: str) -> None:
    assert drift(human_texts()[name]) == [], name


FIXTURE_HOSTS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []


@pytest.mark.parametrize("host", FIXTURE_HOSTS)
def test_numa_plan_words_no_fact_another_way(host: str) -> None:
    result = run_cli(["numa-plan", "--root", str(HOSTS / host)])
    assert drift(result.stdout + result.stderr) == [], host


def test_no_gpu_is_said_alike_by_check_map_report_and_numa_plan() -> None:
    host = HOSTS / "no-gpu"
    if not host.is_dir():
        pytest.skip("tests/fixtures/hosts/no-gpu is missing")
    outputs = {
        "check": run_cli(["check", "--root", str(host)]).stdout,
        "map": run_cli(["map", "--root", str(host)]).stdout,
        "report": run_cli(["report", "--root", str(host)]).stdout,
        "numa-plan": run_cli(["numa-plan", "--root", str(host)]).stdout,
    }
    for command, text in outputs.items():
        assert "no GPU found" in text, command
        assert drift(text) == [], command
        assert "compute GPU found" not in text, command  # no GPU at all is not "no compute GPU"


def test_nodes_in_words() -> None:
    assert format_nodes([1]) == "node 1"
    assert format_nodes(frozenset({1, 0})) == "nodes 0,1"
    assert format_nodes("0,1") == "nodes 0,1"
    assert format_nodes("2") == "node 2"
    assert format_nodes("0-3") == "nodes 0-3"


def test_a_pcie_speed_is_its_generation_and_rate_from_either_source() -> None:
    assert pcie_speed(2.5) == pcie_speed(generation=1) == "Gen1 (2.5 GT/s)"
    assert pcie_speed(16.0) == pcie_speed(generation=4) == "Gen4 (16.0 GT/s)"
    assert pcie_speed(3.0) == "3.0 GT/s"  # no generation runs at 3 GT/s: the rate alone
    assert pcie_speed(raw="Unknown") == "Unknown" and pcie_speed() == "?"
    link = PcieLink("2.5 GT/s PCIe", "8.0 GT/s PCIe", 16, 16)
    assert link.text == "Gen1 (2.5 GT/s) x16 (max Gen3 (8.0 GT/s) x16)"
