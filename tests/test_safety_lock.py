"""The lock is a lock: concurrent `fix` runs never lose an original (docs/fix.md#safety).

Real processes race here; the assertions hold for every interleaving: each run applies,
finds nothing to change, or exits 2 with the "another ... is running" line, and the tree
always reverts to the byte. Every process has a timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from strata_doctor.cli.options import run_selected
from strata_doctor.fix.apply import apply_plan
from strata_doctor.fix.lock import Lock, drop_state_if_empty
from strata_doctor.fix.plan import PlanOptions, build_plan
from strata_doctor.root import Root
from tests.conftest import HOSTS, REPO, seed_copy
from tests.test_fix_hosts import context_for, snapshot

SEED = HOSTS / "seed-box"
TIMEOUT = 120
BUSY = "another `strata-doctor fix` is running (pid "


def _start(tree: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "strata_doctor", "fix", "--root", str(tree), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _finish(procs: List[subprocess.Popen[str]]) -> List[Tuple[int, str, str]]:
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"a fix run did not end within {TIMEOUT} s: {err}") from None
        results.append((proc.returncode, out, err))
    return results


def _run(tree: Path, *args: str) -> Tuple[int, str, str]:
    return _finish([_start(tree, *args)])[0]


def _assert_outcome(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err, err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and BUSY in lines[0], err
    else:
        assert code in (0, 1), out + err


def _revert_all(tree: Path) -> None:
    for _ in range(6):
        code, out, err = _run(tree, "--revert")
        assert code == 0, out + err
        if "Nothing to revert" in out:
            return
    raise AssertionError("revert never reached 'Nothing to revert'")


def _applies(tree: Path) -> List[str]:
    folder = tree / "var/lib/strata-doctor/applies"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("runs", [2, 3])
def test_concurrent_applies(tmp_path: Path, runs: int) -> None:
    tree = seed_copy(tmp_path)
    original = snapshot(tree)
    for _ in range(2):
        results = _finish([_start(tree, "--apply") for _ in range(runs)])
        for result in results:
            _assert_outcome(*result)
        assert any(code in (0, 1) for code, _, _ in results), results
        assert len(_applies(tree)) == 1, _applies(tree)  # the others found nothing to change
        _revert_all(tree)
        assert snapshot(tree) == original


def test_concurrent_applies_that_wait(tmp_path: Path) -> None:
    tree = seed_copy(tmp_path)
    original = snapshot(tree)
    results = _finish([_start(tree, "--apply", "--wait") for _ in range(3)])
    for code, out, err in results:
        assert code in (0, 1), out + err
    assert sum("Nothing to change" in out for _, out, _ in results) == 2, [r[1][-200:] for r in results]
    assert len(_applies(tree)) == 1
    _revert_all(tree)
    assert snapshot(tree) == original


def test_apply_against_revert(tmp_path: Path) -> None:
    tree = seed_copy(tmp_path)
    original = snapshot(tree)
    for _ in range(2):
        code, out, err = _run(tree, "--apply")
        assert code in (0, 1), out + err
        for result in _finish([_start(tree, "--revert"), _start(tree, "--apply")]):
            _assert_outcome(*result)
        _revert_all(tree)
        assert snapshot(tree) == original


def test_loser_names_the_holder_and_removes_nothing(tmp_path: Path) -> None:
    tree = seed_copy(tmp_path)
    original = snapshot(tree)
    with Lock(Root(tree)) as held:
        lock = tree / "var/lib/strata-doctor/lock"
        inode = lock.stat().st_ino
        for args in (["--apply"], ["--revert"], ["--apply", "--force"]):
            code, out, err = _run(tree, *args)
            assert code == 2, out + err
            assert err.strip().splitlines() == [
                f"strata-doctor: error: another `strata-doctor fix` is running (pid {os.getpid()}); "
                "wait for it, or use --wait"], err
            assert lock.stat().st_ino == inode, "the loser replaced the holder's lock file"
        assert not (tree / "etc/systemd/system/strata.service.d").exists()
        drop_state_if_empty(held)
    assert snapshot(tree) == original


def _waiting_on(lock: Path, timeout: float = 60.0) -> bool:
    """Whether some process is blocked in flock() on ``lock`` (``/proc/locks`` says ``->``)."""
    inode = f":{lock.stat().st_ino} "
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/locks", encoding="ascii") as handle:
            if any("->" in line and inode in line + " " for line in handle):
                return True
        time.sleep(0.05)
    return False


def test_the_plan_is_made_under_the_lock(tmp_path: Path) -> None:
    """A waiting apply plans only once it holds the lock: it sees what the holder wrote and
    has nothing left to change, instead of carrying out a plan made before."""
    if not Path("/proc/locks").exists():
        pytest.skip("/proc/locks is needed to see the waiter")
    tree = seed_copy(tmp_path)
    original = snapshot(tree)
    with Lock(Root(tree)) as held:
        waiter = _start(tree, "--apply", "--wait")
        try:
            assert _waiting_on(tree / "var/lib/strata-doctor/lock"), "the second apply never waited"
            ctx = context_for(tree)
            plan = build_plan(ctx, run_selected(ctx, (), ()), PlanOptions())
            assert plan.changes
            apply_plan(ctx.root, plan, held)
        except BaseException:
            waiter.kill()
            raise
    code, out, err = _finish([waiter])[0]
    assert code == 0 and "Nothing to change" in out, out + err
    _revert_all(tree)
    assert snapshot(tree) == original
