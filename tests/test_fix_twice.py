"""A second ``fix --apply`` with the same options finds nothing to change, also where the
first apply changes the finding a fix answers (``--reserve-node`` answers cpu-contention's
``shared-cpus`` before and its ``configured`` after): a generated file says which option
wrote it, never which finding led to it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

from tests.conftest import run_cli, seed_copy

SYSTEMD = "etc/systemd/system"


def _files(tree: Path) -> Dict[str, bytes]:
    found: Dict[str, bytes] = {}
    for folder, _, names in os.walk(tree / SYSTEMD):
        for name in names:
            path = Path(folder, name)
            if not path.is_symlink():
                found[str(path.relative_to(tree))] = path.read_bytes()
    return found


def test_reserve_node_applied_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    tree = seed_copy(tmp_path)
    before = run_cli(["check", "--root", str(tree), "--format", "json", "cpu-contention"])
    assert '"shared-cpus"' in before.stdout, "seed-box no longer shares the engine's CPUs"
    first = run_cli(["fix", "--root", str(tree), "--apply", "--reserve-node"])
    assert first.exit_code in (0, 1), first.stdout + first.stderr
    written = _files(tree)
    reserve = [text for path, text in written.items() if "reserve" in path or "strata.slice" in path]
    assert len(reserve) >= 4, sorted(written)
    assert all(b"for --reserve-node." in text and b"shared-cpus" not in text for text in reserve)

    plan = run_cli(["fix", "--root", str(tree), "--reserve-node"])
    assert plan.exit_code == 0, plan.stdout + plan.stderr
    assert "REPLACE" not in plan.stdout and "Nothing to change" in plan.stdout, plan.stdout
    second = run_cli(["fix", "--root", str(tree), "--apply", "--reserve-node"])
    assert second.exit_code == 0, second.stdout + second.stderr
    assert "Nothing to change" in second.stdout
    assert _files(tree) == written
