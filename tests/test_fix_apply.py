"""``strata-doctor fix --apply`` and ``--revert`` on copies of hosts.

Each host is copied (symlinks kept), fixed, checked again, fixed again (nothing to do),
and reverted; the tree must then equal the original byte for byte, modes included. The
generated files are compared with ``tests/golden/fix/<host>.txt``; after an intended
change, regenerate with ``STRATA_UPDATE_GOLDEN=1 python -m pytest tests/test_fix_apply.py``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from strata_doctor.cli.options import run_selected
from strata_doctor.fix import apply as applier
from strata_doctor.fix import steps as writer_steps
from strata_doctor.fix.apply import apply_plan
from strata_doctor.fix.plan import PlanOptions, build_plan
from strata_doctor.fix.revert import revert_last
from strata_doctor.fix.steps import ApplyError
from tests.conftest import HOSTS, PREFLIGHT_SCRIPT, REPO, compare_golden, copy_host, run_cli
from tests.test_fix_hosts import SYNTHETIC, Entry, context_for, make_host, snapshot

GOLDEN = REPO / "tests" / "golden" / "fix"
FIXTURES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []
STATE = "var/lib/strata-doctor"


def _copy_fixture(tmp_path: Path, name: str) -> Path:
    return copy_host(name, tmp_path / name)


def _generated(before: Dict[str, Entry], after: Dict[str, Entry]) -> str:
    """The files an apply created or changed, outside the state directory, as one text."""
    parts: List[str] = []
    for rel in sorted(after):
        kind, mode, data = after[rel]
        if kind != "file" or rel.startswith(STATE) or before.get(rel) == after[rel]:
            continue
        text = data.decode().replace(os.environ.get("STRATA_DOCTOR_SCRIPT", "\0"), PREFLIGHT_SCRIPT)
        parts.append(f"==> /{rel} (mode {mode:04o}) <==\n{text}")
    return "\n".join(parts) if parts else "(nothing to change)\n"


def _compare_golden(name: str, actual: str) -> None:
    compare_golden(GOLDEN / f"{name}.txt", actual)


def _round_trip(tree: Path, extra: List[str], golden: str) -> None:
    original = snapshot(tree)
    before = run_cli(["check", "--root", str(tree), "--format", "json"])
    applied = run_cli(["fix", "--root", str(tree), "--apply", *extra])
    assert applied.exit_code in (0, 1), applied.stdout + applied.stderr
    changed = snapshot(tree)
    _compare_golden(golden, _generated(original, changed))
    if changed != original:
        _assert_configured(tree, json.loads(before.stdout), applied.stdout)
    again = run_cli(["fix", "--root", str(tree), "--apply", *extra])
    assert again.exit_code == 0, again.stdout + again.stderr
    assert "Nothing to change" in again.stdout
    assert snapshot(tree) == changed, "a second apply wrote something"
    reverted = run_cli(["fix", "--root", str(tree), "--revert"])
    assert reverted.exit_code == 0, reverted.stderr
    assert snapshot(tree) == original


def _assert_configured(tree: Path, before: Dict[str, object], apply_output: str) -> None:
    after = json.loads(run_cli(["check", "--root", str(tree), "--format", "json"]).stdout)
    # A fix made only of manual steps (delete orphaned hugetlbfs files) cannot change the
    # finding by itself; only fixes that write files must turn into "configured". Nor can a
    # file that only a manual step puts to use (the numactl wrapper on a host without
    # systemd: the engine must be started through it).
    was = {
        (f["check"], f["id"]): f
        for f in before["findings"]  # type: ignore[index]
        if f["fix"] and f["fix"]["files"] and (f["fix"]["actions"] or not f["fix"]["manual"])
    }
    now = {(f["check"], f["id"]): f for f in after["findings"]}
    for (check, finding_id), finding in was.items():
        if finding["severity"] in ("ok", "info"):
            continue
        assert (check, finding_id) not in now, f"{check}/{finding_id} still reported after the fix"
        pending = [f for (c, _), f in now.items() if c == check]
        assert pending and all("configured" in (f["id"] + f["summary"]).lower() for f in pending), pending
    assert "before → after" in apply_output


@pytest.mark.parametrize("name", SYNTHETIC)
def test_round_trip_synthetic(tmp_path: Path, name: str) -> None:
    both = ["--reserve-node", "--preflight"]
    flags = {"two-node-252": both, "seed-model": both}
    extra = flags.get(name, [])
    _round_trip(make_host(tmp_path, name), extra, name)


@pytest.mark.parametrize("name", FIXTURES)
def test_round_trip_fixture(tmp_path: Path, name: str) -> None:
    _round_trip(_copy_fixture(tmp_path, name), [], name)


def test_seed_box_done_when(tmp_path: Path) -> None:
    if not (HOSTS / "seed-box").is_dir():
        pytest.skip("tests/fixtures/hosts/seed-box is not there yet")
    _done_when(_copy_fixture(tmp_path, "seed-box"), real_box=True)


def test_seed_model_done_when(tmp_path: Path) -> None:
    _done_when(make_host(tmp_path, "seed-model"), real_box=False)


def _done_when(tree: Path, real_box: bool) -> None:
    original = snapshot(tree)
    result = run_cli(["fix", "--root", str(tree), "--apply", "--reserve-node"])
    assert result.exit_code == 0, result.stdout + result.stderr
    etc = tree / "etc/systemd/system"
    dropin = (etc / "strata.service.d/60-strata-doctor-numa.conf").read_text()
    assert "NUMAPolicy=preferred\nNUMAMask=1\nCPUAffinity=22-43,66-87\n" in dropin
    assert "Slice=strata.slice" in (etc / "strata.service.d/60-strata-doctor-slice.conf").read_text()
    assert "AllowedCPUs=22-43,66-87" in (etc / "strata.slice").read_text()
    for name in ("system.slice", "user.slice", "init.scope"):
        assert "AllowedCPUs=0-21,44-65" in (etc / f"{name}.d/60-strata-doctor-reserve.conf").read_text()
    wrapper = tree / "usr/local/bin/strata-numa"
    assert "--preferred=1 --cpunodebind=1" in wrapper.read_text()
    assert wrapper.stat().st_mode & 0o777 == 0o755
    # The file sorts after any file that sets the same key (the seed box has an 80- file).
    sysctl = sorted((tree / "etc/sysctl.d").glob("*-strata-doctor.conf"))
    assert len(sysctl) == 1 and "\nvm.nr_hugepages = 0\n" in sysctl[0].read_text()
    check = run_cli(["check", "--root", str(tree), "--format", "json"])
    assert check.exit_code == 0, check.stdout
    states = {(f["check"], f["id"]) for f in json.loads(check.stdout)["findings"]}
    assert ("numa-binding", "configured") in states
    assert ("hugepages", "configured") in states
    if real_box:  # the fixture has the 184 other processes and systemd-oomd
        assert ("cpu-contention", "configured") in states
        assert ("oomd", "configured") in states
    assert run_cli(["fix", "--root", str(tree), "--revert"]).exit_code == 0
    assert snapshot(tree) == original


# -- fault injection ---------------------------------------------------------------
class Killed(BaseException):
    """Stands for SIGKILL: no except clause of the applier catches it."""


def _plan(tree: Path) -> Tuple[object, object]:
    ctx = context_for(tree)
    results = run_selected(ctx, (), ())
    return ctx, build_plan(ctx, results, PlanOptions(reserve_node=True, preflight=True))


def _steps(tree: Path, monkeypatch: pytest.MonkeyPatch) -> List[Tuple[str, str]]:
    seen: List[Tuple[str, str]] = []
    monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: seen.append((step, path)))
    ctx, plan = _plan(tree)
    apply_plan(ctx.root, plan)  # type: ignore[attr-defined, arg-type]
    monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: None)
    revert_last(ctx.root)  # type: ignore[attr-defined]
    return seen


def _fail_at(index: int, error: BaseException):  # type: ignore[no-untyped-def]
    calls = [0]

    def hook(step: str, path: str) -> None:
        calls[0] += 1
        if calls[0] == index + 1:
            raise error

    return hook


def test_every_step_is_exercised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = {s for s, _ in _steps(make_host(tmp_path, "two-node-252"), monkeypatch)}
    assert {"state-dir", "save-original", "journal", "mkdir", "write-temp", "fsync", "rename",
            "fsync-dir"} <= steps


def test_killed_at_each_step_then_revert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = make_host(tmp_path, "two-node-252")
    # An existing, managed file to be replaced as well as new ones to be created.
    dropin = tree / "etc/systemd/system/strata.service.d/60-strata-doctor-numa.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text("# Managed by strata-doctor: stale\n[Service]\nCPUAffinity=0\n")
    dropin.chmod(0o640)
    original = snapshot(tree)
    steps = _steps(tree, monkeypatch)
    assert snapshot(tree) == original
    for index, (step, path) in enumerate(steps):
        monkeypatch.setattr(writer_steps, "checkpoint", _fail_at(index, Killed()))
        ctx, plan = _plan(tree)
        with pytest.raises(Killed):
            apply_plan(ctx.root, plan)  # type: ignore[attr-defined, arg-type]
        monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: None)
        if index > 0:  # a later apply must refuse to run over an interrupted one
            ctx, plan = _plan(tree)
            if (tree / STATE / "applies").is_dir() and any((tree / STATE / "applies").iterdir()):
                with pytest.raises(ApplyError, match="did not finish"):
                    apply_plan(ctx.root, plan)  # type: ignore[attr-defined, arg-type]
        revert_last(ctx.root)  # type: ignore[attr-defined]
        assert snapshot(tree) == original, f"killed before {step} {path}: revert left a difference"


def test_failure_at_each_step_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)
    steps = _steps(tree, monkeypatch)
    for index, (step, path) in enumerate(steps):
        failing = _fail_at(index, OSError(errno.ENOSPC, "No space left"))
        monkeypatch.setattr(writer_steps, "checkpoint", failing)
        ctx, plan = _plan(tree)
        with pytest.raises(ApplyError) as caught:
            apply_plan(ctx.root, plan)  # type: ignore[attr-defined, arg-type]
        assert "No space left" in str(caught.value)
        assert snapshot(tree) == original, f"failed at {step} {path}: rollback left a difference"


def test_readonly_etc_is_reported_and_nothing_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)

    def readonly(step: str, path: str) -> None:
        if step == "write-temp" and path.startswith("/etc/"):
            raise OSError(errno.EROFS, "Read-only file system", path)

    monkeypatch.setattr(writer_steps, "checkpoint", readonly)
    result = run_cli(["fix", "--root", str(tree), "--apply"])
    assert result.exit_code == 2
    assert "Read-only file system" in result.stderr and "restored" in result.stderr
    assert snapshot(tree) == original


def test_lock_keeps_two_applies_apart(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    state = tree / STATE
    state.mkdir(parents=True)
    with open(state / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        ctx, plan = _plan(tree)
        with pytest.raises(ApplyError, match="another"):
            apply_plan(ctx.root, plan)  # type: ignore[attr-defined, arg-type]
    assert not (tree / "etc/systemd/system/strata.slice").exists()


def test_unmanaged_file_needs_force(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    mine = tree / "etc/systemd/system/strata.service.d/60-strata-doctor-numa.conf"
    mine.parent.mkdir(parents=True)
    mine.write_text("[Service]\nNice=5\n")
    mine.chmod(0o600)
    original = snapshot(tree)
    refused = run_cli(["fix", "--root", str(tree), "--apply"])
    assert refused.exit_code == 2 and "--force" in refused.stderr
    assert snapshot(tree) == original
    forced = run_cli(["fix", "--root", str(tree), "--apply", "--force"])
    assert forced.exit_code == 0, forced.stderr
    assert "NUMAPolicy=preferred" in mine.read_text() and mine.stat().st_mode & 0o777 == 0o644
    assert run_cli(["fix", "--root", str(tree), "--revert"]).exit_code == 0
    assert snapshot(tree) == original


def test_symlink_target_is_never_followed(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    link = tree / "usr/local/bin/strata-numa"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    result = run_cli(["fix", "--root", str(tree), "--apply"])
    assert result.exit_code == 2 and "symlink" in result.stderr
    assert outside.read_text() == "keep me\n" and link.is_symlink()


def test_revert_keeps_files_edited_since(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)
    assert run_cli(["fix", "--root", str(tree), "--apply"]).exit_code == 0
    wrapper = tree / "usr/local/bin/strata-numa"
    wrapper.write_text("#!/bin/sh\n# edited by hand\n")
    kept = run_cli(["fix", "--root", str(tree), "--revert"])
    assert kept.exit_code == 2 and "strata-numa" in kept.stderr
    assert wrapper.read_text().endswith("edited by hand\n")
    assert run_cli(["fix", "--root", str(tree), "--revert", "--force"]).exit_code == 0
    assert snapshot(tree) == original


def test_applies_stack_and_revert_one_at_a_time(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)
    assert run_cli(["fix", "--root", str(tree), "--apply"]).exit_code == 0
    first = snapshot(tree)
    assert run_cli(["fix", "--root", str(tree), "--apply", "--preflight"]).exit_code == 0
    assert (tree / "etc/systemd/system/strata.service.d/60-strata-doctor-preflight.conf").exists()
    assert run_cli(["fix", "--root", str(tree), "--revert"]).exit_code == 0
    assert snapshot(tree) == first
    assert run_cli(["fix", "--root", str(tree), "--revert"]).exit_code == 0
    assert snapshot(tree) == original
    nothing = run_cli(["fix", "--root", str(tree), "--revert"])
    assert nothing.exit_code == 0 and "Nothing to revert" in nothing.stdout


def test_runtime_actions_are_journaled_and_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root on a live host: sysctl now, daemon-reload; revert puts the old value back."""
    import subprocess

    tree = make_host(tmp_path, "seed-model")
    original = snapshot(tree)
    calls: List[List[str]] = []

    def fake_run(argv: List[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    monkeypatch.setattr(applier, "privileged", lambda root: True)
    monkeypatch.setattr(applier.subprocess, "run", fake_run)
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: None)
    ctx = context_for(tree)
    plan = build_plan(ctx, run_selected(ctx, (), ()), PlanOptions())
    report = apply_plan(ctx.root, plan)
    assert report.actions == ("sysctl -w vm.nr_hugepages=0", "systemctl daemon-reload")
    assert (tree / "proc/sys/vm/nr_hugepages").read_text() == "0\n"
    assert calls == [["systemctl", "daemon-reload"]]
    reverted = revert_last(ctx.root)
    assert reverted.actions == ("vm.nr_hugepages = 24000", "systemctl daemon-reload")
    assert calls[-1] == ["systemctl", "daemon-reload"]
    assert snapshot(tree) == original


def test_failed_daemon_reload_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    tree = make_host(tmp_path, "seed-model")
    original = snapshot(tree)

    def failing(argv: List[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(argv, 1, b"", b"Failed to connect to bus\n")

    monkeypatch.setattr(applier, "privileged", lambda root: True)
    monkeypatch.setattr(applier.subprocess, "run", failing)
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: None)
    ctx = context_for(tree)
    plan = build_plan(ctx, run_selected(ctx, (), ()), PlanOptions())
    with pytest.raises(ApplyError, match="daemon-reload` exited 1: Failed to connect to bus"):
        apply_plan(ctx.root, plan)
    assert snapshot(tree) == original
