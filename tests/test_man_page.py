"""docs/strata-doctor.1 is made from the click commands (doctor/cli/man.py): the committed
page is a fresh one, every command and option is in it, and man(1) renders it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import List

import click
import pytest

from strata_doctor.cli import LAZY_COMMANDS, main
from strata_doctor.cli.man import EXIT_CODES, man_page
from tests.conftest import REPO

PAGE = REPO / "docs" / "strata-doctor.1"
MACROS = {".TH", ".SH", ".SS", ".PP", ".TP", ".B", ".I", ".nf", ".fi"}


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_the_committed_page_is_a_fresh_generation() -> None:
    assert _page() == man_page(main), (
        "docs/strata-doctor.1 differs from the commands: regenerate it with "
        "`.venv/bin/python -m strata_doctor.cli.man > docs/strata-doctor.1`")


def test_the_module_writes_the_page() -> None:
    out = subprocess.run([sys.executable, "-m", "strata_doctor.cli.man"], capture_output=True, text=True,
                         cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout == man_page(main)


def test_the_page_has_the_sections_of_a_man_page() -> None:
    page = _page()
    assert page.startswith('.TH STRATA\\-DOCTOR 1 ""')
    sections = re.findall(r"^\.SH (.+)$", page, re.M)
    assert sections == ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", '"EXIT STATUS"',
                        "FILES", "ENVIRONMENT", '"SEE ALSO"']
    for line in page.splitlines():  # every request is a man(7) macro; text never starts as one
        if line.startswith((".", "'")):
            assert line.split()[0] in MACROS, line
    assert re.search(r"^strata\\-doctor \\- find what makes", page, re.M)
    assert "/etc/strata\\-doctor.yaml" in page
    for variable in ("NO_COLOR", "COLUMNS"):
        assert f".B {variable}\n" in page


def _options(name: str) -> List[str]:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    return [opt for p in command.params if isinstance(p, click.Option) and not p.hidden for opt in p.opts]


@pytest.mark.parametrize("name", sorted(LAZY_COMMANDS))
def test_every_command_and_option_is_on_the_page(name: str) -> None:
    page = _page()
    heading = f'.SS "strata\\-doctor {name.replace("-", chr(92) + "-")}"'
    assert heading in page, heading
    part = page.split(heading, 1)[1].split(".SS ", 1)[0]
    for opt in _options(name):
        assert f"\\fB{opt.replace('-', chr(92) + '-')}\\fR" in part, (name, opt)


def test_the_exit_codes_are_those_of_docs_exit_codes() -> None:
    table = (REPO / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    documented = re.findall(r"^\| (\d+) \|", table, re.M)
    assert [code for code, _ in EXIT_CODES] == documented
    for code in documented:
        assert f".B {code}\n" in _page()


@pytest.mark.skipif(shutil.which("man") is None or shutil.which("groff") is None,
                    reason="man and groff are not installed (Debian: man-db, groff-base)")
def test_man_renders_it() -> None:
    env = dict(os.environ, MANWIDTH="200", MAN_KEEP_FORMATTING="", LC_ALL="C.UTF-8")
    shown = subprocess.run(["man", "-l", str(PAGE)], capture_output=True, text=True, env=env, check=False)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(re.sub(r".\x08", "", shown.stdout).split())  # no overstrikes, nor justified spaces
    assert "strata-doctor - find what makes this host slow" in text
    assert "strata-doctor explain [OPTIONS] [CHECK[/FINDING]]" in text
    lint = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(PAGE)], capture_output=True,
                          text=True, check=False)
    assert (lint.returncode, lint.stderr) == (0, "")
