"""No wedged states: every step of apply and revert interrupted (docs/fix.md#safety).

Failures are injected deterministically through ``steps.checkpoint``, which the applier
calls before every step that changes the tree. ``Killed`` stands for SIGKILL: it is a
``BaseException`` that no ``except`` clause of the applier catches, so nothing is cleaned
up (descriptors close and the ``flock`` goes, as with a real kill). After each one,
``fix --revert`` restores the tree byte for byte, and a second apply either completes or
refuses with the documented message.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

import pytest
from click.testing import Result

from strata_doctor.fix import steps as writer_steps
from strata_doctor.fix.journal import INTERRUPTED, REVERT_INTERRUPTED
from tests.conftest import HOSTS, REPO, run_cli, seed_copy
from tests.test_fix_hosts import make_host, snapshot

SEED = HOSTS / "seed-box"
FIX = ["--reserve-node"]


class Killed(BaseException):
    """Stands for SIGKILL."""


Hook = Callable[[str, str], None]


def _record(monkeypatch: pytest.MonkeyPatch, args: List[str]) -> List[Tuple[str, str]]:
    seen: List[Tuple[str, str]] = []
    monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: seen.append((step, path)))
    result = run_cli(args)
    monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: None)
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    return seen


def _at(index: int, error: BaseException, persistent: bool = False) -> Hook:
    """A hook that raises ``error`` at call ``index`` (and, if ``persistent``, at every later one)."""
    calls = [0]

    def hook(step: str, path: str) -> None:
        calls[0] += 1
        if calls[0] == index + 1 or (persistent and calls[0] > index):
            raise error

    return hook


def _cli(monkeypatch: pytest.MonkeyPatch, hook: Optional[Hook], args: List[str]) -> Result:
    monkeypatch.setattr(writer_steps, "checkpoint", hook or (lambda step, path: None))
    try:
        return run_cli(args)
    finally:
        monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: None)


def _one_line(result: Result) -> str:
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _revert_all(tree: Path, force: bool = False) -> None:
    for _ in range(5):
        result = run_cli(["fix", "--root", str(tree), "--revert", *(["--force"] if force else [])])
        assert result.exit_code == 0, result.stdout + result.stderr
        if "Nothing to revert" in result.stdout:
            return
    raise AssertionError("revert never reached 'Nothing to revert'")


def test_apply_killed_after_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = seed_copy(tmp_path)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *FIX]
    steps = _record(monkeypatch, apply)
    _revert_all(tree)
    assert snapshot(tree) == original
    assert {"state-dir", "state-rename", "save-original", "journal", "mkdir", "write-temp", "fsync",
            "rename", "fsync-dir"} <= {s for s, _ in steps}
    for index, (step, path) in enumerate(steps):
        where = f"killed before {step} {path} (step {index})"
        with pytest.raises(Killed):
            _cli(monkeypatch, _at(index, Killed()), apply)
        assert not (tree / "var").exists() or (tree / "var/lib/strata-doctor").is_dir(), \
            f"{where}: an empty var/ was left"
        again = run_cli(apply)
        if again.exit_code == 2:
            assert _one_line(again).endswith(INTERRUPTED), where
        else:
            assert again.exit_code in (0, 1), f"{where}: {again.stderr}"
        _revert_all(tree)
        assert snapshot(tree) == original, f"{where}: revert left a difference"
    assert run_cli(apply).exit_code in (0, 1)
    _revert_all(tree)
    assert snapshot(tree) == original


def test_apply_failing_from_every_step_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only file system from step N on: the rollback fails too; one line, exit 2, and
    a later revert (once the tree is writable again) restores everything."""
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", "--reserve-node", "--preflight"]
    steps = _record(monkeypatch, apply)
    _revert_all(tree)
    for index, (step, path) in enumerate(steps):
        where = f"read-only from {step} {path} (step {index})"
        failed = _cli(monkeypatch, _at(index, OSError(errno.EROFS, "Read-only file system"), True), apply)
        assert "Read-only file system" in _one_line(failed), where
        _revert_all(tree)
        assert snapshot(tree) == original, f"{where}: revert left a difference"


def _revert_steps(tree: Path, monkeypatch: pytest.MonkeyPatch, apply: List[str]) -> List[Tuple[str, str]]:
    assert run_cli(apply).exit_code in (0, 1)
    return _record(monkeypatch, ["fix", "--root", str(tree), "--revert"])


@pytest.mark.parametrize("how", ["killed", "read-only"])
def test_revert_interrupted_after_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            how: str) -> None:
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", "--reserve-node", "--preflight"]
    revert = ["fix", "--root", str(tree), "--revert"]
    steps = _revert_steps(tree, monkeypatch, apply)
    assert snapshot(tree) == original
    assert {"journal", "revert-remove", "revert-rmdir", "revert-forget", "forget-file", "drop-state",
            "drop-state-dirs"} <= {s for s, _ in steps}
    for index, (step, path) in enumerate(steps):
        where = f"revert {how} before {step} {path} (step {index})"
        assert run_cli(apply).exit_code in (0, 1), where
        if how == "killed":
            with pytest.raises(Killed):
                _cli(monkeypatch, _at(index, Killed()), revert)
        else:
            read_only = OSError(errno.EROFS, "Read-only file system")
            failed = _cli(monkeypatch, _at(index, read_only, True), revert)
            assert "Read-only file system" in _one_line(failed), where
        again = run_cli(apply)
        if again.exit_code == 2:
            assert _one_line(again).endswith((REVERT_INTERRUPTED, INTERRUPTED)), where
        _revert_all(tree)
        assert snapshot(tree) == original, f"{where}: revert left a difference"


# -- the wedges found by hand ---------------------------------------------------------
@pytest.mark.parametrize("target", ["does-not-exist", "/does/not/exist", "../../../../../nowhere"])
def test_dangling_folder_link(tmp_path: Path, target: str) -> None:
    tree = seed_copy(tmp_path)
    shutil.rmtree(tree / "etc/sysctl.d")
    (tree / "etc/sysctl.d").symlink_to(target)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *FIX]
    line = _one_line(run_cli(apply))
    assert "/etc/sysctl.d" in line and "symlink" in line, line
    assert snapshot(tree) == original
    for force in (False, True):
        reverted = run_cli(["fix", "--root", str(tree), "--revert", *(["--force"] if force else [])])
        assert reverted.exit_code == 0 and "Nothing to revert" in reverted.stdout, reverted.stderr
    assert _one_line(run_cli(apply)) == line  # refused the same way, never "did not finish"
    assert snapshot(tree) == original


@pytest.mark.parametrize("existing", ["var", "var/lib"])
def test_revert_removes_only_the_folders_apply_made(tmp_path: Path, existing: str) -> None:
    tree = seed_copy(tmp_path)
    (tree / existing).mkdir(parents=True)
    (tree / "opt/empty").mkdir(parents=True)
    original = snapshot(tree)
    nothing = run_cli(["fix", "--root", str(tree), "--revert"])
    assert nothing.exit_code == 0 and "Nothing to revert" in nothing.stdout
    assert snapshot(tree) == original
    assert run_cli(["fix", "--root", str(tree), "--apply", *FIX]).exit_code in (0, 1)
    journal = json.loads(next((tree / "var/lib/strata-doctor/applies").glob("*/journal.json")).read_text())
    assert all(not d.startswith(f"/{existing}") or d.startswith("/var/lib/strata-doctor")
               for d in journal["dirs"]), journal["dirs"]
    _revert_all(tree)
    assert snapshot(tree) == original
    assert (tree / existing).is_dir()


def test_nothing_to_change_leaves_no_state(tmp_path: Path) -> None:
    tree = seed_copy(tmp_path)
    assert run_cli(["fix", "--root", str(tree), "--apply"]).exit_code in (0, 1)
    applied = snapshot(tree)
    again = run_cli(["fix", "--root", str(tree), "--apply"])
    assert again.exit_code == 0 and "Nothing to change" in again.stdout
    assert snapshot(tree) == applied


# -- read-only folders, as an unprivileged user ----------------------------------------
def _as_nobody(args: List[str]) -> Tuple[int, str, str]:
    """Run the CLI in a forked child that dropped to nobody (when the suite runs as root)."""
    if os.geteuid() != 0:
        result = run_cli(args)
        return result.exit_code, result.stdout, result.stderr
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 70
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            result = run_cli(args)
            os.write(write, json.dumps([result.exit_code, result.stdout, result.stderr]).encode())
            code = 0
        except BaseException as exc:  # report, never return into pytest
            os.write(write, json.dumps([99, "", f"{type(exc).__name__}: {exc}"]).encode())
        finally:
            os._exit(code)
    os.close(write)
    data = b""
    while True:
        chunk = os.read(read, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    code, out, err = json.loads(data.decode())
    return int(code), str(out), str(err)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A scratch folder an unprivileged user can reach (pytest's own is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="strata-doctor-safety-"))
    folder.chmod(0o755)
    yield folder
    for top, dirs, _ in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o755)
    folder.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)


def _nobody_tree(tmp_path: Path) -> Path:
    tree = seed_copy(tmp_path)
    # Warm every lazy import as the current user: the child may not read site-packages.
    import click._textwrap  # error messages are wrapped with it
    import click.formatting  # noqa: F401

    assert run_cli(["fix", "--root", str(tree), "--apply", *FIX]).exit_code in (0, 1)
    _revert_all(tree)
    run_cli(["fix", "--root", str(tree), "--apply", "--only", "no-such-check", "--unit", "x"])
    if os.geteuid() == 0:
        for top, dirs, files in os.walk(tree):
            for name in [*dirs, *files, ""]:
                os.lchown(os.path.join(top, name), 65534, 65534)
    return tree


def _read_only(paths: List[Path]) -> None:
    for path in paths:
        path.chmod(0o555)


def test_read_only_etc(open_tmp: Path) -> None:
    tree = _nobody_tree(open_tmp)
    _read_only([tree / "etc", tree / "etc/systemd/system", tree / "etc/sysctl.d"])
    original = snapshot(tree)
    code, out, err = _as_nobody(["fix", "--root", str(tree), "--apply", *FIX])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, out + err
    assert "Permission denied" in err
    assert snapshot(tree) == original
    code, out, err = _as_nobody(["fix", "--root", str(tree), "--revert"])
    assert code == 0 and "Nothing to revert" in out, out + err
    assert snapshot(tree) == original


def test_read_only_top_with_writable_var(open_tmp: Path) -> None:
    tree = _nobody_tree(open_tmp)
    (tree / "var").mkdir()
    if os.geteuid() == 0:
        os.chown(tree / "var", 65534, 65534)
    shutil.rmtree(tree / "usr")  # the wrapper's folders must be made in the read-only top
    _read_only([tree])
    original = snapshot(tree)
    code, out, err = _as_nobody(["fix", "--root", str(tree), "--apply", *FIX])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, out + err
    assert snapshot(tree) == original
    code, out, err = _as_nobody(["fix", "--root", str(tree), "--revert"])
    assert code == 0, out + err
    assert snapshot(tree) == original


def test_read_only_bind_mount(tmp_path: Path) -> None:
    """``etc`` bind-mounted read-only in a private mount namespace (root only; elsewhere
    the EROFS injection at every step above stands for it)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a read-only bind mount needs root and unshare(1)")
    tree = seed_copy(tmp_path)
    original = snapshot(tree)
    script = (
        'set -e; mount --bind "$1/etc" "$1/etc"; mount -o remount,ro,bind "$1/etc"; '
        'set +e; "$2" -m strata_doctor fix --root "$1" --apply --reserve-node; echo "apply=$?"; '
        '"$2" -m strata_doctor fix --root "$1" --revert; echo "revert=$?"'
    )
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(tree), sys.executable]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=REPO)
    if "apply=" not in proc.stdout:
        pytest.skip(f"cannot make a read-only bind mount here: {proc.stderr.strip()[:200]}")
    assert "apply=2" in proc.stdout and "revert=0" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("strata-doctor: error")]
    assert len(errors) == 1 and "Read-only file system" in errors[0], proc.stderr
    assert snapshot(tree) == original
    _revert_all(tree)
    assert snapshot(tree) == original



@pytest.mark.parametrize("cut", [1, 2, 3])
def test_killed_while_the_state_folders_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: int) -> None:
    """Between any two of the rmdir calls that remove var/lib/strata-doctor, var/lib and
    var (all made by the apply): the next run finishes the removal."""
    tree = seed_copy(tmp_path)
    assert not (tree / "var").exists()
    original = snapshot(tree)
    assert run_cli(["fix", "--root", str(tree), "--apply"]).exit_code in (0, 1)
    real_rmdir = os.rmdir
    calls: List[str] = []

    def rmdir(path: str, *args: object, **kwargs: object) -> None:
        if path in ("strata-doctor", "lib", "var"):
            calls.append(path)
            if len(calls) == cut and path == ("strata-doctor", "lib", "var")[cut - 1]:
                raise Killed()
        real_rmdir(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rmdir", rmdir)
    with pytest.raises(Killed):
        run_cli(["fix", "--root", str(tree), "--revert"])
    monkeypatch.setattr(os, "rmdir", real_rmdir)
    assert snapshot(tree) != original
    _revert_all(tree)
    assert snapshot(tree) == original
