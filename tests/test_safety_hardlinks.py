"""Every file the writer creates is created new, and no hard link leads a write out of the
root (docs/fix.md#every-file-is-created-new).

A hard link planted in the tree names a file outside it (``outside.txt`` beside the
tree). Wherever one is planted (the old fixed temporary names, a target, the lock, the
journal and its old temporary name, the saved originals, ``made``, the removal record),
the outside file keeps its bytes and its mode, and ``fix --revert`` brings the tree back
to the byte. Races are planted through ``steps.checkpoint``, which the writer calls
before each step.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import pytest
from click.testing import Result

from strata_doctor.fix import steps as writer_steps
from strata_doctor.output.files import OutputError, write_bytes
from tests.conftest import run_cli
from tests.test_fix_hosts import make_host, snapshot

STATE = "var/lib/strata-doctor"
DROPIN = "etc/systemd/system/strata.service.d/60-strata-doctor-numa.conf"
WRAPPER = "usr/local/bin/strata-numa"
STALE = "# Managed by strata-doctor: stale\n[Service]\nCPUAffinity=0\n"
OUTSIDE = b"outside data, not the tree's\n"
Outside = Tuple[Path, bytes, int]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """two-node-252 with a stale managed drop-in that the apply replaces (mode 0640) and
    the wrapper it creates."""
    host = make_host(tmp_path, "two-node-252")
    dropin = host / DROPIN
    dropin.parent.mkdir(parents=True)
    dropin.write_text(STALE)
    dropin.chmod(0o640)
    return host


@pytest.fixture
def outside(tmp_path: Path) -> Outside:
    """A file beside the tree (mode 0640): its bytes and mode must never change."""
    path = tmp_path / "outside.txt"
    path.write_bytes(OUTSIDE)
    path.chmod(0o640)
    return path, OUTSIDE, 0o640


@pytest.fixture
def no_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield
    monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: None)


def _untouched(outside: Outside) -> None:
    path, data, mode = outside
    assert path.read_bytes() == data, "the file outside the root was written"
    assert stat.S_IMODE(path.stat().st_mode) == mode, "the file outside the root changed mode"


def _fix(tree: Path, *args: str) -> Result:
    return run_cli(["fix", "--root", str(tree), *args])


def _one_line(result: Result, *words: str) -> str:
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _applied(result: Result) -> None:
    assert result.exit_code in (0, 1), result.stdout + result.stderr


def _revert_all(tree: Path) -> None:
    for _ in range(5):
        result = _fix(tree, "--revert")
        assert result.exit_code == 0, result.stdout + result.stderr
        if "Nothing to revert" in result.stdout:
            return
    raise AssertionError("revert never reached 'Nothing to revert'")


def _hook_once(monkeypatch: pytest.MonkeyPatch, step: str, plant: Callable[[], None], nth: int = 1) -> None:
    """Run ``plant`` just before the ``nth`` ``step`` of the writer."""
    seen = [0]

    def hook(name: str, path: str) -> None:
        if name == step:
            seen[0] += 1
            if seen[0] == nth:
                plant()

    monkeypatch.setattr(writer_steps, "checkpoint", hook)


# -- temporary files ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["hardlink", "file", "symlink"])
def test_old_fixed_temporary_names_are_left_alone(tree: Path, outside: Outside, kind: str) -> None:
    """What is at ``.NAME.strata-doctor-tmp`` is the user's: never opened, never removed."""
    (tree / WRAPPER).parent.mkdir(parents=True)
    planted: List[Path] = []
    for target in (DROPIN, WRAPPER):
        temp = (tree / target).parent / f".{Path(target).name}.strata-doctor-tmp"
        if kind == "hardlink":
            os.link(outside[0], temp)
        elif kind == "file":
            temp.write_bytes(b"the user's own\n")
            temp.chmod(0o640)
        else:
            temp.symlink_to(outside[0])
        planted.append(temp)
    original = snapshot(tree)
    _applied(_fix(tree, "--apply"))
    _untouched(outside)
    assert (tree / DROPIN).read_text() != STALE, "the apply did not replace the drop-in"
    for temp in planted:
        assert os.path.lexists(temp), f"{temp.name} was removed"
        if kind == "hardlink":
            assert temp.stat().st_ino == outside[0].stat().st_ino
    _revert_all(tree)
    assert snapshot(tree) == original
    _untouched(outside)


# -- targets --------------------------------------------------------------------------
def test_a_hard_linked_target_is_refused(tree: Path, outside: Outside) -> None:
    path, _, _ = outside
    path.write_text(STALE)
    (tree / DROPIN).unlink()
    os.link(path, tree / DROPIN)
    kept = (path, STALE.encode(), 0o640)
    original = snapshot(tree)
    _one_line(_fix(tree, "--apply"), "/" + DROPIN, "links")
    assert snapshot(tree) == original, "a refused apply changed the tree"
    _untouched(kept)


# -- the lock -------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["--revert"], ["--apply"]])
def test_a_hard_linked_lock_is_refused(tree: Path, outside: Outside, args: List[str]) -> None:
    (tree / STATE).mkdir(parents=True, mode=0o700)
    os.link(outside[0], tree / STATE / "lock")
    original = snapshot(tree)
    result = _fix(tree, *args)
    _untouched(outside)
    _one_line(result, f"/{STATE}/lock", "links")
    assert snapshot(tree) == original


def _kinds(tree: Path) -> List[Tuple[str, int]]:
    """Every path under ``tree`` with its type, opening nothing (a FIFO is not read)."""
    found = [(str(Path(top, n).relative_to(tree)), stat.S_IFMT(os.lstat(Path(top, n)).st_mode))
             for top, dirs, files in os.walk(tree) for n in dirs + files]
    return sorted(found)


def test_a_lock_that_is_not_a_file_is_refused(tree: Path) -> None:
    (tree / STATE).mkdir(parents=True, mode=0o700)
    os.mkfifo(tree / STATE / "lock", 0o600)
    original = _kinds(tree)
    for args in (["--revert"], ["--apply"]):
        _one_line(_fix(tree, *args), f"/{STATE}/lock", "not a regular file")
    assert _kinds(tree) == original


def test_a_full_disk_while_the_pid_is_written(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = snapshot(tree)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "pwrite", full)
        _one_line(_fix(tree, "--apply"), f"/{STATE}/lock", "No space left on device")
    _revert_all(tree)
    assert snapshot(tree) == original


# -- the journal, the originals and the state folder's records ------------------------
def test_a_link_at_the_old_journal_temporary_name(tree: Path, outside: Outside,
                                                  monkeypatch: pytest.MonkeyPatch, no_hook: None) -> None:
    original = snapshot(tree)
    _hook_once(monkeypatch, "journal",
               lambda: os.link(outside[0], tree / STATE / "applies/0001/journal.json.tmp"))
    _applied(_fix(tree, "--apply"))
    _untouched(outside)
    assert os.path.samefile(tree / STATE / "applies/0001/journal.json.tmp", outside[0])
    _revert_all(tree)  # writes the journal too, the link still there
    _untouched(outside)
    assert snapshot(tree) == original


def test_a_hard_linked_journal_is_refused(tree: Path, tmp_path: Path) -> None:
    original = snapshot(tree)
    _applied(_fix(tree, "--apply"))
    journal = tree / STATE / "applies/0001/journal.json"
    copy = tmp_path / "journal-outside.json"
    copy.write_bytes(journal.read_bytes())
    copy.chmod(0o640)
    kept = (copy, copy.read_bytes(), 0o640)
    journal.unlink()
    os.link(copy, journal)
    _one_line(_fix(tree, "--revert"), "journal.json", "links")
    _untouched(kept)
    journal.unlink()
    journal.write_bytes(kept[1])
    _revert_all(tree)
    assert snapshot(tree) == original


def test_links_planted_among_the_saved_originals(tree: Path, outside: Outside,
                                                 monkeypatch: pytest.MonkeyPatch, no_hook: None) -> None:
    original = snapshot(tree)

    def plant() -> None:
        for index in range(4):
            os.link(outside[0], tree / STATE / f"applies/0001/originals/{index}")

    _hook_once(monkeypatch, "save-original", plant)
    result = _fix(tree, "--apply")
    monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: None)
    _untouched(outside)
    _one_line(result, "links")
    _revert_all(tree)
    assert snapshot(tree) == original


def test_a_link_at_made_while_the_state_folder_goes(tree: Path, outside: Outside,
                                                   monkeypatch: pytest.MonkeyPatch, no_hook: None) -> None:
    original = snapshot(tree)
    _applied(_fix(tree, "--apply"))
    made = tree / STATE / "made"
    _hook_once(monkeypatch, "drop-state-dirs", lambda: os.link(outside[0], made))
    result = _fix(tree, "--revert")
    monkeypatch.setattr(writer_steps, "checkpoint", lambda step, path: None)
    _untouched(outside)
    _one_line(result, "made", "links")
    made.unlink()
    _revert_all(tree)
    assert snapshot(tree) == original


def test_a_hard_linked_removal_record_is_refused(tree: Path, outside: Outside) -> None:
    assert not (tree / "var").exists()
    original = snapshot(tree)
    _applied(_fix(tree, "--apply"))
    record = tree / ".strata-doctor-state.drop"
    os.link(outside[0], record)
    result = _fix(tree, "--revert")
    _untouched(outside)
    _one_line(result, ".strata-doctor-state.drop", "links")
    record.unlink()
    _revert_all(tree)
    assert snapshot(tree) == original


# -- owners ---------------------------------------------------------------------------
def test_owner_group_and_mode_survive_apply_and_revert(tree: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to uid 1234 needs root")
    dropin = tree / DROPIN
    os.chown(dropin, 1234, 1234)
    dropin.chmod(0o640)
    original = snapshot(tree)
    _applied(_fix(tree, "--apply"))
    info = dropin.stat()
    assert (info.st_uid, info.st_gid) == (1234, 1234), "the replaced file lost its owner"
    assert stat.S_IMODE(info.st_mode) == 0o644, "the replaced file has not the mode the plan shows"
    assert dropin.read_text() != STALE
    _revert_all(tree)
    info = dropin.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (1234, 1234, 0o640)
    assert snapshot(tree) == original


# -- the files a user names -------------------------------------------------------------
def test_an_output_temporary_file_swapped_for_a_link(tmp_path: Path, outside: Outside,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """In a folder others write to, the temporary file may become a link while it is
    written: its mode is set through the descriptor, and a swapped file is not renamed in."""
    folder = tmp_path / "shared"
    folder.mkdir()
    out = folder / "report.md"
    real_fsync = os.fsync

    def swap(fd: int) -> None:
        for temp in folder.glob(".strata-doctor.*"):
            temp.unlink()
            temp.symlink_to(outside[0])
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", swap)
    with pytest.raises(OutputError, match="replaced while it was written"):
        write_bytes(str(out), b"report\n", mode=0o600)
    monkeypatch.setattr(os, "fsync", real_fsync)
    _untouched(outside)
    assert not os.path.lexists(out)
