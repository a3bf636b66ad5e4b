"""The package installs under one import name, with its checks and templates, from a wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import HOSTS, REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the build needs only the setuptools already installed, no network.
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(REPO)],
        capture_output=True, text=True, check=False,
    )
    if build.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {build.stderr.strip().splitlines()[-1:]}")
    return next(out.glob("strata_doctor-*.whl"))


def test_wheel_maps_the_folders_into_one_import_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"strata_doctor"}, tops  # never a generic top-level 'doctor' or 'checks'
    assert "strata_doctor/checks/numa_binding.py" in names
    assert "strata_doctor/templates/numa-dropin.conf.j2" in names
    assert "strata_doctor/py.typed" in names


def test_installed_wheel_runs_a_check_with_its_templates(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)  # a wheel is a zip laid out as site-packages
    env = dict(os.environ, PYTHONPATH=str(target))
    seed = HOSTS / "seed-box"
    check = subprocess.run(
        [sys.executable, "-m", "strata_doctor", "check", "numa-binding", "--root", str(seed)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert check.returncode == 1, check.stderr
    assert "numactl --preferred=1 --cpunodebind=1" in check.stdout
    plan = subprocess.run(
        [sys.executable, "-m", "strata_doctor", "fix", "--root", str(seed), "--only", "numa-binding"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert "NUMAMask=1" in plan.stdout, plan.stderr  # rendered from the packaged template
    imported = subprocess.run(
        [sys.executable, "-c", "import strata_doctor; print(strata_doctor.__file__)"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert imported.stdout.startswith(str(target))
