"""strata-doctor probe on a real kernel: placement verified on every cell, memory-only nodes
as columns only, and a saved result used by check.

Each topology boots once with its own few steps (not the shared boot of the other vm
tests, so that this file runs alone). Under software emulation the figures themselves
mean little (QEMU's nodes share the host's memory); what is tested is that the kernel
placed every page where the probe bound it and that the rows and columns are right.
The probe runs tiny: 8 MiB buffers, one second of measuring.
"""

from __future__ import annotations

import shutil
from typing import Any, Dict, Iterator

import pytest
from guest import BootResult, Image, Payload, Step, boot
from scenarios import doctor, payload_for
from topologies import TOPOLOGIES
from vmharness import BOOT_TIMEOUT, artifacts_root

pytestmark = pytest.mark.vm

PROBE = "probe --size 8MiB --seconds 1 --no-gpu"
NAMES = ("seed", "memory-only")


def steps(name: str) -> list[Step]:
    t = TOPOLOGIES[name]
    out = [
        Step("probe-json", f"strata-doctor {PROBE} --format json"),
        Step("probe-text", f"strata-doctor {PROBE}"),
        Step("probe-root", "strata-doctor probe --root /etc; echo rc=$?"),
    ]
    if name == "seed":
        out += [
            Step("check-before", doctor("check -v numa-binding", t)),
            Step("probe-save", f"strata-doctor {PROBE} --save --format json"),
            Step("saved", "cat /var/lib/strata-doctor/probe.json"),
            Step("check-measured", doctor("check -v numa-binding", t)),
            Step("check-measured-json", doctor("check --format json numa-binding", t)),
        ]
    return out


@pytest.fixture(scope="module")
def probes(guest_image: Image) -> Iterator[Dict[str, BootResult]]:
    results: Dict[str, BootResult] = {}
    yield results


def booted(probes: Dict[str, BootResult], image: Image, name: str) -> BootResult:
    if name not in probes:
        topology = TOPOLOGIES[name]
        artifacts = artifacts_root() / f"probe-{name}"
        if artifacts.exists():
            shutil.rmtree(artifacts)
        files = payload_for(topology).files
        probes[name] = boot(topology, Payload(steps(name), files), artifacts, image, timeout=BOOT_TIMEOUT)
    result = probes[name]
    if result.error:
        pytest.fail(f"{name} guest: {result.error}; console: {result.artifacts}/console.log", pytrace=False)
    return result


def probe_json(result: BootResult, step: str = "probe-json") -> Dict[str, Any]:
    ran = result.step(step)
    assert ran.rc == 0, ran.describe()
    data = ran.json()
    assert isinstance(data, dict) and data["schema"] == "strata-doctor/probe/1", ran.describe()
    return data


@pytest.mark.parametrize("name", NAMES)
def test_every_cell_is_placed_and_measured(probes: Dict[str, BootResult], guest_image: Image,
                                           name: str) -> None:
    t = TOPOLOGIES[name]
    data = probe_json(booted(probes, guest_image, name))
    cpu_nodes = sorted(n.id for n in t.nodes if n.cpus)
    mem_nodes = sorted(n.id for n in t.nodes)
    pairs = [(c["cpu_node"], c["mem_node"]) for c in data["matrix"]]
    assert pairs == [(c, m) for c in cpu_nodes for m in mem_nodes]
    for cell in data["matrix"]:
        assert cell["placed_fraction"] >= 0.99, cell
        assert cell["verified"] is True
        # Under emulation a chase step can be no slower than the chase's own cost: then
        # the latency is null and a note says why; the bandwidth is always there.
        assert cell["read_gbps"] > 0 and (cell["latency_ns"] is None or cell["latency_ns"] > 0), cell
        assert cell["threads"] == len(t.node(cell["cpu_node"]).cpus)
    assert data["size_bytes"] == 8 << 20 and data["seconds"] == 1.0
    assert data["kernel"] and data["cpu_model"]


def test_memory_only_node_is_a_column_never_a_row(probes: Dict[str, BootResult],
                                                  guest_image: Image) -> None:
    result = booted(probes, guest_image, "memory-only")
    data = probe_json(result)
    assert 2 not in {c["cpu_node"] for c in data["matrix"]}
    assert {c["mem_node"] for c in data["matrix"]} == {0, 1, 2}
    text = result.step("probe-text").stdout
    assert "CPU node      mem 0     mem 1     mem 2" in text
    rows = [line.split()[0] for line in text.splitlines() if line[:8].strip().isdigit()]
    assert "2" not in rows


@pytest.mark.parametrize("name", NAMES)
def test_probe_refuses_a_root(probes: Dict[str, BootResult], guest_image: Image, name: str) -> None:
    ran = booted(probes, guest_image, name).step("probe-root")
    assert "rc=2" in ran.stdout
    assert ran.stderr.strip() == (
        "strata-doctor: error: probe measures the live host only; --root replays a captured one")


def test_check_states_the_measured_ratio_after_save(probes: Dict[str, BootResult],
                                                    guest_image: Image) -> None:
    result = booted(probes, guest_image, "seed")
    saved = probe_json(result, "saved")
    assert saved == probe_json(result, "probe-save")
    local = next(c for c in saved["matrix"] if c["cpu_node"] == 1 and c["mem_node"] == 1)
    remote = next(c for c in saved["matrix"] if c["cpu_node"] == 1 and c["mem_node"] == 0)
    before = result.step("check-before").stdout
    assert "measured" not in before and "21/10" in before, before
    after = result.step("check-measured")
    # Under emulation the two cost the same, so the ratio may fall either side of 1.
    ratio = local["read_gbps"] / remote["read_gbps"]
    assert f"{remote['read_gbps']:.1f} vs {local['read_gbps']:.1f} GB/s, measured)" in after.stdout, \
        after.describe()
    assert f"remote reads {ratio:.1f}x slower" in after.stdout or \
        f"remote reads no slower ({ratio:.1f}x" in after.stdout, after.describe()
    assert "21/10" not in after.stdout.split("\n")[0]
    assert "/var/lib/strata-doctor/probe.json" in after.stdout, after.describe()
