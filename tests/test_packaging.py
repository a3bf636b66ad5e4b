"""The package installs under one import name, with its checks and templates, from a wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover - Python 3.9 and 3.10
    tomllib = None  # type: ignore[assignment]

from tests.conftest import HOSTS, REPO


def _package_folders() -> Tuple[str, ...]:
    """The top folders of pyproject's package-dir: what a wheel is built from."""
    text = (REPO / "pyproject.toml").read_text()
    line = next(line for line in text.splitlines() if line.startswith("package-dir"))
    return tuple(sorted({path for path in re.findall(r'= "([^"]+)"', line)}))


PACKAGE_FOLDERS = _package_folders()


def test_install_sh_copies_every_folder_the_package_is_built_from() -> None:
    """install.sh builds from a copy of these folders: one it leaves out fails the install."""
    copied = re.search(r"^for part in (.*); do$", (REPO / "install.sh").read_text(), re.M)
    assert copied is not None
    assert set(PACKAGE_FOLDERS) <= set(copied.group(1).split()), PACKAGE_FOLDERS


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy, as install.sh builds it: setuptools writes build/ and *.egg-info
    # into the folder it builds, and the clone stays as it was.
    source = out / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    # No build isolation: the build needs only the setuptools already installed, no network.
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(source)],
        capture_output=True, text=True, check=False,
    )
    if build.returncode != 0 and "No module named" in build.stderr:  # no setuptools or wheel here
        pytest.skip(f"cannot build a wheel here: {build.stderr.strip().splitlines()[-1:]}")
    assert build.returncode == 0, build.stderr
    return next(out.glob("strata_doctor-*.whl"))


def test_wheel_maps_the_folders_into_one_import_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"strata_doctor"}, tops  # never a generic top-level 'doctor' or 'checks'
    assert "strata_doctor/checks/numa_binding.py" in names
    assert "strata_doctor/templates/numa-dropin.conf.j2" in names
    assert "strata_doctor/py.typed" in names
    assert "strata_doctor/pages/numa-binding.md" in names  # docs/checks, for `explain`


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
    explained = subprocess.run(
        [sys.executable, "-m", "strata_doctor", "explain", "numa-binding/unbound"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith("# numa-binding\n") and "| `unbound` | error |" in explained.stdout


def _declared_packages() -> Tuple[Dict[str, str], List[str]]:
    """pyproject's package-dir mapping and its packages list."""
    with open(REPO / "pyproject.toml", "rb") as f:
        setuptools = tomllib.load(f)["tool"]["setuptools"]
    return setuptools["package-dir"], setuptools["packages"]


def _folder_packages(package_dir: Dict[str, str]) -> Set[str]:
    """Every folder with an ``__init__.py`` under the mapped folders, by its import name, and
    every mapped folder of data alone (``strata_doctor.pages``: docs/checks, no Python)."""
    found = set()
    for name, folder in package_dir.items():
        top = REPO / folder
        if not any(top.rglob("*.py")):
            found.add(name)
        for init in top.rglob("__init__.py"):
            rel = init.parent.relative_to(top).parts
            found.add(".".join((name, *rel)))
    return found


@pytest.mark.skipif(tomllib is None, reason="reading pyproject.toml needs Python 3.11's tomllib")
def test_every_sub_package_is_declared_so_tools_and_wheels_see_it() -> None:
    """A folder missing from ``packages`` would be left out of the wheel, the strict editable
    install, mypy and import-linter: the list and the folders are the same set."""
    package_dir, packages = _declared_packages()
    assert _folder_packages(package_dir) == set(packages)


def test_the_wheel_holds_every_module_of_every_folder(wheel: Path) -> None:
    """The wheel has every source file: a module in a folder left out of ``packages`` is not."""
    names = set(zipfile.ZipFile(wheel).namelist())
    folders = {"doctor": "strata_doctor", "checks": "strata_doctor/checks",
               "templates": "strata_doctor/templates"}
    for folder, prefix in folders.items():
        for module in (REPO / folder).rglob("*.py"):
            assert f"{prefix}/{module.relative_to(REPO / folder).as_posix()}" in names, module
    for page in (REPO / "docs" / "checks").glob("*.md"):  # what `explain` prints
        assert f"strata_doctor/pages/{page.name}" in names, page
