"""The set-up commands of README.md, read out of its "Set up" section, so that the tests
that run them (tests/vm/test_vm_setup.py) and .ci/run cannot drift from what a user reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, NamedTuple

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Set up"


class SetupCommands(NamedTuple):
    """The two one-line commands of README.md's "Set up" section."""

    install: str
    """The install command: runs install.sh, then ``strata-doctor check``."""
    test: str
    """The test command: a virtual environment in .venv, the test extra, then pytest."""


def setup_blocks(readme: Path = README) -> List[str]:
    """The fenced code blocks of the "Set up" section, in order, each stripped."""
    text = readme.read_text(encoding="utf-8")
    start = text.find("\n" + SECTION + "\n")
    if start < 0:
        raise ValueError(f"{readme}: no '{SECTION}' section")
    body = text[start + len(SECTION) + 2:]
    following = re.search(r"^## ", body, re.MULTILINE)
    if following:
        body = body[:following.start()]
    return [block.strip() for block in re.findall(r"^```[a-z]*\n(.*?)^```$", body, re.MULTILINE | re.DOTALL)]


def setup_commands(readme: Path = README) -> SetupCommands:
    """The install and the test command; ValueError when either is not there exactly once."""
    blocks = setup_blocks(readme)
    install = [b for b in blocks if "install.sh" in b]
    test = [b for b in blocks if "-m pytest" in b]
    if len(install) != 1 or len(test) != 1:
        raise ValueError(f"{readme}: '{SECTION}' holds {len(install)} install and {len(test)} test commands")
    for block in (install[0], test[0]):
        if "\n" in block:
            raise ValueError(f"{readme}: a set-up command is not one line: {block!r}")
    return SetupCommands(install[0], test[0])


def without_pytest(command: str) -> str:
    """The test command up to (not including) its pytest run: the install part."""
    steps = [step.strip() for step in command.split("&&")]
    kept = [step for step in steps if "-m pytest" not in step]
    if len(kept) != len(steps) - 1 or "-m pytest" not in steps[-1]:
        raise ValueError(f"the test command does not end with one pytest run: {command!r}")
    return " && ".join(kept)
