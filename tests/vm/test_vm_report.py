"""`report --bundle` made in the guest replays on the host with `check --bundle`."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from scenarios import HOSTNAME
from topologies import TOPOLOGIES
from vmharness import Guests

pytestmark = [pytest.mark.vm, pytest.mark.topology("seed")]

Key = Tuple[str, str, str]


def bundle(guests: Guests) -> Path:
    step = guests.get("seed").step("report")
    assert step.rc == 0, step.describe()
    path = guests.get("seed").file("bundle.tar.gz")
    assert path.is_file(), step.describe()
    return path


def replay(path: Path, tmp_path: Path) -> Dict[str, Any]:
    """``check --bundle`` on this host, with the same engine options as in the guest."""
    if importlib.util.find_spec("strata_doctor") is None:
        pytest.skip("strata_doctor is not installed on the host (pip install -e .)")
    proc = subprocess.run(
        [sys.executable, "-m", "strata_doctor", "check", "--bundle", str(path), "--format", "json",
         "--gpu", TOPOLOGIES["seed"].gpu.address],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, dict)
    return data


def bundled_check(path: Path) -> Dict[str, Any]:
    """The check JSON the report wrote into its bundle, at the moment it captured the host."""
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/check.json")
                      or m.name == "check.json")
        f = tar.extractfile(member)
        assert f is not None
        data = json.load(f)
    assert isinstance(data, dict)
    return data


def findings(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [{k: f[k] for k in ("check", "id", "severity", "summary", "detail")}
            for f in data["findings"]]


def keys(data: Dict[str, Any]) -> List[Key]:
    return [(f["check"], f["id"], f["severity"]) for f in data["findings"]]


def test_bundle_is_small(guests: Guests) -> None:
    assert bundle(guests).stat().st_size < 1024 * 1024


def test_replay_gives_the_same_findings_as_the_guest(guests: Guests, tmp_path: Path) -> None:
    """Same findings, word for word, as the check the report ran inside the guest."""
    path = bundle(guests)
    assert findings(replay(path, tmp_path)) == findings(bundled_check(path))


def test_replay_gives_the_same_facts_as_the_guest(guests: Guests, tmp_path: Path) -> None:
    path = bundle(guests)
    assert replay(path, tmp_path)["facts"] == bundled_check(path)["facts"]


def test_replay_equals_the_guests_check_json(guests: Guests, tmp_path: Path) -> None:
    """The whole document, evidence and exit code included, apart from the fields about
    the run itself (docs/report.md, "Replay")."""
    path = bundle(guests)
    replayed, saved = replay(path, tmp_path), bundled_check(path)
    for name in ("version",):
        replayed.pop(name, None)
        saved.pop(name, None)
    assert replayed == saved


def test_replay_matches_a_live_check(guests: Guests, tmp_path: Path) -> None:
    """A live check right after the report finds the same things (numbers may move)."""
    live = guests.get("seed").step("check-bundle-live").json()
    assert isinstance(live, dict)
    assert keys(replay(bundle(guests), tmp_path)) == keys(live)


def test_replayed_trap_keeps_the_kernels_numbers(guests: Guests, tmp_path: Path) -> None:
    data = replay(bundle(guests), tmp_path)
    trap = [f for f in data["findings"] if f["check"] == "hugepages" and f["id"] == "trap"]
    assert trap and trap[0]["severity"] == "error"


def test_bundle_redacts_the_guest_identity(guests: Guests) -> None:
    raw = guests.get("seed").step("raw").stdout
    ident = dict(
        part.split("=", 1) for line in raw.splitlines() if line.startswith("hostname=")
        for part in line.split()
    )
    assert ident.get("hostname") == HOSTNAME, raw[-500:]
    secrets = [ident["hostname"].encode(), ident["machine-id"].encode()]
    leaks = []
    with tarfile.open(bundle(guests)) as tar:
        for member in tar.getmembers():
            f = tar.extractfile(member) if member.isfile() else None
            data = f.read() if f else b""
            leaks += [(member.name, s.decode()) for s in secrets
                      if s in data or s in member.name.encode()]
    assert not leaks
