"""README.md's set-up commands on a fresh minimal Debian, as a new user would run them.

A ``debootstrap --variant=minbase`` Debian 12 (no python3, no sudo, no git) as a chroot,
a clean clone of this working tree in ``/home/user/strata-doctor`` owned by uid 1000. As
root without sudo, the README's install command must install python3-venv itself, put the
command in ``/usr/local/bin`` and run ``strata-doctor check`` to a documented exit code,
leaving nothing in the clone that the user does not own. Then, as the user, the install
part of the README's test command must work in the same clone, and a few test files under
pytest-xdist must pass and end with the line that says no real-hardware test ran, and why.
The commands are read out of README.md (tests/readme_setup.py), so the two cannot drift.
docs/testbed.md says how long it takes.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List

import pytest
from chroot import (
    add_user_clone,
    build_tarball,
    clone_files,
    copy_network_config,
    mounted,
    owned_by_others,
    remove,
    run_in,
    skip_reason,
    unpack,
)
from vmharness import artifacts_root

from tests.readme_setup import setup_commands, without_pytest

pytestmark = pytest.mark.vm

CLONE = "/home/user/strata-doctor"
# A few files of the suite: the set-up tests themselves (as a user, the no-sudo path runs),
# and one file each of lstopo comparisons and corpus tests, which skip here and say why.
SUBSET = ("tests/test_readme_setup.py", "tests/test_cpu_facts_odd.py", "tests/test_corpus_cores.py")
TIMEOUT = 1200


@dataclass
class SetupRun:
    """What the README's commands did in the fresh tree."""

    root: Path
    """The chroot."""
    install: subprocess.CompletedProcess[str]
    """The install command, as root."""
    strangers_after_install: List[str]
    """Paths in the clone not owned by the user after the root install."""
    leftovers_after_install: List[str]
    """build/ or *.egg-info at the top of the clone after the root install."""
    user_install: subprocess.CompletedProcess[str]
    """The test command's install part, as the user."""
    user_pytest: subprocess.CompletedProcess[str]
    """The test command's pytest run over SUBSET, as the user."""


def _keep(folder: Path, name: str, done: subprocess.CompletedProcess[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.txt").write_text(
        f"$ {done.args}\nexit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )


@pytest.fixture(scope="module")
def setup_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SetupRun]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    commands = setup_commands()
    tarball = build_tarball()
    root = unpack(tarball, tmp_path_factory.mktemp("minimal-debian") / "root")
    artifacts = artifacts_root() / "minimal-debian"
    try:
        copy_network_config(root)
        add_user_clone(root, clone_files())
        with mounted(root):
            install = run_in(root, commands.install, CLONE, user=False, timeout=TIMEOUT)
            _keep(artifacts, "install", install)
            clone = root / CLONE.lstrip("/")
            strangers = owned_by_others(clone)
            leftovers = sorted(n for n in os.listdir(clone) if n == "build" or n.endswith(".egg-info"))
            user_install = run_in(root, without_pytest(commands.test), CLONE, user=True, timeout=TIMEOUT)
            _keep(artifacts, "user-install", user_install)
            pytest_step = commands.test.split("&&")[-1].strip()
            user_pytest = run_in(root, f"{pytest_step} -p no:cacheprovider {' '.join(SUBSET)}", CLONE,
                                 user=True, timeout=TIMEOUT)
            _keep(artifacts, "user-pytest", user_pytest)
        yield SetupRun(root, install, strangers, leftovers, user_install, user_pytest)
    finally:
        remove(root)


def test_the_install_command_runs_check_as_root_without_sudo(setup_run: SetupRun) -> None:
    root = setup_run.root
    assert not (root / "usr/bin/sudo").exists(), "the minimal Debian has no sudo"
    link = root / "usr/local/bin/strata-doctor"
    assert os.readlink(link) == "/opt/strata-doctor/bin/strata-doctor"
    assert (root / "opt/strata-doctor/bin/strata-doctor").is_file()
    out = setup_run.install.stdout.splitlines()
    verdict = re.search(r": (not )?ready \(exit ([01])\)$", out[-1] if out else "")
    assert verdict, setup_run.install.stdout + setup_run.install.stderr
    assert setup_run.install.returncode == int(verdict.group(2))  # docs/exit-codes.md: 0 or 1


def test_the_install_says_what_it_did_and_keeps_pip_quiet(setup_run: SetupRun) -> None:
    said = [line[len("strata-doctor install: "):] for line in setup_run.install.stderr.splitlines()
            if line.startswith("strata-doctor install: ")]
    assert said == [
        "installing python3-venv with apt-get",
        "installed /usr/local/bin/strata-doctor -> /opt/strata-doctor/bin/strata-doctor",
    ]
    assert "Successfully installed" not in setup_run.install.stdout + setup_run.install.stderr


def test_the_root_install_writes_nothing_into_the_clone(setup_run: SetupRun) -> None:
    assert setup_run.strangers_after_install == []
    assert setup_run.leftovers_after_install == []


def test_the_test_command_installs_as_the_user_after_the_root_install(setup_run: SetupRun) -> None:
    done = setup_run.user_install
    assert done.returncode == 0, done.stdout + done.stderr
    clone = setup_run.root / CLONE.lstrip("/")
    assert (clone / ".venv/bin/pytest").is_file()
    assert owned_by_others(clone) == []


def test_a_part_of_the_suite_passes_as_the_user_and_says_no_hardware_ran(setup_run: SetupRun) -> None:
    done = setup_run.user_pytest
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    lines = done.stdout.rstrip("\n").splitlines()
    assert re.search(r"\d+ passed, \d+ skipped in ", lines[-2]), lines[-3:]
    assert lines[-1] == (
        "real hardware: 0 corpus tests ran: /home/user/shared/corpus is absent (the real host "
        "snapshots; see README.md), 0 lstopo comparisons ran: lstopo-no-graphics is not installed "
        "(apt install hwloc-nox)"
    ), lines[-3:]
