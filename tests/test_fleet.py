"""The fleet playbook (docs/fleet/playbook.yml) run by ansible-core against localhost on a
fixture root: one table, the fix plan in check mode, fixes only when asked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tests.conftest import HOSTS, REPO, UNBOUND_UNIT, copy_host, two_node_files, write_tree

PLAYBOOK = REPO / "docs" / "fleet" / "playbook.yml"
DROPIN = "etc/systemd/system/strata.service.d/60-strata-doctor-numa.conf"


def _tool(name: str) -> Optional[str]:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


ANSIBLE = _tool("ansible-playbook")
pytestmark = pytest.mark.skipif(
    ANSIBLE is None, reason="ansible-playbook not installed (pip install '.[fleet]')"
)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A copy of the seed box fixture when present, else a small two-node host."""
    seed = HOSTS / "seed-box"
    if (seed / "sys").is_dir():
        return copy_host(seed, tmp_path / "host")
    return write_tree(tmp_path / "host", two_node_files(unit_show=UNBOUND_UNIT))


def _play(tmp_path: Path, host: Path, *extra: str, **variables: object) -> subprocess.CompletedProcess[str]:
    doctor = _tool("strata-doctor")
    assert doctor is not None
    values: Dict[str, object] = {
        "strata_doctor": doctor,
        "strata_args": ["--root", str(host), "--arena", "8GiB"],
        "strata_table_file": str(tmp_path / "table.md"),
        "ansible_python_interpreter": sys.executable,
        **variables,
    }
    home = tmp_path / "ansible-home"
    env = dict(os.environ, HOME=str(home), ANSIBLE_HOME=str(home), ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
               ANSIBLE_REMOTE_TEMP=str(home / "tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    assert ANSIBLE is not None
    argv = [ANSIBLE, "-i", "localhost,", "-c", "local", str(PLAYBOOK), "-e", json.dumps(values), *extra]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _files(root: Path) -> List[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_playbook_collects_one_table(tmp_path: Path, host: Path) -> None:
    _play(tmp_path, host)
    rows = (tmp_path / "table.md").read_text().splitlines()
    assert rows[0].startswith("| host | ready | errors |")
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    host, ready, errors, _, failing, gpu_node, fixed = cells
    assert (host, ready, gpu_node, fixed) == ("localhost", "no", "1", "no")
    assert int(errors) >= 1 and "numa-binding" in failing.split(", ")


def test_check_mode_shows_the_plan_and_changes_nothing(tmp_path: Path, host: Path) -> None:
    before = _files(host)
    result = _play(tmp_path, host, "--check", strata_fix=True)
    assert "60-strata-doctor-numa.conf" in result.stdout  # the plan, printed
    assert _files(host) == before


def test_fixes_only_when_asked(tmp_path: Path, host: Path) -> None:
    _play(tmp_path, host)
    assert not (host / DROPIN).exists()
    _play(tmp_path, host, strata_fix=True)
    assert (host / DROPIN).exists()
    row = (tmp_path / "table.md").read_text().splitlines()[2]
    assert row.startswith("| localhost | yes | 0 |") and row.endswith("| yes |")
