"""The checks' words: said once, right after a fix, and with numbers a reader can redo.

Each test runs the CLI on a fixture host (or a copy of one in a tmp dir) and reads the
findings' own text: a PCIe link written one way, the THP check naming the hugepages
finding that is there, the compute GPU's reason as a noun phrase, a memory sum whose
terms add up, and arena-fit's pass and failure in one sentence shape.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

import pytest

from strata_doctor.facts.gpu import PcieLink, speed_text
from tests.conftest import HOSTS, check_json, copy_host, findings_of, run_cli, seed_copy

GIB = r"(-?[0-9][0-9,]*\.[0-9]{2}) GiB"


def gib(text: str) -> float:
    return float(text.replace(",", ""))


# -- 1. one way to write a link ----------------------------------------------------------
def test_a_link_names_pcie_once() -> None:
    link = PcieLink("2.5 GT/s PCIe", "8.0 GT/s PCIe", 16, 16)
    assert speed_text("2.5 GT/s PCIe") == "2.5 GT/s" and speed_text("8 GT/s") == "8 GT/s"
    assert speed_text(None) == "?" and speed_text("Unknown") == "Unknown"
    assert link.text == "Gen1 (2.5 GT/s) x16 (max Gen3 (8.0 GT/s) x16)"
    assert f"PCIe {link.text}".count("PCIe") == 1
    assert PcieLink("8.0 GT/s PCIe", "8.0 GT/s PCIe", 16, 16).text == "Gen3 (8.0 GT/s) x16"
    assert PcieLink(None, None, None, None).text is None


@pytest.mark.parametrize("host", ["seed-box-mirror", "desktop-1s", "hugepages-wrong-node", "xeon-snc2"])
def test_pcie_link_words_say_gts_without_the_kernels_pcie(host: str) -> None:
    data = check_json(HOSTS / host)
    words = [f["summary"] + " " + (f.get("detail") or "") for f in findings_of(data, "pcie-link").values()]
    assert words
    for text in words:
        assert "GT/s PCIe" not in text, text  # the kernel's "2.5 GT/s PCIe" is evidence, quoted as read


# -- 2. THP names the hugepages finding that is there -------------------------------------
def test_thp_text_follows_the_pool_after_its_fix(tmp_path: Path) -> None:
    tree = seed_copy(tmp_path)
    before = check_json(tree)
    assert "trap" in findings_of(before, "hugepages")
    (thp,) = [f for f in findings_of(before, "transparent-hugepages").values() if f["id"] == "madvise"]
    assert "(hugepages/trap)" in thp["summary"]

    applied = run_cli(["fix", "--root", str(tree), "--apply", "--yes"])
    assert applied.exit_code == 0, applied.stdout + applied.stderr

    after = check_json(tree)
    pool = findings_of(after, "hugepages")
    assert "trap" not in pool and "configured" in pool
    (thp,) = [f for f in findings_of(after, "transparent-hugepages").values() if f["id"] == "madvise"]
    assert "hugepages/trap" not in thp["summary"] and "will fail" not in thp["summary"]
    assert "vm.nr_hugepages = 0 in /etc/sysctl.d/81-strata-doctor.conf" in thp["summary"]
    assert "runs on THP" in thp["summary"]


# -- 3. the compute GPU's reason reads once -----------------------------------------------
def test_gpu_named_by_the_config_says_so() -> None:
    data = check_json(HOSTS / "desktop-1s")
    compute = next(g for g in data["facts"]["gpus"] if g["compute"])
    assert compute["choice_reason"] == "the GPU named by gpu: in /etc/strata-doctor.yaml (0000:01:00.0)"
    (placed,) = findings_of(data, "gpu-placement").values()
    assert placed["detail"].startswith("Chosen as the GPU named by gpu: in /etc/strata-doctor.yaml")
    assert "chosen" not in placed["detail"].lower().replace("chosen as", "", 1)


def test_gpu_named_by_the_option_says_so() -> None:
    data = check_json(HOSTS / "desktop-1s", "--gpu", "01:00.0")
    compute = next(g for g in data["facts"]["gpus"] if g["compute"])
    assert compute["choice_reason"] == "the GPU named by --gpu (0000:01:00.0)"


def test_a_config_gpu_that_is_not_there_names_the_config_not_the_option(tmp_path: Path) -> None:
    tree = copy_host("desktop-1s", tmp_path / "host")
    config = tree / "etc" / "strata-doctor.yaml"
    config.write_text(config.read_text().replace("0000:01:00.0", "0000:05:00.0"))
    result = run_cli(["check", "--root", str(tree)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "strata-doctor: error: /etc/strata-doctor.yaml: gpu: 0000:05:00.0: no display-class PCI "
        "function at 0000:05:00.0 (found: 0000:01:00.0, 0000:13:00.0)"]
    result = run_cli(["check", "--root", str(tree), "--gpu", "07:00.0"])
    assert result.exit_code == 2 and "error: --gpu 07:00.0: no display-class" in result.stderr


# -- 4. a memory sum the reader can redo --------------------------------------------------
def _sum_terms(sentence: str) -> None:
    """``A GiB + B GiB ... - C GiB ... = D GiB left``: one figure per term, and it adds up."""
    lhs, _, rhs = sentence.partition(" = ")
    assert rhs, sentence
    parts = re.split(r" ([+-]) ", lhs)
    total = 0.0
    for index in range(0, len(parts), 2):
        figures = re.findall(GIB, parts[index])
        assert len(figures) == 1, f"term {parts[index]!r} of {sentence!r} holds {figures}"
        sign = -1.0 if index and parts[index - 1] == "-" else 1.0
        total += sign * gib(figures[0])
    (left,) = re.findall(GIB, rhs.split(" left")[0])
    # Each term is rounded to 0.01 GiB on its own.
    assert abs(total - gib(left)) <= 0.01 * (len(parts) // 2 + 1), sentence


def test_the_projected_memory_adds_up_on_the_seed_host() -> None:
    data = check_json(HOSTS / "seed-box")
    texts: List[str] = [findings_of(data, "hugepages")["trap"]["detail"],
                        findings_of(data, "oomd")["trap-chain"]["detail"]]
    for text in texts:
        match = re.search(r"(MemAvailable [^=]*= [^ ]+ GiB) left", text.replace("\n", " "))
        assert match, text
        _sum_terms(match.group(1) + " left")
        assert "MemAvailable 13.49 GiB" in text  # /proc/meminfo's 14145468 kB
        assert "MemTotal" not in match.group(1)


# -- 5. arena-fit: one sentence shape for both verdicts -----------------------------------
ARENA = re.compile(rf"^arena {GIB} \+ K/V {GIB} \+ headroom {GIB} = {GIB} (fits|does not fit) "
                   rf"(node [0-9,]+|nodes [0-9,]+|this host) \({GIB}\): {GIB} (to spare|short)$")


# 20 GiB: the seed's own 46.84 GiB fits node 1's size but not what is free of it now, which
# is the one low-free warning (tests/test_one_row.py), not this sentence.
@pytest.mark.parametrize("arena,verdict", [("20GiB", "fits"), ("80GiB", "does not fit")])
def test_arena_fit_says_fits_and_does_not_fit_alike(arena: str, verdict: str) -> None:
    data = check_json(HOSTS / "seed-box", "--arena", arena)
    found = findings_of(data, "arena-fit")
    finding = found["fits" if verdict == "fits" else "does-not-fit"]
    match = ARENA.match(finding["summary"])
    assert match, finding["summary"]
    a, kv, headroom, need, said, _, total, diff, tail = match.groups()
    assert said == verdict and tail == ("to spare" if verdict == "fits" else "short")
    assert abs(gib(a) + gib(kv) + gib(headroom) - gib(need)) <= 0.03
    signed = gib(total) - gib(need) if verdict == "fits" else gib(need) - gib(total)
    assert abs(signed - gib(diff)) <= 0.02
