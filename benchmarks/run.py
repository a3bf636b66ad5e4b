"""strata-doctor benchmarks: one command, one table, every target with its measured ratio.

    python3 benchmarks/run.py            # about a minute on two cores
    python3 benchmarks/run.py --rounds 5 # quicker, noisier

Every figure is a median over repeated runs; every comparison is a ratio of two figures
measured in the same run, with the runs of both sides interleaved so that load from
elsewhere on the machine hits them alike. Nothing here is a test: no test asserts a
duration. Figures and the machine they came from are recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import hosts  # noqa: E402  (benchmarks/ is not a package)

SHARED = REPO.parent / "shared"
CORPUS_HOST = "256ia64-64n2s2c"
SEED_ARGS = ["--arena", "46.84GiB", "--kv", "3.09GiB"]
HEAVY = ("jinja2", "psutil")  # yaml is imported when a config exists: PyYAML alone reads it
# The console script as a command that writes files runs it: the collector on and the
# interpreter's whole teardown, so the two shortcuts of cli.run() are measured side by side.
PLAIN_END = ("import sys, strata_doctor.cli as cli; cli.READ_ONLY_COMMANDS = frozenset(); "
             "sys.argv[0] = 'strata-doctor'; cli.run()")


@dataclass(frozen=True)
class Row:
    """One line of the result table."""

    name: str
    """What was measured."""
    value: str
    """The measured figure, with its unit."""
    target: str = ""
    """The target, e.g. ``<= 1.5x``; empty for reference figures."""
    ok: Optional[bool] = None
    """PASS/FAIL against the target; None for reference figures."""


def console_script() -> List[str]:
    """The same environment's ``strata-doctor`` (never a version manager's shim)."""
    script = Path(sys.executable).parent / "strata-doctor"
    return [str(script)] if script.exists() else [sys.executable, "-m", "strata_doctor"]


def bytecode_env(cache: Path) -> Dict[str, str]:
    """Run as installed: with compiled bytecode (pip compiles it at install time), kept in a
    temporary cache so the tree stays clean even where PYTHONDONTWRITEBYTECODE is set."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


ENV: Dict[str, str] = dict(os.environ)


def wall(argv: Sequence[str]) -> float:
    """Seconds one whole process takes, output discarded."""
    start = time.perf_counter()
    subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                   check=False)
    return time.perf_counter() - start


def interleaved(commands: Dict[str, Sequence[str]], rounds: int) -> Dict[str, float]:
    """Median wall time of each command, running them round-robin ``rounds`` times."""
    times: Dict[str, List[float]] = {name: [] for name in commands}
    for argv in commands.values():  # warm the page and bytecode caches once, untimed
        wall(argv)
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name].append(wall(argv))
    return {name: statistics.median(values) for name, values in times.items()}


def median_of(func: Callable[[], object], rounds: int) -> float:
    """Median CPU-bound duration of an in-process call."""
    values = []
    for _ in range(rounds):
        start = time.perf_counter()
        func()
        values.append(time.perf_counter() - start)
    return statistics.median(values)


def seed_root(tmp: Path) -> Tuple[Path, str]:
    """The seed box fixture when present, else a generated twin of it."""
    fixture = REPO / "tests" / "fixtures" / "hosts" / "seed-box"
    if (fixture / "sys").is_dir():
        return fixture, "tests/fixtures/hosts/seed-box"
    return hosts.generate(tmp / "seed-twin", hosts.SEED_SHAPE), "generated seed-box twin"


def corpus_root(tmp: Path) -> Optional[Path]:
    """The largest real snapshot of the corpus, unpacked; None without ../shared."""
    archive = SHARED / "corpus" / "hwloc" / f"{CORPUS_HOST}.tar.bz2"
    if not archive.exists():
        return None
    dest = tmp / "corpus"
    dest.mkdir()
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir() or m.issym()]
        tar.extractall(dest, members=members)  # the project's own corpus, members checked
    found = [p for p in dest.rglob("sys") if p.is_dir()]
    return found[0].parent if found else None


def ratio_row(name: str, value: float, base: float, limit: float, unit: str = "") -> Row:
    """A ratio with its target."""
    ratio = value / base if base else float("inf")
    return Row(name, f"{ratio:.2f}x{unit}", f"<= {limit}x", ratio <= limit)


def process_rows(roots: Dict[str, Path], rounds: int) -> List[Row]:
    """Whole-process timings: floors, check on each host, live check, lstopo."""
    doctor = console_script()
    commands: Dict[str, Sequence[str]] = {
        "python": [sys.executable, "-c", "pass"],
        "floor": [sys.executable, "-c", "import click"],
        "seed": [*doctor, "check", "--root", str(roots["seed"]), *SEED_ARGS, "--quiet"],
        "seed-plain": [sys.executable, "-c", PLAIN_END, "check", "--root", str(roots["seed"]), *SEED_ARGS,
                       "--quiet"],
        "large": [*doctor, "check", "--root", str(roots["large"]), *SEED_ARGS, "--quiet"],
        "live": [*doctor, "check", "--quiet"],
    }
    if "corpus" in roots:
        commands["corpus"] = [*doctor, "check", "--root", str(roots["corpus"]), *SEED_ARGS, "--quiet"]
    lstopo = shutil.which("lstopo-no-graphics")
    refused: Dict[str, str] = {}
    if lstopo:
        for name in ("seed", "large", "corpus"):
            if name in roots:
                argv = [lstopo, "--if", "fsroot", "--input", str(roots[name]), "--of", "xml", "-"]
                why = lstopo_refuses(argv)
                if why:  # a failing run is fast and would pass for a figure
                    refused[name] = why
                else:
                    commands[f"lstopo-{name}"] = argv
    t = interleaved(commands, rounds)
    rows = [
        Row("python -c pass", f"{t['python'] * 1000:.0f} ms"),
        Row("python -c 'import click' (the floor)", f"{t['floor'] * 1000:.0f} ms"),
        Row("check, seed box replayed", f"{t['seed'] * 1000:.0f} ms"),
        # A guard, not a race (docs/performance.md): clarity wins over a millisecond.
        ratio_row("  seed box replayed / floor", t["seed"], t["floor"], 2.0),
        Row("  the same with the collector on and the whole teardown / floor",
            f"{t['seed-plain'] / t['floor']:.2f}x (reference: what cli.run()'s two shortcuts save)"),
        Row("check, live on this machine", f"{t['live'] * 1000:.0f} ms"),
        ratio_row("  live / floor", t["live"], t["floor"], 2.0),
    ]
    if "corpus" in t:
        rows += [Row(f"check, corpus {CORPUS_HOST} (64 nodes)", f"{t['corpus'] * 1000:.0f} ms"),
                 ratio_row("  corpus / seed box", t["corpus"], t["seed"], 1.3)]
    rows += [Row("check, generated 32 nodes / 2,048 CPUs / 16 GPUs", f"{t['large'] * 1000:.0f} ms"),
             ratio_row("  generated large / seed box", t["large"], t["seed"], 1.3)]
    for name in ("seed", "corpus", "large"):
        key = f"lstopo-{name}"
        if key in t:
            rows.append(Row(f"lstopo-no-graphics --if fsroot, {name} (reference)",
                            f"{t[key] * 1000:.0f} ms; check/lstopo {t[name] / t[key]:.2f}x"))
        elif name in refused:
            rows.append(Row(f"lstopo-no-graphics --if fsroot, {name} (reference)",
                            f"not timed: {refused[name]}"))
    return rows


def lstopo_refuses(argv: Sequence[str]) -> str:
    """Why lstopo cannot read a tree (its first line of stderr), or "" when it can."""
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if done.returncode == 0:
        return ""
    lines = done.stderr.decode(errors="replace").strip().splitlines()
    return f"exit {done.returncode}: {lines[0] if lines else 'no message'}"


def numa_maps_row(rounds: int) -> Row:
    """Parsing a 1,000,000-line numa_maps of a large engine, as check reads it."""
    from strata_doctor.facts.engine import read_process
    from strata_doctor.root import Root

    with tempfile.TemporaryDirectory() as tmp:
        pid_dir = Path(tmp) / "proc" / "4242"
        pid_dir.mkdir(parents=True)
        (pid_dir / "numa_maps").write_text(hosts.numa_maps(1_000_000, 2))
        (pid_dir / "status").write_text("Name:\tstrata\nCpus_allowed_list:\t0-87\nMems_allowed_list:\t0-1\n")
        seconds = median_of(lambda: read_process(Root(tmp), 4242), max(3, rounds // 3))
    return Row("numa_maps, 1,000,000 lines (read + parse)", f"{seconds:.2f} s", "<= 1 s", seconds <= 1.0)


def process_scan_row(rounds: int) -> Row:
    """The cpu-contention process scan over 5,000 processes."""
    import random

    from strata_doctor.facts.processes import read_processes
    from strata_doctor.root import Root

    with tempfile.TemporaryDirectory() as tmp:
        rng = random.Random(1)
        for pid in range(1000, 6000):
            for path, text in hosts.process_files(pid, f"worker{pid}", 1, "0-87", rng).items():
                target = Path(tmp) / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        seconds = median_of(lambda: read_processes(Root(tmp)), max(3, rounds // 3))
    per = seconds / 5000 * 1e6
    return Row("cpu-contention scan, 5,000 processes", f"{per:.1f} us/process", "<= 20 us", per <= 20)


def probe_yardstick_row(rounds: int) -> Row:
    """probe's read bandwidth (every CPU of the first node) against one memchr thread,
    over the same 256 MiB buffer bound to that node (docs/probe.md)."""
    from strata_doctor.probe.bandwidth import yardstick
    from strata_doctor.probe.plan import ProbeRefused
    from strata_doctor.probe.system import System, Unsupported

    try:
        result = yardstick(System(), 256 << 20, 0.3, rounds=max(3, rounds // 3) | 1)
    except (Unsupported, ProbeRefused, OSError) as exc:
        return Row("probe read bandwidth / one memchr thread", f"skipped: {exc}", ">= 1x", None)
    ratio = result.probe_gbps / result.single_gbps
    return Row(f"probe read bandwidth / one memchr thread (node {result.node})",
               f"{ratio:.2f}x ({result.probe_gbps:.1f} vs {result.single_gbps:.1f} GB/s, "
               f"{result.threads} threads)", ">= 1x", ratio >= 1.0)


def bundle_rows(seed: Path, rounds: int) -> List[Row]:
    """``report --bundle`` on the seed box: time and size."""
    doctor = console_script()
    if subprocess.run([*doctor, "report", "--help"], capture_output=True, check=False).returncode:
        return [Row("report --bundle", "not available in this build")]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seed.tar.gz"
        argv = [*doctor, "report", "--root", str(seed), *SEED_ARGS, "--bundle", str(out),
                "--output", str(Path(tmp) / "report.md")]
        seconds = statistics.median(wall(argv) for _ in range(max(3, rounds // 2)))
        size = out.stat().st_size if out.exists() else -1
    return [Row("report --bundle, seed box", f"{seconds * 1000:.0f} ms", "< 1 s", seconds < 1.0),
            Row("  bundle size", f"{size / 1024:.1f} KiB", "< 256 KiB", 0 <= size < 256 * 1024)]


def long_line_row() -> Row:
    """Redacting one 8 MiB line of a unit file (words, dashes and a secret at its end)."""
    from strata_doctor.output.redact import Redactor

    line = "ExecStartPre=/opt/strata/fetch " + "model.gguf --- " * (8 * 1024 * 1024 // 15) + "--token t1\n"
    seconds = median_of(lambda: Redactor().text(line), 3)
    return Row("redaction, one 8 MiB unit file line", f"{seconds:.1f} s", "<= 15 s", seconds <= 15.0)


def import_rows(seed: Path, top: int = 12) -> Tuple[List[Row], List[str]]:
    """``-X importtime`` of a replayed check: heavy imports and the top offenders."""
    argv = [sys.executable, "-X", "importtime", "-c",
            "import sys; from strata_doctor.cli import main; sys.argv[0] = 'strata-doctor'; main()",
            "check", "--root", str(seed), *SEED_ARGS, "--quiet"]
    err = subprocess.run(argv, capture_output=True, text=True, check=False, env=ENV).stderr
    modules: List[Tuple[int, int, str]] = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = (part.strip() for part in line[12:].split("|"))
        modules.append((int(self_us), int(cumulative), name))
    names = {name for _, _, name in modules}
    heavy = [h for h in HEAVY if h in names]
    rows = [Row("jinja2 / psutil imported by check", ", ".join(heavy) or "none", "none", not heavy)]
    ours = sum(s for s, _, n in modules if n.startswith("strata_doctor"))
    rows.append(Row("strata_doctor modules, import self time", f"{ours / 1000:.1f} ms"))
    lines = [f"{s / 1000:7.1f} ms self {c / 1000:7.1f} ms cumulative  {n}"
             for s, c, n in sorted(modules, reverse=True)[:top]]
    return rows, lines


def machine() -> str:
    """The machine, in the words docs/performance.md records."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}, load average {load:.2f} at start")


def main() -> int:
    """Run everything and print the table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="repetitions per figure (median)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as tmp_name:
        tmp = Path(tmp_name)
        ENV.update(bytecode_env(tmp / "pycache"))
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        seed, seed_label = seed_root(tmp)
        roots = {"seed": seed, "large": hosts.generate(tmp / "large", hosts.LARGE_SHAPE)}
        corpus = corpus_root(tmp)
        if corpus is not None:
            roots["corpus"] = corpus
        print(f"seed box: {seed_label}; corpus: {'found' if corpus else 'absent (../shared)'}\n")
        rows = process_rows(roots, args.rounds)
        rows.append(numa_maps_row(args.rounds))
        rows.append(process_scan_row(args.rounds))
        rows.append(probe_yardstick_row(args.rounds))
        rows += bundle_rows(seed, args.rounds)
        rows.append(long_line_row())
        import_table, offenders = import_rows(seed)
        rows += import_table
    width = max(len(r.name) for r in rows)
    vwidth = max(len(r.value) for r in rows)
    for row in rows:
        verdict = "" if row.ok is None else ("PASS" if row.ok else "FAIL")
        print(f"{row.name.ljust(width)}  {row.value.ljust(vwidth)}  {row.target.ljust(10)} {verdict}")
    print("\n-X importtime, top offenders of a replayed check:")
    print("\n".join(offenders))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
