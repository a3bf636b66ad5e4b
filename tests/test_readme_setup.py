"""README.md's two set-up commands: install.sh, and the test command that .ci/run runs word
for word. tests/vm/test_vm_setup.py runs both on a fresh minimal Debian."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.readme_setup import SetupCommands, setup_blocks, setup_commands, without_pytest

INSTALL = REPO / "install.sh"


def test_the_readme_gives_one_install_and_one_test_command() -> None:
    commands = setup_commands()
    assert commands.install.startswith("sh install.sh && strata-doctor check"), commands.install
    assert "python3-venv" in commands.install  # the one prerequisite, named in the command
    assert "sudo" not in commands.install.split("#")[0]  # a Debian with a root password has none
    assert commands.test.endswith("-m pytest -n auto"), commands.test
    assert without_pytest(commands.test) == "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]'"


def test_the_parser_reads_only_the_set_up_section(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "# x\n\n```\nsh install.sh --elsewhere\n```\n\n"
        "## Set up\n\n```\nsh install.sh && strata-doctor check\n```\n\n"
        "text\n\n```sh\npython3 -m venv .venv && .venv/bin/python -m pytest\n```\n\n"
        "## Next\n\n```\nsh install.sh\n```\n"
    )
    assert setup_commands(readme) == SetupCommands(
        "sh install.sh && strata-doctor check", "python3 -m venv .venv && .venv/bin/python -m pytest"
    )
    readme.write_text("# x\n\n## Set up\n\n```\nsh install.sh\n```\n")
    with pytest.raises(ValueError, match="1 install and 0 test commands"):
        setup_commands(readme)
    assert setup_blocks(readme) == ["sh install.sh"]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert setup_commands().test in lines


def test_the_test_extra_has_what_the_test_command_uses() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    extra = pyproject.split("[project.optional-dependencies]", 1)[1].split("]", 1)[0]
    assert '"pytest-xdist' in extra  # -n auto


def test_install_sh_is_posix_sh() -> None:
    for shell in ("sh", "dash", "bash"):
        if shutil.which(shell):
            done = subprocess.run([shell, "-n", str(INSTALL)], capture_output=True, text=True, check=False)
            assert done.returncode == 0, (shell, done.stderr)
    text = INSTALL.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert "[[" not in text and "pipefail" not in text  # no bash-only syntax


def test_install_sh_refuses_an_unknown_option_in_one_line() -> None:
    done = subprocess.run(["sh", str(INSTALL), "--bogus"], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr == "strata-doctor install: unknown option '--bogus' (use no option, or --user)\n"
    assert done.stdout == ""


def test_install_sh_refuses_a_folder_that_is_not_a_clone(tmp_path: Path) -> None:
    shutil.copy2(INSTALL, tmp_path / "install.sh")
    done = subprocess.run(["sh", str(tmp_path / "install.sh")], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr == (
        f"strata-doctor install: {tmp_path} is not a strata-doctor clone (no pyproject.toml or doctor/)\n"
    )


def test_install_sh_without_root_or_sudo_says_how_in_one_line(tmp_path: Path) -> None:
    """A user on a Debian installed with a root password: no sudo to run."""
    if os.geteuid() == 0:
        pytest.skip("runs as root: the no-root path needs an ordinary user")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "id", "dirname", "pwd"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    done = subprocess.run(
        [str(bin_dir / "sh"), str(INSTALL)], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 1
    assert done.stderr == (
        "strata-doctor install: installing into /opt/strata-doctor needs root: run it as root "
        "(su -c 'sh install.sh'), or 'sh install.sh --user'\n"
    )
