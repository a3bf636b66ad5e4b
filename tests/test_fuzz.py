"""A seeded mutation fuzzer over every fixture host: bad files never crash or hang `check`.

Each case copies nothing: one working copy per host is mutated in place (one to three files),
`check --format json` (every TEXT_EVERY-th case: `check -v`, in words) runs in-process through
click's CliRunner, and the touched paths are put back from the fixture. Every case must exit
0, 1 or 2 (docs/exit-codes.md; 3 is a crashed check), print valid JSON on 0 and 1, give one
line on stderr on 2, show no traceback, say no ``None`` in words, and end within CASE_SECONDS.
Beside them, each hostile tree of tests/fuzz_hostile.py (sparse 8 GiB files, odd distances,
mode-000 folders read as nobody, deep configs, probes and manifests...) is a case of its own.

    STRATA_FUZZ_CASES   how many mutated trees (default 2000, about two minutes on one core)
    STRATA_FUZZ_SEED    the generator's seed (default 11); a failure names seed and case

A failure prints each failing case's host and mutations (rerun: STRATA_FUZZ_SEED, _CASES).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import pytest

from tests import fuzz_hostile as hostile
from tests.conftest import HOSTS, run_cli

CASES = int(os.environ.get("STRATA_FUZZ_CASES", "2000"))
SEED = int(os.environ.get("STRATA_FUZZ_SEED", "11"))
CASE_SECONDS = 30.0  # a slower case fails (generous: machines are shared); a hang stops at HANG_SECONDS
HANG_SECONDS = 120
REPORT_EVERY = 40  # every 40th case also runs `report --format json` on the same tree
TEXT_EVERY = 4  # every 4th case runs `check -v` instead of JSON: its words must hold no None
ONE_MIB = 1 << 20
NUMBER = re.compile(rb"[0-9]+")
HUGE_NUMBERS = (b"9" * 400, b"9" * 5000, b"18446744073709551616", b"340282366920938463463374607431768211456")
BAD_UTF8 = (b"\xff", b"\xfe", b"\x80", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80")
LONG_LINES = (b"9" * ONE_MIB, b"f" * ONE_MIB, b"a " * (ONE_MIB // 2), b"0," * (ONE_MIB // 2))
HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())
AS_ROOT = os.geteuid() == 0


class Case(NamedTuple):
    """One mutated tree: which host, and what was done to which paths."""

    number: int
    host: str
    mutations: Tuple[Tuple[str, str], ...]
    """(mutation, path relative to the root)."""
    report: bool


# -- the mutations -------------------------------------------------------------------------
def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def truncate(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    _write(path, data[: rng.randrange(len(data))] if data else b"")
    return []


def empty(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    _write(path, b"")
    return []


def binary(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    _write(path, rng.randbytes(rng.choice((1, 7, 64, 512, 4096))))
    return []


def huge_numbers(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    every = rng.random() < 0.5
    _write(path, NUMBER.sub(lambda m: rng.choice(HUGE_NUMBERS) if every or rng.random() < 0.3 else m[0], data)
           if NUMBER.search(data) else rng.choice(HUGE_NUMBERS) + b"\n")
    return []


def negative_numbers(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    def negate(match: re.Match[bytes]) -> bytes:
        return rng.choice((b"-" + match[0], b"-1", b"-9223372036854775809", b"-" + b"9" * 400))

    _write(path, NUMBER.sub(negate, data) if NUMBER.search(data) else b"-1\n")
    return []


def zero_numbers(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    every = rng.random() < 0.5  # 0 where a count, a size, a distance or a divisor belongs
    _write(path, NUMBER.sub(lambda m: b"0" if every or rng.random() < 0.3 else m[0], data)
           if NUMBER.search(data) else b"0\n")
    return []


def non_utf8(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(out))
        out[at:at] = rng.choice(BAD_UTF8)
    _write(path, bytes(out))
    return []


def long_line(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    line = rng.choice(LONG_LINES)
    at = rng.randint(0, len(data))
    _write(path, data[:at] + line + data[at:] if rng.random() < 0.5 else line + b"\n")
    return []


def folder(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    path.unlink()
    path.mkdir()
    if rng.random() < 0.5:
        (path / "inside").write_bytes(data[:64])
    return []


def dangling_link(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    path.unlink()
    path.symlink_to(rng.choice(("no-such-file", "../no/such/dir/file", "/nonexistent-strata-fuzz/file")))
    return []


def link_loop(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    path.unlink()
    if rng.random() < 0.5:
        path.symlink_to(path.name)  # itself
        return []
    other = path.with_name(path.name + ".loop")
    path.symlink_to(other.name)
    other.symlink_to(path.name)
    return [other]


def chmod_000(rng: random.Random, path: Path, data: bytes) -> List[Path]:
    path.chmod(0)
    return []


Mutation = Callable[[random.Random, Path, bytes], List[Path]]
MUTATIONS: Dict[str, Mutation] = {
    "truncate": truncate,
    "empty": empty,
    "binary": binary,
    "huge-numbers": huge_numbers,
    "negative-numbers": negative_numbers,
    "zero-numbers": zero_numbers,
    "non-utf8": non_utf8,
    "1mb-line": long_line,
    "folder": folder,
    "dangling-link": dangling_link,
    "link-loop": link_loop,
    "chmod-000": chmod_000,
}


# -- working trees ---------------------------------------------------------------------------
def regular_files(root: Path) -> Tuple[List[str], List[str]]:
    """(files outside /proc/PID, files under /proc/PID) of ``root``, relative, sorted."""
    system: List[str] = []
    processes: List[str] = []
    for folder_path, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(folder_path, name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                rel = os.path.relpath(full, root)
                parts = rel.split(os.sep)
                in_proc = len(parts) > 2 and parts[0] == "proc" and parts[1].isdigit()
                (processes if in_proc else system).append(rel)
    return system, processes


def files_read(root: Path) -> List[str]:
    """The regular files a full ``check`` reads on the pristine host, relative and sorted:
    mutating these is what finds crashes."""
    from strata_doctor.cli.options import HostOptions, open_host, run_selected

    host, ctx = open_host(HostOptions(str(root), None))
    run_selected(ctx, (), ())
    found, top = set(), os.path.realpath(root)
    for path in list(host.reads) + list(getattr(host, "stats", {})):
        rel, real = str(path).strip("/"), os.path.realpath(root / str(path).strip("/"))
        # named without links (proc/self/status is proc/8/status): no two mutations meet
        if rel and real.startswith(top + os.sep) and os.path.isfile(real):
            found.add(os.path.relpath(real, top))
    return sorted(found)


class Trees:
    """One working copy per host, mutated in place and put back after each case."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.files: Dict[str, Tuple[List[str], List[str]]] = {}
        self.read: Dict[str, List[str]] = {}
        for name in HOST_NAMES:
            shutil.copytree(HOSTS / name, base / name, symlinks=True)
            self.files[name] = regular_files(HOSTS / name)
            self.read[name] = files_read(HOSTS / name)

    def root(self, host: str) -> Path:
        return self.base / host

    def plan(self, rng: random.Random, number: int, allow_chmod: bool) -> Case:
        host = HOST_NAMES[number % len(HOST_NAMES)]
        system, processes = self.files[host]
        names = [m for m in MUTATIONS if allow_chmod or m != "chmod-000"]
        chosen: Dict[str, str] = {}
        for index in range(rng.choice((1, 1, 2, 3))):
            draw = rng.random()
            pool = (self.read[host] if draw < 0.6 and self.read[host]
                    else processes if draw < 0.75 and processes else system)
            chosen[rng.choice(pool)] = "chmod-000" if allow_chmod and index == 0 else rng.choice(names)
        return Case(number, host, tuple((m, p) for p, m in sorted(chosen.items())),
                    number % REPORT_EVERY == REPORT_EVERY - 1)

    def apply(self, rng: random.Random, case: Case) -> List[Path]:
        root = self.root(case.host)
        touched: List[Path] = []
        for mutation, rel in case.mutations:
            path = root / rel
            touched.append(path)
            data = path.read_bytes()
            touched.extend(MUTATIONS[mutation](rng, path, data))
        return touched

    def restore(self, case: Case, touched: List[Path]) -> None:
        root = self.root(case.host)
        for path in reversed(touched):
            if os.path.lexists(path):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            pristine = HOSTS / case.host / path.relative_to(root)
            if os.path.lexists(pristine):
                shutil.copy2(pristine, path, follow_symlinks=False)


# -- running a case -----------------------------------------------------------------------------
class Hang(Exception):
    """A case ran past HANG_SECONDS."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def run_case(root: Path, case: Case) -> Optional[str]:
    """Run check (and report) on the mutated tree; None when every rule held, else why not."""
    problems: List[str] = []
    words = case.number % TEXT_EVERY == TEXT_EVERY - 2
    commands = [["check", "--root", str(root), *(["-v"] if words else ["--format", "json"])]]
    if case.report:
        commands.append(["report", "--root", str(root), "--format", "json"])
    for args in commands:
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(HANG_SECONDS)
        start = time.perf_counter()
        try:
            result = run_cli(args)
        except Hang:
            problems.append(f"{args[0]}: still running after {HANG_SECONDS} s")
            continue
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        elapsed = time.perf_counter() - start
        problems.extend(f"{args[0]}: {p}" for p in hostile.judge(args, result, elapsed, CASE_SECONDS))
    return "; ".join(problems) or None


def describe(case: Case, why: str) -> str:
    changes = ", ".join(f"{m} {p}" for m, p in case.mutations)
    return f"case {case.number} (seed {SEED}) on {case.host}: {changes}: {why}"


def fuzz(trees: Trees, numbers: List[int], allow_chmod: bool) -> Tuple[int, List[str]]:
    """Run the cases ``numbers``; (cases run, failures)."""
    failures: List[str] = []
    for number in numbers:
        rng = random.Random(SEED * 1_000_003 + number)
        case = trees.plan(rng, number, allow_chmod)
        touched = trees.apply(rng, case)
        try:
            why = run_case(trees.root(case.host), case)
        finally:
            trees.restore(case, touched)
        if why:
            failures.append(describe(case, why))
    return len(numbers), failures


# -- the tests -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world_readable_base() -> Iterator[Path]:
    """A folder everyone can traverse: the unprivileged part runs there as ``nobody``."""
    base = Path(tempfile.mkdtemp(prefix="strata-doctor-fuzz-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_mutated_trees_never_crash(world_readable_base: Path) -> None:
    """CASES mutated trees over every fixture host. chmod 000 means nothing to root, so as
    root those cases run in a forked child that has dropped to ``nobody`` (see below)."""
    assert HOST_NAMES, "no fixture hosts"
    trees = Trees(world_readable_base / "trees")
    start = time.perf_counter()
    numbers = list(range(CASES))
    unprivileged = numbers[::25] if AS_ROOT else []  # 4% of the cases, with chmod 000 among them
    run, failures = fuzz(trees, [n for n in numbers if n not in set(unprivileged)], allow_chmod=not AS_ROOT)
    if unprivileged:
        extra_run, extra_failures = _fuzz_as_nobody(trees, unprivileged)
        run += extra_run
        failures += extra_failures
    elapsed = time.perf_counter() - start
    print(f"\nfuzz: {run} mutated trees over {len(HOST_NAMES)} hosts in {elapsed:.1f} s (seed {SEED})")
    assert not failures, f"{len(failures)} of {run} cases failed:\n" + "\n".join(failures[:25])
    assert run == CASES


@pytest.fixture(scope="module")
def hostile_trees(world_readable_base: Path) -> hostile.HostileTrees:
    return hostile.HostileTrees(world_readable_base / "hostile", HOSTS)


@pytest.mark.parametrize("case", hostile.HOSTILE, ids=[c.name for c in hostile.HOSTILE])
def test_a_hostile_tree_never_crashes(hostile_trees: hostile.HostileTrees, case: hostile.Hostile) -> None:
    """One hostile tree of tests/fuzz_hostile.py: check in JSON and in words, and report."""
    if case.child == "nobody" and hostile.can_be_nobody():
        pytest.skip(str(hostile.can_be_nobody()))
    tree, scratch = hostile_trees.take(case)
    options, touched = case.make(tree, scratch)
    lines = hostile.command_lines(case, options)
    start = time.perf_counter()
    try:
        ran = hostile.run(case, lines)
    finally:
        hostile_trees.put_back(case, touched)
    each = (time.perf_counter() - start) / len(lines)
    problems = [f"{' '.join(args[:1] + args[-2:])}: {why}" for args, result in zip(lines, ran)
                for why in hostile.judge(args, result, each, CASE_SECONDS)]
    assert not problems, f"{case.name} on {case.host}:\n" + "\n".join(problems)
    assert len(ran) == len(lines)
    assert not case.refused or [(r.exit_code, case.refused in r.stderr) for r in ran] == [(2, True)], ran


def _fuzz_as_nobody(trees: Trees, numbers: List[int]) -> Tuple[int, List[str]]:
    """Run ``numbers`` (chmod 000 allowed) in a forked child as uid/gid 65534: every module is
    imported first, since the interpreter's own files may be out of that user's reach."""
    # One run of each command imports everything the cases can need.
    hostile.import_for_a_child()
    run_cli(["check", "--root", str(trees.root(HOST_NAMES[0])), "--format", "json"])
    run_cli(["report", "--root", str(trees.root(HOST_NAMES[0])), "--format", "json"])
    _open_tree_to_all(trees.base)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, run, send the verdicts, leave at once
        status = 0
        try:
            os.close(read_end)
            with contextlib.suppress(PermissionError):  # refused in some user namespaces
                os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            result = fuzz(trees, numbers, allow_chmod=True)
            with os.fdopen(write_end, "w") as out:
                json.dump(result, out)
        except BaseException as exc:  # reported through the pipe
            status = 1
            with contextlib.suppress(OSError):
                os.write(write_end, json.dumps([0, [f"the unprivileged run failed: {exc!r}"]]).encode())
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    run, failures = json.loads(text)
    return int(run), [str(f) for f in failures]


def _open_tree_to_all(base: Path) -> None:
    """Give the working copies to ``nobody``, who mutates and restores them in the child."""
    os.chown(base, 65534, 65534)
    for folder_path, dirs, files in os.walk(base):
        for name in dirs + files:
            os.lchown(os.path.join(folder_path, name), 65534, 65534)
