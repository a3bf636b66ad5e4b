"""Bad input never crashes or hangs: each reproducer of issue 11 section 5, on a copy of the
seed box. A bad file is a finding or one line on stderr with exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from tests.conftest import HOSTS, copy_host, run_cli

SEED = HOSTS / "seed-box"


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    """A private copy of the seed box."""
    return copy_host(SEED, tmp_path / "seed-box")


def run_script(args: List[str], env: Optional[Dict[str, str]] = None,
               **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """The console script in a real process (streams, signals and encodings are its own)."""
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "strata_doctor", *args], env=full_env,
                          timeout=120, **kwargs)


def assert_one_line(result: Any, code: int = 2) -> str:
    """Exit ``code``, one line on stderr, no traceback; the line."""
    exit_code = getattr(result, "exit_code", getattr(result, "returncode", None))
    stderr = result.stderr
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", "replace")
    assert exit_code == code, stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, lines
    return str(lines[0])


def check_json(root: Path) -> Dict[str, object]:
    result = run_cli(["check", "--root", str(root), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


# -- truncated bundles ----------------------------------------------------------------
@pytest.fixture(scope="module")
def bundle_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("bundle") / "b.tar.gz"
    result = run_cli(["report", "--root", str(SEED), "--bundle", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_bytes()


@pytest.mark.parametrize("cut", [0, 10, 100, 5000, 31000])
def test_a_truncated_bundle_is_one_line_and_exit_2(bundle_bytes: bytes, tmp_path: Path, cut: int) -> None:
    assert cut < len(bundle_bytes)
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(bundle_bytes[:cut])
    line = assert_one_line(run_cli(["check", "--bundle", str(path)]))
    assert line.startswith(f"strata-doctor: error: {path}: not a strata-doctor bundle")


def test_a_corrupted_bundle_never_crashes(bundle_bytes: bytes, tmp_path: Path) -> None:
    path = tmp_path / "bad.tar.gz"
    for offset in (10, 20, 500, len(bundle_bytes) // 2, len(bundle_bytes) - 5):
        data = bytearray(bundle_bytes)
        data[offset] ^= 0xFF
        path.write_bytes(bytes(data))
        result = run_cli(["check", "--bundle", str(path), "--format", "json"])
        assert result.exit_code in (0, 1, 2), (offset, result.output)
        assert "Traceback" not in result.output and "Aborted!" not in result.output
        if result.exit_code == 2:
            assert len(result.stderr.splitlines()) == 1


# -- output encodings and closed pipes ---------------------------------------------------
@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
@pytest.mark.parametrize("command", [["check"], ["check", "-v"], ["report"]])
def test_an_encoding_without_the_symbols_gets_ascii_marks(encoding: str, command: List[str]) -> None:
    result = run_script([*command, "--root", str(SEED)], env={"PYTHONIOENCODING": encoding},
                        capture_output=True)
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    assert result.returncode == (0 if command == ["report"] else 1)
    text = result.stdout.decode(encoding)
    if command[0] == "check":
        # After the line that says where the sizes came from, and a blank line.
        assert text.startswith("arena 46.84 GiB: arena: in /etc/strata-doctor.yaml")
        assert "\n\n+ numa-topology" in text and "\nx numa-binding" in text
    assert "\u2713" not in text and "\u2717" not in text


def closed_pipe_run(args: List[str]) -> int:
    """Run with standard output a pipe whose reader is already gone; the exit status."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = run_script(args, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    return result.returncode


@pytest.mark.parametrize("args", [
    ["check"], ["check", "--format", "json"], ["check", "--format", "prometheus"], ["report"],
    ["list-checks"],
])
def test_a_closed_pipe_ends_by_sigpipe_not_a_verdict(args: List[str]) -> None:
    host = [] if args == ["list-checks"] else ["--root", str(SEED)]
    assert closed_pipe_run([*args, *host]) == -signal.SIGPIPE


@pytest.mark.parametrize("args", [["--help"], ["check", "--help"], ["report", "-h"], ["--version"], ["-V"]])
def test_help_into_a_closed_pipe_is_exit_0(args: List[str]) -> None:
    assert closed_pipe_run(args) == 0


def test_a_shell_sees_141_for_check_into_head_0() -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    script = (f"{sys.executable} -m strata_doctor check --root {SEED} | head -c 0; "
              "echo ${PIPESTATUS[0]}")
    result = subprocess.run(["bash", "-c", script], capture_output=True, timeout=120, env=dict(os.environ))
    # head -c 0 leaves at once; the check writes a tenth of a second later, into a closed pipe
    assert result.stdout.decode().strip() == "141"
    assert b"Traceback" not in result.stderr


# -- huge numbers ------------------------------------------------------------------------
def first_pid(root: Path) -> Path:
    return next(p for p in sorted((root / "proc").iterdir()) if p.name.isdigit() and (p / "stat").is_file())


@pytest.mark.parametrize("field", [14, 15, 22])
def test_a_400_digit_stat_field_is_no_crash(seed: Path, field: int) -> None:
    for proc in (p for p in (seed / "proc").iterdir() if p.name.isdigit() and (p / "stat").is_file()):
        stat = (proc / "stat").read_text()
        head, _, rest = stat.rpartition(")")
        fields = rest.split()
        fields[field - 3] = "9" * 400
        (proc / "stat").write_text(f"{head}) {' '.join(fields)}\n")
    data = check_json(seed)
    crashed = [c for c in data["checks"] if c.get("crash")]  # type: ignore[attr-defined, union-attr]
    assert crashed == []


def test_a_1mb_hex_cpumap_parses_in_linear_time(seed: Path) -> None:
    from strata_doctor.facts.parse import MAX_CPU, parse_cpumap

    groups = ",".join(["ffffffff"] * (1024 * 1024 // 9))
    start = time.perf_counter()
    cpus = parse_cpumap(groups)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.1, elapsed
    assert max(cpus) == MAX_CPU - 1 and len(cpus) == MAX_CPU
    small = parse_cpumap("00000000,0000000f")
    assert small == frozenset({0, 1, 2, 3})
    node = seed / "sys/devices/system/node/node0/cpumap"
    node.write_text(groups + "\n")
    start = time.perf_counter()
    check_json(seed)
    assert time.perf_counter() - start < 10


def test_a_5000_digit_integer_in_the_config_is_one_line(seed: Path) -> None:
    config = seed / "etc/strata-doctor.yaml"
    text = config.read_text() if config.is_file() else ""
    config.write_text(text + "workers: " + "9" * 5000 + "\n")
    line = assert_one_line(run_cli(["check", "--root", str(seed)]))
    assert "strata-doctor.yaml" in line and "workers" in line and len(line) < 400


def test_a_5000_digit_integer_in_a_command_capture_is_no_crash(seed: Path) -> None:
    commands = seed / ".strata-doctor/commands"
    captures = sorted(commands.glob("*.txt"))
    assert captures
    for capture in captures:
        capture.with_suffix(".rc").write_text("9" * 5000 + "\n")
        capture.write_text(capture.read_text() + "9" * 5000 + "\n")
    result = run_cli(["check", "--root", str(seed), "--format", "json"])
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert_one_line(result)
    else:
        assert result.exit_code in (0, 1)
        json.loads(result.stdout)


# -- odd numbers in a NUMA distance row ---------------------------------------------------
NODE = "sys/devices/system/node"


def topology(root: Path) -> Dict[str, Any]:
    """numa-topology's findings on ``root`` (none crashed): {"layout": summary, "quirks": [...]}."""
    data = check_json(root)
    rows = {c["id"]: c for c in data["checks"]}  # type: ignore[union-attr]
    assert [c["id"] for c in rows.values() if c["status"] == "crashed"] == []
    found = [f for f in data["findings"] if f["check"] == "numa-topology"]  # type: ignore[union-attr]
    # Beside a quirk the layout, fine, is a sentence of the quirk's detail (one row per check).
    told = [m.group(1) for f in found for m in re.finditer(r"The rest is fine: (.*?)\.(?: |$)", f["detail"])]
    return {"layout": [f["summary"] for f in found if f["id"] in ("layout", "single-node")] or told,
            "quirks": [f["summary"] for f in found if f["id"] == "firmware-quirk"]}


@pytest.mark.parametrize("rows, layout, quirks", [
    # node0's own distance 0: no ratio from it, node1's 10/21 still stands
    (("0 21", "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     ["node0: distance row contains 0 (firmware gave no SLIT)"]),
    (("0 0", "0 0"), "2 NUMA nodes",
     ["node0: distance row contains 0 (firmware gave no SLIT)",
      "node1: distance row contains 0 (firmware gave no SLIT)"]),
    (("-10 21", "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     ["node0: the distance to node0 reads '-10', not a distance (a number from 0 to 255); left out"]),
    (("10 -21", "-21 10"), "2 NUMA nodes",
     ["node0: the distance to node1 reads '-21', not a distance (a number from 0 to 255); left out",
      "node1: the distance to node0 reads '-21', not a distance (a number from 0 to 255); left out"]),
    (("10 abc", "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     ["node0: the distance to node1 reads 'abc', not a distance (a number from 0 to 255); left out"]),
    (("ten twenty-one", "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     ["node0: 2 distance entries are not distances (numbers from 0 to 255), the first 'ten' "
      "(to node0); left out"]),
    (("10 " + "9" * 70, "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     [f"node0: the distance to node1 reads '{'9' * 20}...', not a distance (a number from 0 to 255); "
      "left out"]),
    (("10 300", "300 10"), "2 NUMA nodes",
     ["node0: the distance to node1 reads '300', not a distance (a number from 0 to 255); left out",
      "node1: the distance to node0 reads '300', not a distance (a number from 0 to 255); left out"]),
    # 255 is the SLIT's "unreachable": no ratio rests on it
    (("10 255", "255 10"), "2 NUMA nodes",
     ["node0: the distance to node1 is 255: the firmware marks node1's memory unreachable from node0",
      "node1: the distance to node0 is 255: the firmware marks node0's memory unreachable from node1"]),
    (("10", "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     ["node0: distance row has 1 entry for 2 known nodes (node0, node1)"]),
    (("10 21 31 41", "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     ["node0: distance row has 4 entries for 2 known nodes (node0, node1)"]),
    (("", "21 10"), "2 NUMA nodes, distance 10/21 (remote memory 2.1x local)",
     ["node0: distance row is empty"]),
])
def test_odd_distances_are_quirks_never_a_crash(seed: Path, rows: Any, layout: str,
                                                quirks: List[str]) -> None:
    for node, row in enumerate(rows):
        (seed / NODE / f"node{node}/distance").write_text(row + "\n")
    found = topology(seed)
    assert found["layout"] == [layout]
    assert found["quirks"] == quirks


def test_a_zero_local_distance_on_four_nodes_is_no_crash(tmp_path: Path) -> None:
    snc = copy_host("xeon-snc2", tmp_path / "snc")
    (snc / NODE / "node0/distance").write_text("0 12 21 21\n")
    found = topology(snc)
    assert found["layout"] and "(remote memory 2.1x local)" in found["layout"][0]
    assert "node0: distance row contains 0 (firmware gave no SLIT)" in found["quirks"]


@pytest.mark.parametrize("local, remote", [(61.0, 0.0), (0.0, 0.0), (0.0, 24.4)])
def test_a_saved_probe_of_0_gbps_falls_back_to_the_distances(seed: Path, local: float,
                                                             remote: float) -> None:
    """A read of 0 GB/s is no measurement: no ratio rests on it (remote 0 divided by zero)."""
    from tests.test_probe_check import save, seed_probe

    data = seed_probe()
    for cell in data["matrix"]:
        cell["read_gbps"] = local if cell["cpu_node"] == cell["mem_node"] else remote
    save(seed, data)
    result = run_cli(["check", "--root", str(seed), "numa-binding"], env={"NO_COLOR": "1"})
    assert result.exit_code == 1, result.output
    assert "remote memory costs 21/10 = 2.1x local" in result.stdout
    assert "measured" not in result.stdout


# -- zeros where a count or a size belongs ---------------------------------------------------
def zero(key: str) -> Any:
    """An edit that sets ``key:`` (a meminfo line) to 0."""
    return lambda text: "".join(
        (line.split(":")[0] + ":        0 kB\n" if line.split(":")[0].split()[-1:] == [key] else line + "\n")
        for line in text.splitlines())


CPUFREQ = "sys/devices/system/cpu/cpufreq"
GPU_LINK = "sys/devices/pci0000:80/0000:80:03.0/0000:84:00.0"  # the compute GPU


@pytest.mark.parametrize("edits", [
    {"proc/meminfo": zero("MemTotal")},
    {"proc/meminfo": zero("MemFree")},
    {"proc/meminfo": zero("Hugepagesize")},
    {"proc/meminfo": zero("SwapTotal")},
    {f"{NODE}/node1/meminfo": zero("MemTotal")},
    {f"{NODE}/node0/meminfo": zero("MemTotal"), f"{NODE}/node1/meminfo": zero("MemTotal")},
    {f"{NODE}/node1/meminfo": zero("MemFree")},
    {f"{CPUFREQ}/policy0/cpuinfo_max_freq": "0\n", f"{CPUFREQ}/policy0/scaling_max_freq": "0\n",
     f"{CPUFREQ}/policy0/scaling_cur_freq": "0\n"},
    {f"{GPU_LINK}/current_link_width": "0\n", f"{GPU_LINK}/max_link_width": "0\n"},
    {f"{GPU_LINK}/current_link_speed": "0 GT/s PCIe\n", f"{GPU_LINK}/max_link_speed": "0 GT/s PCIe\n"},
    {"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
     "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "0\n"},
    {"proc/sys/kernel/numa_balancing": "0\n"},
], ids=lambda edits: "+".join(f"{path.rsplit('/', 2)[-2]}/{path.rsplit('/', 1)[-1]}" for path in edits))
def test_a_zero_count_or_size_is_no_crash(seed: Path, edits: Dict[str, Any]) -> None:
    for rel, edit in edits.items():
        path = seed / rel
        assert path.is_file(), rel  # the edit must change a file the seed box has
        path.write_text(edit(path.read_text()) if callable(edit) else edit)
    data = check_json(seed)
    crashed = [(c["id"], c.get("reason")) for c in data["checks"] if c["status"] == "crashed"]  # type: ignore
    assert crashed == []
    text = run_cli(["check", "--root", str(seed), "-v"], env={"NO_COLOR": "1"})
    assert text.exit_code == 1 and re.search(r"\bNone\b", text.stdout) is None, text.stdout


def test_a_zero_kb_hugepage_folder_is_no_crash(seed: Path) -> None:
    for base in ("sys/kernel/mm/hugepages", f"{NODE}/node0/hugepages", f"{NODE}/node1/hugepages"):
        (seed / base / "hugepages-2048kB").rename(seed / base / "hugepages-0kB")
    data = check_json(seed)
    assert [c["id"] for c in data["checks"] if c["status"] == "crashed"] == []  # type: ignore


# -- MemorySwapMax= in any of systemd's spellings of zero ------------------------------------
@pytest.mark.parametrize("value", ["0", "0B", "0K", "0G", "0T", "0P", "0E", "0.0G", "0%", " 0T "])
def test_memory_swap_max_zero_with_any_suffix_is_configured(tmp_path: Path, value: str) -> None:
    """systemd reads each of these as no swap at all; the running cgroup still allows it."""
    from strata_doctor.checks.swap import Swap
    from tests.test_limits import CG, _host, _run

    root = _host(tmp_path, {
        f"{CG}/memory.max": "max\n", f"{CG}/memory.swap.max": "max\n",
        "/etc/systemd/system/strata.service":
            f"[Service]\nExecStart=/opt/strata/run\nMemorySwapMax={value}\n",
    })
    found = _run(Swap(), root)
    assert [f.id for f in found] == ["configured"], [f.summary for f in found]
    assert f"MemorySwapMax={value.strip()} in /etc/systemd/system/strata.service" in found[0].summary


def test_memory_swap_max_above_zero_is_still_swappable(tmp_path: Path) -> None:
    from strata_doctor.checks.swap import Swap
    from tests.test_limits import CG, _host, _run

    root = _host(tmp_path, {
        f"{CG}/memory.max": "max\n", f"{CG}/memory.swap.max": "max\n",
        "/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\nMemorySwapMax=0.5K\n",
    }, gpu=False)  # a CPU-only engine: an arena pinned for a GPU could not be swapped at all
    assert [f.id for f in _run(Swap(), root)] == ["swappable"]


def test_an_unreachable_node_is_no_cost_numa_binding_quotes(seed: Path) -> None:
    """255 is the firmware's "unreachable", not 25.5 times a local read."""
    (seed / NODE / "node0/distance").write_text("10 255\n")
    (seed / NODE / "node1/distance").write_text("255 10\n")
    result = run_cli(["check", "--root", str(seed), "-v", "numa-binding"], env={"NO_COLOR": "1"})
    assert result.exit_code == 1, result.output
    assert "25.5x" not in result.stdout and "255/10" not in result.stdout
    assert "strata.service is not bound to the GPU's node 1; run it under" in result.stdout


# -- a value the tree does not give is said so, never "None" -------------------------------
@pytest.mark.parametrize("gone", [
    ["max_link_width"], ["current_link_width"], ["max_link_speed"], ["current_link_speed", "max_link_speed"],
])
def test_a_missing_link_file_is_unknown_not_none(seed: Path, gone: List[str]) -> None:
    for name in gone:
        (seed / GPU_LINK / name).unlink()
    (seed / GPU_LINK).parent.joinpath("current_link_width").unlink()  # the upstream hop's too
    result = run_cli(["check", "--root", str(seed), "-v", "pcie-link"], env={"NO_COLOR": "1"})
    assert result.exit_code in (0, 1), result.output
    assert re.search(r"\bNone\b", result.stdout) is None, result.stdout


def test_an_unreadable_governor_is_unknown_not_none(seed: Path) -> None:
    for policy in (seed / CPUFREQ).glob("policy*"):
        (policy / "scaling_governor").unlink()
    result = run_cli(["check", "--root", str(seed), "-v", "cpu-frequency"], env={"NO_COLOR": "1"})
    assert result.exit_code in (0, 1), result.output
    assert re.search(r"\bNone\b", result.stdout) is None, result.stdout
    assert "cpu-frequency" in result.stdout


def test_a_garbage_numa_node_is_absent_not_none(seed: Path) -> None:
    (seed / GPU_LINK / "numa_node").write_text("9" * 400 + "\n")
    result = run_cli(["check", "--root", str(seed), "-v", "gpu-placement"], env={"NO_COLOR": "1"})
    assert result.exit_code in (0, 1), result.output
    assert re.search(r"\bNone\b", result.stdout) is None, result.stdout
    assert "numa_node: absent" in result.stdout
