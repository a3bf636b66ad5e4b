"""strata-doctor probe against a fake syscall layer: placement, refusals, JSON and text.

The fake keeps the C routines (memset, memchr, tfind over the test's own buffers) and
fakes everything that would touch the host's NUMA state: the topology, mbind, pinning
and move_pages.
"""

from __future__ import annotations

import ctypes
import json
import random
from array import array
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from strata_doctor.cli import probe as cli_probe
from strata_doctor.facts import probe_result as probe_doc
from strata_doctor.facts import saved_probe as probe_data
from strata_doctor.facts.probe_result import SCHEMA, Cell, ProbeResult
from strata_doctor.probe import measure as probe
from strata_doctor.probe import plan as probe_plan
from strata_doctor.probe.system import NodeInfo, System
from tests.conftest import run_cli

MiB = 1 << 20
GiB = 1 << 30


class FakeSystem(System):
    """The real C routines, a made-up topology, and placement decided by the test."""

    def __init__(self, nodes: List[NodeInfo], llc: Optional[int] = 1 * MiB,
                 stray: float = 0.0, interrupt_at: Optional[str] = None) -> None:
        super().__init__()
        self._nodes = nodes
        self._llc = llc
        self.stray = stray  # share of each buffer's pages the "kernel" puts elsewhere
        self.interrupt_at = interrupt_at
        self.bound: Dict[int, Tuple[int, int]] = {}  # addr -> (size, node)
        self.pinned: List[Tuple[int, ...]] = []
        self.live: Dict[int, int] = {}

    def nodes(self) -> List[NodeInfo]:
        return list(self._nodes)

    def llc_bytes(self) -> Optional[int]:
        return self._llc

    def cpu_model(self) -> str:
        return "Fake CPU @ 2.00GHz"

    def kernel(self) -> str:
        return "6.1.0-fake"

    def map(self, size: int) -> int:
        addr = super().map(size)
        self.live[addr] = size
        return addr

    def unmap(self, addr: int, size: int) -> None:
        assert self.live.pop(addr) == size
        self.bound.pop(addr, None)
        super().unmap(addr, size)

    def bind(self, addr: int, size: int, node: int) -> None:
        self.bound[addr] = (size, node)

    def bind_thread(self, node: Optional[int]) -> None:
        pass

    def pin(self, cpus: object) -> None:
        if self.interrupt_at == "pin":
            raise KeyboardInterrupt
        self.pinned.append(tuple(sorted(cpus)))  # type: ignore[call-overload]

    def page_nodes(self, addr: int, size: int) -> array[int]:
        node = next(n for a, (s, n) in self.bound.items() if a <= addr < a + s)
        pages = size // self.page_size
        wrong = int(pages * self.stray)
        other = next((n.id for n in self._nodes if n.id != node), -14)
        return array("i", [other] * wrong + [node] * (pages - wrong))


def two_nodes(free: int = 8 * GiB) -> List[NodeInfo]:
    return [NodeInfo(0, (0, 1), 16 * GiB, free), NodeInfo(1, (2, 3), 16 * GiB, free)]


def three_nodes() -> List[NodeInfo]:
    """The memory-only topology: node 2 has memory and no CPUs."""
    return [*two_nodes(), NodeInfo(2, (), 8 * GiB, 4 * GiB)]


def run_fake(system: FakeSystem, size: int = 8 * MiB, seconds: float = 0.12,
             threads: Optional[int] = None) -> ProbeResult:
    plan = probe_plan.make_plan(system, size, seconds, threads)
    return probe.Probe(system, plan, seed=7).run()


def test_every_pair_is_measured_and_placement_is_verified() -> None:
    system = FakeSystem(three_nodes())
    result = run_fake(system)
    assert [(c.cpu_node, c.mem_node) for c in result.cells] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    for c in result.cells:
        assert c.placed_fraction == 1.0 and c.verified
        assert c.read_gbps and c.read_gbps > 0
        # The fake runs the real chase over small buffers, so on a loaded machine a step can
        # be no slower than the chase's own cost: then the cell gives no latency and a note
        # names it, never a made-up figure.
        cell = f"cpu node {c.cpu_node} -> memory node {c.mem_node}:"
        if c.latency_ns is None:
            assert any(note.startswith(cell) for note in result.notes), result.notes
        else:
            assert c.latency_ns >= 0
        assert c.threads == 2
    assert result.cpu_nodes == [0, 1]  # the memory-only node is a column, never a row
    assert result.mem_nodes == [0, 1, 2]
    assert system.live == {}  # every buffer given back
    # Bandwidth threads one per CPU of the row's node; the chaser on its first CPU.
    assert {(0,), (1,), (2,), (3,)} <= set(system.pinned)
    assert all(p in ((0,), (1,), (2,), (3,)) for p in system.pinned)


def test_pages_elsewhere_make_the_cell_unverified() -> None:
    result = run_fake(FakeSystem(two_nodes(), stray=0.05))
    assert all(abs(c.placed_fraction - 0.95) < 0.01 and not c.verified for c in result.cells)
    text = probe_data.to_text(result)
    assert "placement unverified, only 95.0% of the pages were on node 1" in text
    assert "*" in text.split("Idle latency")[0]
    data = json.loads(probe_doc.to_json(result))
    assert all(row["verified"] is False for row in data["matrix"])


def test_a_latency_lost_in_the_chase_cost_is_left_out_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe.Probe, "step_overhead", lambda self: 1e9)
    result = run_fake(FakeSystem(two_nodes()))
    assert all(c.latency_ns is None and c.read_gbps for c in result.cells)
    assert sum("so no latency is given" in n for n in result.notes) == 4
    assert "       0          -         -" in probe_data.to_text(result)
    text = probe_doc.to_json(result)
    assert probe_doc.to_json(probe_doc.from_json(text)) == text


def test_threads_option_sets_the_reading_threads() -> None:
    result = run_fake(FakeSystem(two_nodes()), threads=3)
    assert {c.threads for c in result.cells} == {3}


def test_a_node_without_enough_free_memory_is_refused_before_anything_is_taken() -> None:
    nodes = two_nodes()
    nodes[1] = nodes[1]._replace(mem_free=100 * MiB)
    system = FakeSystem(nodes)
    with pytest.raises(probe_plan.ProbeRefused) as exc:
        probe_plan.make_plan(system, 512 * MiB, 1.0)
    assert str(exc.value).startswith("node 1 has 100.00 MiB free; the probe needs 512.00 MiB there")
    assert system.live == {}


@pytest.mark.parametrize("size, seconds, threads, words", [
    (1 * MiB, 1.0, None, "--size 1.00 MiB is too small"),
    (64 * MiB, 0.0, None, "--seconds 0.0 must be above 0 and at most 3600"),
    (64 * MiB, float("inf"), None, "--seconds inf must be above 0"),
    (64 * MiB, float("nan"), None, "--seconds nan must be above 0"),
    (64 * MiB, 1.0, 0, "--threads 0 must be between 1 and 4096"),
    (64 * MiB, 1.0, 100000, "--threads 100000 must be between 1 and 4096"),
])
def test_bad_options_are_refused(size: int, seconds: float, threads: Optional[int], words: str) -> None:
    with pytest.raises(probe_plan.ProbeRefused, match=words):
        probe_plan.make_plan(FakeSystem(two_nodes()), size, seconds, threads)


def test_chase_buffer_is_four_times_the_cache_or_says_why_not() -> None:
    plan = probe_plan.make_plan(FakeSystem(two_nodes(), llc=2 * MiB), 64 * MiB, 10.0)
    assert plan.latency_bytes == 8 * MiB and not plan.notes
    plan = probe_plan.make_plan(FakeSystem(two_nodes(), llc=32 * MiB), 64 * MiB, 1.0)
    assert plan.latency_bytes == 64 * MiB
    assert "smaller than 4x the last-level cache" in plan.notes[0]


def test_ctrl_c_frees_every_buffer() -> None:
    system = FakeSystem(two_nodes(), interrupt_at="pin")
    plan = probe_plan.make_plan(system, 8 * MiB, 0.1)
    runner = probe.Probe(system, plan)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert system.live == {} and runner.buffers.maps == {}


@pytest.mark.parametrize("blocks", [16, 256])
def test_chain_is_one_cycle_over_every_line_and_tfind_walks_a_segment(blocks: int) -> None:
    size = blocks * probe_plan.BLOCK
    lines = size // 64
    buf = ctypes.create_string_buffer(size + probe_plan.BLOCK)
    base = -(-ctypes.addressof(buf) // probe_plan.BLOCK) * probe_plan.BLOCK
    key, stop = ctypes.create_string_buffer(b"\x01"), ctypes.create_string_buffer(b"\x02")
    first, stops, steps = probe.build_chain(base, size, random.Random(1), ctypes.addressof(key),
                                            ctypes.addressof(stop))
    # Segments are whole rounds, at least SEGMENT steps (or the whole chain when smaller).
    assert steps == min(lines, max(probe.SEGMENT, blocks)) and len(stops) == lines // steps
    seen, node = [], first
    while True:
        seen.append(node)
        assert ctypes.c_uint64.from_address(node + 8).value == 0  # left: nothing
        node = ctypes.c_uint64.from_address(node + 16).value
        if node == first:
            break
    assert len(seen) == lines and len(set(seen)) == lines  # one cycle through every line
    assert all((a - base) % 64 == 0 and base <= a < base + size for a in seen)
    keyed = [a for a in seen if ctypes.c_uint64.from_address(a).value == ctypes.addressof(stop)]
    assert keyed == stops and [seen.index(a) + 1 for a in stops] == list(range(steps, lines + 1, steps))
    # Consecutive loads never fall in the same 64 KiB block, and a line's pair-mate
    # (the adjacent-line prefetcher's) comes half the chain later.
    assert all((a // probe_plan.BLOCK) != (b // probe_plan.BLOCK) for a, b in zip(seen, seen[1:]))
    position = {a: i for i, a in enumerate(seen)}
    assert min(abs(position[a] - position[a ^ 64]) for a in seen) == lines // 2
    system = FakeSystem(two_nodes())
    root = ctypes.c_uint64(first)
    for expected in stops + stops[:1]:  # segment after segment, round the cycle
        assert system.tfind(ctypes.addressof(stop), ctypes.addressof(root)) == expected
        root.value = ctypes.c_uint64.from_address(expected + 16).value


def sample_result(placed: float = 1.0) -> ProbeResult:
    cells = []
    for cpu in (0, 1):
        for mem in (0, 1, 2):
            local = cpu == mem
            cells.append(Cell(cpu, mem, 61.0 if local else (24.4 if mem < 2 else 12.5),
                              88.5 if local else (139.5 if mem < 2 else 210.0),
                              placed if (cpu, mem) == (1, 2) else 1.0, 22))
    return ProbeResult(tuple(cells), GiB, 10.0, "Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz",
                       "6.1.0-18-amd64", latency_bytes=220 * MiB, llc_bytes=55 * MiB,
                       chase_overhead_ns=6.25, created="2026-12-01T10:00:00+00:00",
                       gpu_reason="libcudart could not be loaded (not found)")


def test_json_schema_round_trips() -> None:
    result = sample_result()
    data = json.loads(probe_doc.to_json(result))
    assert data["schema"] == SCHEMA == "strata-doctor/probe/1"
    for key in ("size_bytes", "seconds", "cpu_model", "kernel", "matrix", "latency_bytes",
                "llc_bytes", "chase_overhead_ns", "created", "gpu", "notes"):
        assert key in data
    assert set(data["matrix"][0]) == {"cpu_node", "mem_node", "read_gbps", "latency_ns",
                                      "placed_fraction", "verified", "threads"}
    assert data["gpu"] == {"status": "skipped", "reason": "libcudart could not be loaded (not found)",
                           "copies": []}
    assert probe_doc.from_json(probe_doc.to_json(result)) == result


@pytest.mark.parametrize("text, words", [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    ('{"schema": "strata-doctor/probe/0"}', "schema 'strata-doctor/probe/0'"),
    ('{"schema": "strata-doctor/probe/1", "matrix": []}', "no matrix"),
    ('{"schema": "strata-doctor/probe/1", "matrix": [{"cpu_node": "0"}]}', "matrix[0].cpu_node"),
    ('{"schema": "strata-doctor/probe/1", "matrix": [{"cpu_node": 0, "mem_node": 0, "threads": 1,'
     ' "placed_fraction": 2}]}', "placed_fraction is not a fraction"),
    ('{"schema": "strata-doctor/probe/1", "matrix": [{"cpu_node": 0, "mem_node": 0, "threads": 1,'
     ' "placed_fraction": 1, "read_gbps": -1}]}', "read_gbps is not a number >= 0"),
])
def test_bad_saved_files_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        probe_doc.from_json(text)


def test_text_matrix_like_mlc() -> None:
    text = probe_data.to_text(sample_result(placed=0.5))
    expected = """\
Read bandwidth (GB/s): 22 threads of the CPU node reading memory bound to each node
CPU node      mem 0     mem 1     mem 2
       0       61.0      24.4      12.5
       1       24.4      61.0     12.5*

Idle latency (ns per dependent load, one thread)
CPU node      mem 0     mem 1     mem 2
       0       88.5     139.5     210.0
       1      139.5      88.5    210.0*
Net of the chase's own work per load (6.2 ns, timed with the chain in L1).

* cpu node 1 -> memory node 2: placement unverified, only 50.0% of the pages were on node 2
"""
    assert expected in text
    assert "GPU copy bandwidth: skipped (libcudart could not be loaded (not found))" in text


def test_remote_reads_and_the_gain_of_binding() -> None:
    remote = probe_data.remote_reads(sample_result(), 1)
    assert remote is not None
    assert remote.local_gbps == 61.0 and remote.remote_gbps == 24.4 and remote.nodes == 2
    assert round(remote.ratio, 2) == 2.5
    # 1/2 + 1/2 x 2.5 = 1.75: +75% when entirely memory-bound; +27% when half is.
    assert round(remote.gain_high, 2) == 0.75 and round(remote.gain_low, 2) == 0.27
    assert probe_data.stale_reason(sample_result(), "Other CPU", None) == (
        "it was measured on another CPU (Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz)")
    assert probe_data.stale_reason(sample_result(), None, "6.2.0") == (
        "it was measured under another kernel (6.1.0-18-amd64)")
    assert probe_data.stale_reason(sample_result(), "Intel(R) Xeon(R) CPU E5-2696 v4 @ 2.20GHz",
                                   "6.1.0-18-amd64") is None


# -- the command line --------------------------------------------------------------------

@pytest.fixture
def fake_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., FakeSystem]:
    made: List[FakeSystem] = []

    def make(nodes: Optional[List[NodeInfo]] = None) -> FakeSystem:
        def factory() -> FakeSystem:
            system = FakeSystem(nodes or two_nodes())
            made.append(system)
            return system
        monkeypatch.setattr("strata_doctor.probe.system.System", factory)
        monkeypatch.setattr(cli_probe, "SAVE_ROOT", str(tmp_path))
        return made  # type: ignore[return-value]
    return make


@pytest.mark.parametrize("args, option", [(["--root", "tests"], "--root"),
                                          (["--bundle", "x.tar.gz"], "--bundle")])
def test_probe_refuses_a_captured_host(args: List[str], option: str) -> None:
    result = run_cli(["probe", *args])
    assert result.exit_code == 2
    assert result.stdout == ""  # click 8.2+ also mixes stderr into .output; 8.1 does not
    assert result.stderr == (
        f"strata-doctor: error: probe measures the live host only; {option} replays a captured one\n")


def test_probe_refuses_a_full_node_in_one_line(fake_cli: Callable[..., object]) -> None:
    nodes = two_nodes()
    nodes[0] = nodes[0]._replace(mem_free=10 * MiB)
    fake_cli(nodes)
    result = run_cli(["probe", "--size", "64MiB", "--seconds", "0.1"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("strata-doctor: error: node 0 has 10.00 MiB free")


def test_probe_json_and_save(fake_cli: Callable[..., object], tmp_path: Path) -> None:
    made = fake_cli()
    result = run_cli(["probe", "--size", "8MiB", "--seconds", "0.1", "--format", "json",
                      "--save", "--no-gpu"])
    assert result.exit_code == 0, result.output
    saved = tmp_path / "var/lib/strata-doctor/probe.json"
    text = saved.read_text()
    assert result.stdout == text
    assert result.stderr.splitlines()[-1] == f"saved {saved}"  # after the short run's warning
    data = json.loads(text)
    assert data["schema"] == SCHEMA and len(data["matrix"]) == 4
    assert data["gpu"] == {"status": "skipped", "reason": "--no-gpu", "copies": []}
    assert saved.stat().st_mode & 0o777 == 0o644
    assert made[0].live == {}  # type: ignore[index]
    assert not list(saved.parent.glob(".*tmp"))  # the atomic writer's temporary is gone


def test_a_save_through_a_linked_folder_stays_in_the_root(fake_cli: Callable[..., object],
                                                          tmp_path: Path) -> None:
    # var -> /srv/state is the tree's own /srv/state, never this machine's; the missing
    # folders are made there, each below its parent's descriptor. Through a dangling link
    # no folder is made, as the writer makes none (docs/fix.md#safety).
    fake_cli()
    (tmp_path / "srv").mkdir()
    (tmp_path / "var").symlink_to("/srv/state")
    result = run_cli(["probe", "--size", "8MiB", "--seconds", "0.1", "--no-gpu", "--save"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "/var -> /srv/state" in result.stderr, result.stderr
    assert result.stdout == ""  # said before measuring
    assert list(tmp_path.joinpath("srv").iterdir()) == []
    (tmp_path / "srv/state").mkdir()
    result = run_cli(["probe", "--size", "8MiB", "--seconds", "0.1", "--no-gpu", "--save"])
    assert result.exit_code == 0, result.output
    saved = tmp_path / "srv/state/lib/strata-doctor/probe.json"
    assert json.loads(saved.read_text())["schema"] == SCHEMA


def test_ctrl_c_on_the_command_line_frees_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    made: List[FakeSystem] = []

    def interrupted() -> FakeSystem:
        made.append(FakeSystem(two_nodes(), interrupt_at="pin"))
        return made[-1]

    monkeypatch.setattr("strata_doctor.probe.system.System", interrupted)
    result = run_cli(["probe", "--size", "8MiB", "--seconds", "0.1", "--no-gpu"])
    assert result.exit_code == 130
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == "strata-doctor: probe interrupted; every buffer it took is freed"
    assert made[-1].live == {}


def test_probe_text_output(fake_cli: Callable[..., object]) -> None:
    fake_cli(three_nodes())
    result = run_cli(["probe", "--size", "8MiB", "--seconds", "0.1", "--no-gpu"])
    assert result.exit_code == 0, result.output
    assert "CPU node      mem 0     mem 1     mem 2" in result.output
    assert "GPU copy bandwidth: skipped (--no-gpu)" in result.output
