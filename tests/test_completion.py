"""Shell completion (docs/cli.md): click writes the bash, zsh and fish sources, and completes
commands, check ids, CHECK/FINDING ids and --root's folders."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List

import pytest
from click.testing import CliRunner

from strata_doctor.checks import BUILTIN
from strata_doctor.cli import main
from tests.conftest import REPO

VAR = "_STRATA_DOCTOR_COMPLETE"


def _complete(env: Dict[str, str]) -> List[str]:
    """What the completion protocol answers, in-process, as the console script names itself."""
    result = CliRunner().invoke(main, [], prog_name="strata-doctor", env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def _bash(words: str) -> List[str]:
    """bash's answers (``plain,check`` lines) for a command line whose last word is incomplete."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    return _complete({VAR: "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})


@pytest.mark.parametrize("shell, says", [
    ("bash", "complete -o nosort -F _strata_doctor_completion strata-doctor"),
    ("zsh", "#compdef strata-doctor"),
    ("fish", "complete --no-files --command strata-doctor"),
])
def test_the_console_script_writes_each_shells_source(shell: str, says: str) -> None:
    env = dict(os.environ, **{VAR: f"{shell}_source"})
    out = subprocess.run([sys.executable, "-m", "strata_doctor"], capture_output=True, text=True,
                         env=env, cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr
    assert says in out.stdout and f"{VAR}={shell}_complete" in out.stdout, out.stdout


def test_a_command_name_completes() -> None:
    assert _bash("strata-doctor ch") == ["plain,check"]
    assert _bash("strata-doctor ex") == ["plain,explain"]


def test_check_ids_complete_after_check() -> None:
    assert _bash("strata-doctor check ") == [f"plain,{cls.id}" for cls in BUILTIN]
    assert _bash("strata-doctor check numa-b") == ["plain,numa-binding", "plain,numa-balancing"]


@pytest.mark.parametrize("words", ["strata-doctor check --ignore swap/", "strata-doctor fix --only swap/",
                                   "strata-doctor fix --skip swap/", "strata-doctor report --ignore swap/",
                                   "strata-doctor explain swap/"])
def test_finding_ids_complete_after_a_check_and_a_slash(words: str) -> None:
    swap = next(cls for cls in BUILTIN if cls.id == "swap")
    assert _bash(words) == [f"plain,swap/{f}" for f in swap.findings]


def test_root_completes_folders_by_the_shell() -> None:
    assert _bash("strata-doctor check --root tests/fix") == ["dir,tests/fix"]
    assert _bash("strata-doctor check --config /etc/str") == ["file,/etc/str"]


def test_zsh_and_fish_complete_too() -> None:
    zsh = _complete({VAR: "zsh_complete", "COMP_WORDS": "strata-doctor explain hug", "COMP_CWORD": "2"})
    assert zsh[:2] == ["plain", "hugepages"]
    fish = _complete({VAR: "fish_complete", "COMP_WORDS": "strata-doctor ch", "COMP_CWORD": "ch"})
    assert fish and fish[0].startswith("plain,check\t")
