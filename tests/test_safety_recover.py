"""A fix state can always be recovered, and nothing the user had is removed (docs/fix.md#safety).

Kills are injected as in tests/test_safety_interrupt.py: ``steps.checkpoint`` (or a system
call the writer makes) raises ``Killed``, a ``BaseException`` no ``except`` clause of the
applier catches. After each, ``fix --revert`` (run again as often as it asks) restores the
tree byte for byte, a later apply works, and the state folder is gone unless it held
something of the user's, which stays as it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import pytest

from strata_doctor.fix.journal import INTERRUPTED, REVERT_INTERRUPTED
from tests.conftest import run_cli, seed_copy
from tests.test_fix_hosts import make_host, snapshot
from tests.test_safety_interrupt import _cli, _one_line, _revert_all

OLDER = "# Managed by strata-doctor\n# an older version of this file\n"
REPLACED = ("etc/sysctl.d/81-strata-doctor.conf", "etc/systemd/system/strata.slice",
            "etc/systemd/system/strata.service.d/60-strata-doctor-oomd.conf")


class Killed(BaseException):
    """Stands for SIGKILL."""


Hook = Callable[[str, str], None]


# -- trees ------------------------------------------------------------------------------
def replacing_tree(tmp_path: Path) -> Path:
    """The seed box with three files the apply replaces, so that it saves three originals."""
    tree = seed_copy(tmp_path)
    for name in REPLACED:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(OLDER)
        (tree / name).chmod(0o640)
    return tree


def var_to_root(tmp_path: Path) -> Path:
    """A tree without lib/ whose var links to the root: /var/lib is DIR/lib."""
    tree = make_host(tmp_path, "two-node-252")
    assert not (tree / "lib").exists()
    (tree / "var").symlink_to("/")
    return tree


def with_state(tmp_path: Path, content: str) -> Path:
    """A tree whose var/lib/strata-doctor already holds something of the user's."""
    tree = make_host(tmp_path, "two-node-252")
    state = tree / "var/lib/strata-doctor"
    state.mkdir(parents=True)
    if content == "file":
        (state / "notes.txt").write_text("my notes\n")
    elif content == "folder":
        (state / "mine").mkdir()
        (state / "mine/keep").write_text("keep\n")
    elif content == "empty-folder":
        (state / "mine").mkdir()
    elif content == "applies-entry":
        (state / "applies").mkdir(0o700)
        (state / "applies/README").write_text("not an apply\n")
    return tree


APPLY = {"replacing": ["--reserve-node"], "var-to-root": ["--reserve-node", "--preflight"],
         "state": ["--reserve-node", "--preflight"]}


# -- running it ---------------------------------------------------------------------------
def _record(monkeypatch: pytest.MonkeyPatch, args: List[str]) -> List[Tuple[str, str]]:
    seen: List[Tuple[str, str]] = []
    result = _cli(monkeypatch, lambda step, path: seen.append((step, path)), args)
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    return seen


def _at(index: int) -> Hook:
    calls = [0]

    def hook(step: str, path: str) -> None:
        calls[0] += 1
        if calls[0] == index + 1:
            raise Killed()

    return hook


def _recovered(tree: Path, original: object, apply: List[str], where: str, later: bool = True) -> None:
    """Revert restores the tree to the byte; a later apply and its revert work too."""
    _revert_all(tree)
    assert snapshot(tree) == original, f"{where}: revert left a difference"
    if not later:
        return
    again = run_cli(apply)
    assert again.exit_code in (0, 1), f"{where}: a later apply failed: {again.stderr}"
    _revert_all(tree)
    assert snapshot(tree) == original, f"{where}: the later apply's revert left a difference"


# -- 1. a revert killed while it forgets the apply ----------------------------------------------
def _kill_unlink_below_applies(monkeypatch: pytest.MonkeyPatch, cut: int) -> List[str]:
    """Make the ``cut``-th removal of a file below ``applies/`` a kill; the names it saw."""
    real_unlink = os.unlink
    seen: List[str] = []

    def unlink(path: str, *args: object, dir_fd: Optional[int] = None, **kwargs: object) -> None:
        folder = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.path.dirname(path)
        if "/var/lib/strata-doctor/applies/" in folder + "/":
            seen.append(f"{folder}/{path}")
            if len(seen) == cut:
                raise Killed()
        real_unlink(path, *args, dir_fd=dir_fd, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", unlink)
    return seen


def test_revert_killed_between_removing_two_originals(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tree = replacing_tree(tmp_path)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY["replacing"]]
    revert = ["fix", "--root", str(tree), "--revert"]
    cut = 1
    while True:
        assert run_cli(apply).exit_code in (0, 1)
        seen = _kill_unlink_below_applies(monkeypatch, cut)
        try:
            finished = run_cli(revert)
        except Killed:
            finished = None
        monkeypatch.undo()
        if finished is not None:  # every removal below applies/ had its turn
            assert finished.exit_code == 0 and cut > 4, finished.stderr
            break
        where = f"revert killed removing {seen[-1]}"
        for force in (False, True):
            again = run_cli([*revert, *(["--force"] if force else [])])
            assert again.exit_code == 0, f"{where}: {again.stderr}"
        assert not (tree / "var").exists(), f"{where}: the state folder is left"
        _recovered(tree, original, apply, where)
        cut += 1


def test_journal_naming_lost_originals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files already restored, then the saved originals gone (as an older release's kill
    left them): the restored files are done, and the revert finishes."""
    tree = replacing_tree(tmp_path)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY["replacing"]]
    assert run_cli(apply).exit_code in (0, 1)
    with pytest.raises(Killed):
        _cli(monkeypatch, lambda step, path: _raise(Killed()) if step == "revert-forget" else None,
             ["fix", "--root", str(tree), "--revert"])
    originals = next((tree / "var/lib/strata-doctor/applies").glob("*/originals"))
    for saved in sorted(originals.iterdir())[:2]:
        saved.unlink()
    assert _one_line(run_cli(apply)).endswith(REVERT_INTERRUPTED)
    result = run_cli(["fix", "--root", str(tree), "--revert"])
    assert result.exit_code == 0, result.stderr
    assert snapshot(tree) == original
    _recovered(tree, original, apply, "lost originals")


def test_lost_original_of_a_file_not_restored(tmp_path: Path) -> None:
    """A saved original gone before its file was restored cannot be put back: the revert
    says so in one line, and --force finishes it, leaving that file as it is."""
    tree = replacing_tree(tmp_path)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY["replacing"]]
    assert run_cli(apply).exit_code in (0, 1)
    written = (tree / REPLACED[0]).read_bytes()
    originals = next((tree / "var/lib/strata-doctor/applies").glob("*/originals"))
    shutil.rmtree(originals)
    line = _one_line(run_cli(["fix", "--root", str(tree), "--revert"]))
    assert f"/{REPLACED[0]}" in line and "saved original is missing" in line and "--force" in line, line
    _revert_all(tree, force=True)
    assert (tree / REPLACED[0]).read_bytes() == written
    assert not (tree / "var").exists()
    assert run_cli(apply).exit_code in (0, 1)


def _raise(exc: BaseException) -> None:
    raise exc


# -- 2. and 3. the state folder: resolved, and only what the tool made removed -----------------
STATE_CASES = ["file", "folder", "empty-folder", "applies-entry", "empty"]


def test_var_linked_to_the_root(tmp_path: Path) -> None:
    tree = var_to_root(tmp_path)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY["var-to-root"]]
    assert run_cli(apply).exit_code in (0, 1)
    assert (tree / "lib/strata-doctor/applies").is_dir()
    _recovered(tree, original, apply, "var -> /")
    assert not (tree / "lib").exists()


@pytest.mark.parametrize("content", STATE_CASES)
def test_user_content_in_the_state_folder_is_kept(tmp_path: Path, content: str) -> None:
    tree = with_state(tmp_path, content)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY["state"]]
    _recovered(tree, original, apply, content)
    assert (tree / "var/lib/strata-doctor").is_dir()


def test_user_content_added_after_the_apply_is_kept(tmp_path: Path) -> None:
    """The tool made the state folder; a file the user put there since keeps it, and
    the next drop, once the file is gone, removes the folders the tool made."""
    tree = make_host(tmp_path, "two-node-252")
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY["state"]]
    assert run_cli(apply).exit_code in (0, 1)
    (tree / "var/lib/strata-doctor/notes.txt").write_text("mine\n")
    (tree / "var/lib/strata-doctor/applies/mine").mkdir()
    _revert_all(tree)
    left = {k for k in snapshot(tree) if k not in original}
    assert left == {"var", "var/lib", "var/lib/strata-doctor", "var/lib/strata-doctor/notes.txt",
                    "var/lib/strata-doctor/made", "var/lib/strata-doctor/applies",
                    "var/lib/strata-doctor/applies/mine"}, left
    (tree / "var/lib/strata-doctor/notes.txt").unlink()
    (tree / "var/lib/strata-doctor/applies/mine").rmdir()
    assert run_cli(apply).exit_code in (0, 1)
    _revert_all(tree)
    assert snapshot(tree) == original


# -- 4. every kill point of apply and revert, on each of these trees ------------------------------
TREES: List[Tuple[str, Callable[[Path], Path], str]] = [
    ("replacing", replacing_tree, "replacing"),
    ("var-to-root", var_to_root, "var-to-root"),
    ("user-file", lambda p: with_state(p, "file"), "state"),
    ("applies-entry", lambda p: with_state(p, "applies-entry"), "state"),
]


@pytest.mark.parametrize("name,build,flags", TREES[1:], ids=[t[0] for t in TREES[1:]])
def test_every_apply_kill_point_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                         build: Callable[[Path], Path], flags: str) -> None:
    """The state folder's trees (the plain ones: tests/test_safety_interrupt.py)."""
    tree = build(tmp_path)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY[flags]]
    applying = _record(monkeypatch, apply)
    _revert_all(tree)
    for index, (step, path) in enumerate(applying):
        where = f"{name}: apply killed before {step} {path} (step {index})"
        with pytest.raises(Killed):
            _cli(monkeypatch, _at(index), apply)
        _recovered(tree, original, apply, where, later=index == len(applying) - 1)


@pytest.mark.parametrize("name,build,flags", TREES, ids=[t[0] for t in TREES])
def test_every_revert_kill_point_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                          build: Callable[[Path], Path], flags: str) -> None:
    """Each step of a revert, the forgetting of the apply and the drop of the state folder
    included, killed: the next apply refuses or works, and a revert restores the tree."""
    tree = build(tmp_path)
    original = snapshot(tree)
    apply = ["fix", "--root", str(tree), "--apply", *APPLY[flags]]
    revert = ["fix", "--root", str(tree), "--revert"]
    assert run_cli(apply).exit_code in (0, 1)
    reverting = _record(monkeypatch, revert)
    assert snapshot(tree) == original
    steps = {s for s, _ in reverting}
    assert {"journal", "revert-forget", "forget-file", "drop-state"} <= steps, steps
    for index, (step, path) in enumerate(reverting):
        where = f"{name}: revert killed before {step} {path} (step {index})"
        assert run_cli(apply).exit_code in (0, 1), where
        with pytest.raises(Killed):
            _cli(monkeypatch, _at(index), revert)
        again = run_cli(apply)
        if again.exit_code == 2:
            assert _one_line(again).endswith((REVERT_INTERRUPTED, INTERRUPTED)), where
        else:
            assert again.exit_code in (0, 1), f"{where}: {again.stderr}"
        _recovered(tree, original, apply, where, later=again.exit_code == 2)


@pytest.mark.parametrize("setup", ["etc-loop", "bad-config"])
def test_a_refused_tree_or_config_leaves_no_state_folder(tmp_path: Path, setup: str) -> None:
    # The lock is taken before the checks run; a tree or config refused while it is held
    # (etc -> /etc is a loop inside the root, so its config cannot be read) must not leave
    # var/lib/strata-doctor behind.
    tree = seed_copy(tmp_path / "h")
    args = ["fix", "--root", str(tree), "--yes", "--apply"]
    if setup == "etc-loop":
        shutil.rmtree(tree / "etc")
        (tree / "etc").symlink_to("/etc")
    else:
        (tmp_path / "bad.yaml").write_text("arena: [1, 2]\n")
        args += ["--config", str(tmp_path / "bad.yaml")]
    before = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    line = _one_line(run_cli(args))
    assert ".strata-doctor/unresolvable" not in line, line
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before
