"""A misspelt command, check or finding is refused with the closest known name, and ``-V``
is ``--version``."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from strata_doctor import __version__
from strata_doctor.registry import did_you_mean, unknown_word
from tests.conftest import run_cli, usage_error


def test_a_misspelt_command_gets_the_closest_name() -> None:
    assert usage_error(["chek"]) == "strata-doctor: error: No such command 'chek'; did you mean 'check'?"
    line = usage_error(["numa-pln", "--numa", "0"])
    assert line.endswith("No such command 'numa-pln'; did you mean 'numa-plan'?"), line


def test_a_command_like_no_other_lists_them_all() -> None:
    line = usage_error(["bogus"])
    assert line.startswith("strata-doctor: error: No such command 'bogus' (known: check, "), line
    assert all(f" {name}," in line or f" {name})" in line for name in ("explain", "fix", "report")), line
    assert "did you mean" not in line


@pytest.mark.parametrize("args, says", [
    (["check", "numa-bindng"], "unknown check 'numa-bindng'; did you mean 'numa-binding'?"),
    (["check", "--ignore", "numa-binding/unbond"],
     "--ignore numa-binding/unbond: unknown finding 'unbond' of numa-binding; did you mean 'unbound'?"),
    (["check", "--ignore", "numa-bindng/unbound"],
     "--ignore numa-bindng/unbound: unknown check 'numa-bindng'; did you mean 'numa-binding'?"),
    (["fix", "--only", "hugepage"], "--only hugepage: unknown check 'hugepage'; did you mean 'hugepages'?"),
    (["fix", "--skip", "swap/of"], "--skip swap/of: unknown finding 'of' of swap; did you mean 'off'?"),
    (["report", "--ignore", "oomd/trap-chian"],
     "--ignore oomd/trap-chian: unknown finding 'trap-chian' of oomd; did you mean 'trap-chain'?"),
])
def test_a_misspelt_id_gets_the_closest_one(two_node_host: Path, args: List[str], says: str) -> None:
    line = usage_error([*args, "--root", str(two_node_host)])
    assert line == f"strata-doctor: error: {says}", line


def test_nothing_close_still_lists_the_known_ids() -> None:
    said = unknown_word("unknown check 'zz'", "zz", ["oomd", "swap"])
    assert said == "unknown check 'zz' (known: oomd, swap)"
    assert unknown_word("unknown finding '' of x", "", []) == "unknown finding '' of x (known: any id)"
    assert did_you_mean("", ["a"]) is None
    assert did_you_mean("swp", ["swap", "oomd"]) == "swap"


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_short_and_long_version(flag: str) -> None:
    result = run_cli([flag])
    assert (result.exit_code, result.stdout) == (0, f"strata-doctor, version {__version__}\n")
