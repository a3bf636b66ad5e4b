"""The fuzzer's hostile trees (tests/test_fuzz.py): one case each, beside its random mutations.

Each case makes one fixture host's working copy hostile in one way (put back after it) and
names the command lines to run on it: sparse 8 GiB files, distance rows with 0 as a node's
own distance, negative or odd distances, folders of mode 000 read as ``nobody``, a config or
saved probe or bundle manifest nested 100,000 deep, a config that is not UTF-8. A case that
could take the machine down with it (an 8 GiB read) runs in a child process of bounded
memory (``python -m tests.fuzz_hostile``, which runs the command lines in-process as the
fuzzer does and prints what each did); one as ``nobody`` in a forked child that dropped to
that user; the rest in this process.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import pwd
import re
import resource
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Tuple

EIGHT_GIB = 8 << 30
DEEP = 100_000
CHILD_SECONDS = 120
CHILD_MEMORY = 4 << 30
"""The child's address space: a read of a whole 8 GiB file fails there, not on the machine."""
NODE = "sys/devices/system/node"
REPO = Path(__file__).resolve().parent.parent
NONE_WORD = re.compile(r"\bNone\b")
ODD_DISTANCES = ("0", "-21", "255", "x", "300", "18446744073709551616")

Make = Callable[[Path, Path], Tuple[List[str], List[str]]]
"""(tree, scratch folder) -> (the options that name the tree, the config or the bundle; the
paths of the tree it changed, relative, for :meth:`HostileTrees.put_back`)."""


class Hostile(NamedTuple):
    """One hostile tree: which host, how it is made hostile, how it is run."""

    name: str
    host: str
    make: Make
    child: str = ""
    """``""``: in-process; ``"bounded"``: a child with CHILD_MEMORY; ``"nobody"``: a child as nobody."""
    refused: str = ""
    """For an input read before any host file (a config, a bundle), refused alike by every
    command: what the one line of the refusal says. One ``check`` runs (``report --bundle``
    writes a bundle)."""


class Ran(NamedTuple):
    """What one command line did, as :func:`judge` reads it."""

    exception: Optional[str]
    exit_code: int
    stdout: str
    stderr: str


# -- making a tree hostile --------------------------------------------------------------------
def sparse(*rels: str) -> Make:
    def make(tree: Path, scratch: Path) -> Tuple[List[str], List[str]]:
        for rel in rels:
            os.truncate(tree / rel, EIGHT_GIB)  # a hole: no disk, but st_size says 8 GiB
        return ["--root", str(tree)], list(rels)
    return make


def distances(word: Callable[[int, str], str]) -> Make:
    """Every node's distance row, each entry ``word(index, entry)``."""
    def make(tree: Path, scratch: Path) -> Tuple[List[str], List[str]]:
        rows = sorted((tree / NODE).glob("node*/distance"))
        assert rows, f"{tree.name} has no distance rows"
        for row in rows:
            row.write_text(" ".join(word(i, w) for i, w in enumerate(row.read_text().split())) + "\n")
        return ["--root", str(tree)], [str(row.relative_to(tree)) for row in rows]
    return make


def mode_000(*rels: str) -> Make:
    def make(tree: Path, scratch: Path) -> Tuple[List[str], List[str]]:
        folders = [tree / rel if rel != "proc/PID" else _a_process(tree) for rel in rels]
        for folder in folders:
            assert folder.is_dir(), f"{tree.name} has no {folder.relative_to(tree)}"
            folder.chmod(0)
        return ["--root", str(tree)], [str(folder.relative_to(tree)) for folder in folders]
    return make


def _a_process(tree: Path) -> Path:
    return next(p for p in sorted((tree / "proc").iterdir()) if p.name.isdigit())


def config(data: bytes, default: bool) -> Make:
    """``data`` as ``--config FILE``, or as the tree's own ``/etc/strata-doctor.yaml``."""
    def make(tree: Path, scratch: Path) -> Tuple[List[str], List[str]]:
        path = tree / "etc/strata-doctor.yaml" if default else scratch / "config.yaml"
        path.write_bytes(data)
        if default:
            return ["--root", str(tree)], ["etc/strata-doctor.yaml"]
        return ["--root", str(tree), "--config", str(path)], []
    return make


def saved_probe(data: bytes) -> Make:
    def make(tree: Path, scratch: Path) -> Tuple[List[str], List[str]]:
        path = tree / "var/lib/strata-doctor/probe.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return ["--root", str(tree)], ["var/lib/strata-doctor/probe.json"]
    return make


def bundle_manifest(data: bytes) -> Make:
    """A bundle of the tree (``report --bundle``) whose manifest.json is ``data``."""
    def make(tree: Path, scratch: Path) -> Tuple[List[str], List[str]]:
        from tests.conftest import run_cli

        made = scratch / "made.tar.gz"
        result = run_cli(["report", "--root", str(tree), "--bundle", str(made)])
        assert result.exit_code == 0, result.stderr
        buffer = io.BytesIO()
        with tarfile.open(made) as old, tarfile.open(fileobj=buffer, mode="w") as new:
            for info in old.getmembers():
                handle = old.extractfile(info) if info.isfile() else None
                body = handle.read() if handle is not None else None
                if info.name.endswith("/manifest.json") and info.name.count("/") == 1:
                    body, info.size = data, len(data)
                new.addfile(info, io.BytesIO(body) if body is not None else None)
        out = scratch / "deep.tar.gz"
        out.write_bytes(gzip.compress(buffer.getvalue()))
        return ["--bundle", str(out)], []
    return make


NESTED_LIST = b"[" * DEEP + b"]" * DEEP
NESTED_YAML = b"arena: " + b"[" * (DEEP * 3 // 10) + b"]" * (DEEP * 3 // 10) + b"\n"
"""30,000 deep, inside the config's 64 KiB bound: refused for its depth, not its size."""
HOSTILE = (
    Hostile("sparse-8gib-files", "seed-box",
            sparse("proc/meminfo", f"{NODE}/node1/meminfo", f"{NODE}/node0/distance"), child="bounded"),
    Hostile("zero-local-distances", "epyc-nps4", distances(lambda i, w: "0" if w == "10" else w)),
    Hostile("negative-distances", "xeon-snc2", distances(lambda i, w: "-" + w)),
    Hostile("odd-distances", "xeon-snc2",
            distances(lambda i, w: w if w == "10" else ODD_DISTANCES[i % len(ODD_DISTANCES)])),
    Hostile("sysfs-folders-000-as-nobody", "seed-box",
            mode_000(f"{NODE}/node1", "sys/devices/system/cpu/cpufreq", "sys/kernel/mm/hugepages",
                     "sys/fs/cgroup/system.slice"), child="nobody"),
    Hostile("proc-etc-folders-000-as-nobody", "seed-box",
            mode_000("proc/PID", "proc/sys", "etc/systemd/system", ".strata-doctor/commands"),
            child="nobody"),
    Hostile("deep-yaml-config", "seed-box", config(NESTED_YAML, default=False),
            refused="nested too deeply for a config"),
    Hostile("non-utf8-config", "seed-box",
            config(b"arena: 46.84GiB\nunit: \xff\xfe.service\n", default=False), refused="not UTF-8"),
    Hostile("non-utf8-default-config", "seed-box", config(b"arena: 4\xc3\x286GiB\n", default=True),
            refused="not UTF-8"),
    Hostile("deep-json-saved-probe", "seed-box", saved_probe(NESTED_LIST)),
    Hostile("deep-json-bundle-manifest", "seed-box", bundle_manifest(NESTED_LIST),
            refused="manifest.json is nested too deeply"),
)


def judge(args: List[str], result: Any, elapsed: float, limit: float) -> Iterator[str]:
    """What is wrong with one command's run: ``result`` is click's, or a hostile case's Ran."""
    command, as_json = args[0], "json" in args
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raised = result.exception
        yield (raised if isinstance(raised, str) else f"raised {type(raised).__name__}: {raised}")[:300]
        return
    allowed = (0, 1, 2) if command == "check" else (0, 2)
    if result.exit_code not in allowed:
        yield f"exit {result.exit_code} {_crashed(result.stdout) if result.exit_code == 3 else ''}"[:300]
    output = result.stdout + result.stderr
    if "Traceback" in output:
        yield "a traceback in the output"
    if as_json and (result.exit_code == 0 or (result.exit_code == 1 and command == "check")):
        try:
            json.loads(result.stdout)
        except ValueError:
            yield "stdout is not JSON"
    said = NONE_WORD.search(output)  # a value missing where words expected one
    if said:
        yield f"says None: ...{output[max(0, said.start() - 80):said.end()]}"
    if result.exit_code == 2 and len(result.stderr.splitlines()) != 1:
        yield f"exit 2 with {len(result.stderr.splitlines())} lines on stderr"
    if elapsed > limit:
        yield f"took {elapsed:.1f} s"


def _crashed(stdout: str) -> str:
    """The crashed checks of a JSON run, with why; empty when the output says none."""
    try:
        rows = json.loads(stdout)["checks"]
        return "; ".join(f"{r['id']}: {r['reason']}" for r in rows if r["status"] == "crashed")
    except (ValueError, KeyError, TypeError):
        return ""


# -- running one ------------------------------------------------------------------------------
def command_lines(case: Hostile, options: List[str]) -> List[List[str]]:
    """check in JSON and in words (``-v``: every detail), and report; ``check`` alone for an
    input that is refused."""
    if case.refused:
        return [["check", *options]]
    return [["check", *options, "--format", "json"], ["check", *options, "-v"],
            ["report", *options, "--format", "json"]]


def run(case: Hostile, lines: List[List[str]]) -> List[Ran]:
    """Run ``lines`` in-process, or in a child as the case says."""
    if case.child == "nobody":
        return _as_nobody(lines)
    if not case.child:
        return run_here(lines)
    child = subprocess.run(
        [sys.executable, "-m", "tests.fuzz_hostile", json.dumps(lines)], capture_output=True,
        text=True, timeout=CHILD_SECONDS, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
        preexec_fn=_bound_memory, check=False)
    if child.returncode != 0:
        return [Ran(f"the child ended with {child.returncode}: {child.stderr[-300:]}", child.returncode,
                    child.stdout, child.stderr)]
    return [Ran(*row) for row in json.loads(child.stdout)]


def _bound_memory() -> None:
    """In the child, before it runs: a read of a whole 8 GiB file fails there."""
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def import_for_a_child() -> None:
    """Import what a run can need before a forked child drops to a user who may not read
    the interpreter's files: the config's and the report's libraries, the encodings."""
    import codecs

    import jinja2  # noqa: F401 - imported for the child
    import yaml  # noqa: F401 - imported for the child

    for encoding in ("latin-1", "ascii", "utf-8", "utf-16", "utf-32"):
        codecs.lookup(encoding)


def _as_nobody(lines: List[List[str]]) -> List[Ran]:
    """``lines`` in a forked child that became ``nobody``. Forked, not run: the interpreter
    may live where nobody may not go (``/root/.pyenv``), so the child runs what this process
    has imported, and the lines run here first, as root, to import what they need."""
    import_for_a_child()
    run_here(lines)
    account = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, run, send what each line did, leave at once
        status = 0
        try:
            os.close(read_end)
            with contextlib.suppress(PermissionError):  # refused in some user namespaces
                os.setgroups([])
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            rows = [tuple(r) for r in run_here(lines)]
        except BaseException as exc:  # reported through the pipe
            status, rows = 1, [(f"the unprivileged run failed: {exc!r}", -1, "", "")]
        with contextlib.suppress(OSError), os.fdopen(write_end, "w") as out:
            json.dump(rows, out)
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return [Ran(*row) for row in json.loads(text)]


def run_here(lines: List[List[str]]) -> List[Ran]:
    """Each command line through click's runner; an exception is what it did."""
    from strata_doctor.output import bundle_replay
    from tests.conftest import run_cli

    done: List[Ran] = []
    for args in lines:
        try:
            result = run_cli(args, env={"NO_COLOR": "1"})
        except BaseException as exc:  # MemoryError and RecursionError are findings here
            done.append(Ran(f"{type(exc).__name__}: {exc}"[:300], -1, "", ""))
            continue
        finally:
            bundle_replay.release()  # a replay takes SIGTERM and SIGINT over
        raised = result.exception if not isinstance(result.exception, SystemExit) else None
        done.append(Ran(None if raised is None else f"{type(raised).__name__}: {raised}",
                        result.exit_code, result.stdout, result.stderr))
    return done


def main(argv: List[str]) -> int:
    """``python -m tests.fuzz_hostile LINES``: run the JSON list of command lines, print what each did."""
    rows: List[Tuple[Any, ...]] = [tuple(r) for r in run_here(json.loads(argv[1]))]
    json.dump(rows, sys.stdout)
    return 0


def can_be_nobody() -> Optional[str]:
    """Why the ``nobody`` cases cannot run here; None when they can."""
    if os.geteuid() != 0:
        return "running as another user needs root"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return "this host has no user nobody"
    return None


class HostileTrees:
    """One working copy per host the cases use, each case's changes put back after it: a
    copy of a host costs seconds on a busy disk, a put-back nothing."""

    def __init__(self, base: Path, hosts: Path) -> None:
        self.base = base
        self.hosts = hosts

    def take(self, case: Hostile) -> Tuple[Path, Path]:
        """The case's host (copied on first use) and an empty scratch folder of its own."""
        tree, scratch = self.base / case.host, self.base / "scratch" / case.name
        if not tree.exists():
            shutil.copytree(self.hosts / case.host, tree, symlinks=True)
        scratch.mkdir(parents=True)
        return tree, scratch

    def put_back(self, case: Hostile, touched: List[str]) -> None:
        """Each changed path as the fixture has it: a folder's mode, a file's bytes, and what
        the fixture lacks removed, with the folders made for it."""
        tree, pristine = self.base / case.host, self.hosts / case.host
        for rel in touched:
            path, source = tree / rel, pristine / rel
            if source.is_dir() and not source.is_symlink():
                path.chmod(stat.S_IMODE(source.stat().st_mode))
                continue
            if os.path.lexists(path):
                path.unlink()
            if os.path.lexists(source):
                shutil.copy2(source, path, follow_symlinks=False)
            parent = path.parent
            while parent != tree and not (pristine / parent.relative_to(tree)).exists():
                parent.rmdir()
                parent = parent.parent


if __name__ == "__main__":
    sys.exit(main(sys.argv))

