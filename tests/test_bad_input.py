"""Bad configs, saved probe files and command lines: one clear line (or a fact), never a
traceback or a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.conftest import run_cli, usage_error, write_tree
from tests.test_probe_check import check_text, save, seed_probe, seed_tree

__all__ = ["seed_tree"]  # the fixture, imported to be used here

# -- the config file ---------------------------------------------------------------------


def _one_line_in_time(args: List[str], seconds: float = 60) -> str:
    """The one line of a usage error, from the console script in its own process, which must
    end within ``seconds`` (a FIFO or /dev/zero must not hold it)."""
    result = subprocess.run([sys.executable, "-m", "strata_doctor", *args], capture_output=True,
                            timeout=seconds, stdin=subprocess.DEVNULL)
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 2 and not result.stdout, (result.returncode, result.stdout, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("strata-doctor: error: "), err
    return lines[0]


def _config_error(host: Path, config: Path, *extra: str) -> str:
    """The one line ``check --config FILE`` prints for a refused config."""
    return usage_error(["check", "--root", str(host), "--config", str(config), *extra])


def test_a_deeply_nested_config_is_one_line(two_node_host: Path, tmp_path: Path) -> None:
    config = tmp_path / "deep.yaml"
    config.write_text("[" * 60000)  # under the size bound, far over the parser's recursion
    line = _config_error(two_node_host, config)
    assert line == f"strata-doctor: error: {config}: nested too deeply for a config"


def test_a_nested_default_config_under_the_root_is_one_line(two_node_host: Path) -> None:
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "arena: " + "{a: " * 5000 + "\n"})
    line = usage_error(["check", "--root", str(two_node_host)])
    assert line.endswith("etc/strata-doctor.yaml: nested too deeply for a config")


def test_a_config_that_is_not_utf8_is_one_line(two_node_host: Path, tmp_path: Path) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes("unit: caf\xe9\n".encode("latin-1"))
    line = _config_error(two_node_host, config)
    assert line == f"strata-doctor: error: {config}: not UTF-8 text (at offset 9)"


def test_a_default_config_that_is_not_utf8_is_refused_not_replaced(two_node_host: Path) -> None:
    path = two_node_host / "etc/strata-doctor.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"unit: caf\xe9\n")
    assert usage_error(["check", "--root", str(two_node_host)]).endswith(
        f"{path}: not UTF-8 text (at offset 9)")


def test_dev_zero_is_refused_at_once(two_node_host: Path) -> None:
    line = _one_line_in_time(["check", "--root", str(two_node_host), "--config", "/dev/zero"])
    assert line == "strata-doctor: error: /dev/zero: not a regular file (a character device)"


def test_a_fifo_is_refused_without_waiting_for_a_writer(two_node_host: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    line = _one_line_in_time(["check", "--root", str(two_node_host), "--config", str(fifo)])
    assert line.endswith(f"{fifo}: not a regular file (a FIFO)")


def test_a_folder_is_refused(two_node_host: Path, tmp_path: Path) -> None:
    assert _config_error(two_node_host, tmp_path).endswith(f"{tmp_path}: not a regular file (a folder)")


def test_a_default_config_that_is_a_fifo_or_folder_is_refused(two_node_host: Path) -> None:
    path = two_node_host / "etc/strata-doctor.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    assert _one_line_in_time(["check", "--root", str(two_node_host)]).endswith(
        f"{path}: not a regular file (a FIFO)")
    path.unlink()
    path.mkdir()
    assert usage_error(["check", "--root", str(two_node_host)]).endswith(
        f"{path}: not a regular file (a folder)")


@pytest.mark.parametrize("where", ["named", "default"])
def test_a_huge_config_is_refused_by_its_size(two_node_host: Path, tmp_path: Path, where: str) -> None:
    import time

    path = tmp_path / "big.yaml" if where == "named" else two_node_host / "etc/strata-doctor.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# a comment line to make it big\n" * (50 * 1024 * 1024 // 32) + "arena: 1GiB\n")
    args = ["check", "--root", str(two_node_host)] + (["--config", str(path)] if where == "named" else [])
    started = time.monotonic()
    line = usage_error(args)
    assert time.monotonic() - started < 10
    assert line.endswith(f"{path}: larger than 64 KiB, too large for a config")


def test_a_long_list_fits_no_config(two_node_host: Path, tmp_path: Path) -> None:
    import time

    config = tmp_path / "list.yaml"
    config.write_text("- 1\n" * (1 << 18))  # 1 MiB: PyYAML took half a minute over it
    started = time.monotonic()
    line = _config_error(two_node_host, config)
    assert time.monotonic() - started < 10
    assert line.endswith(f"{config}: larger than 64 KiB, too large for a config")


def test_a_config_just_under_the_bound_is_read(two_node_host: Path, tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text("#" * (64 * 1024 - 20) + "\narena: 1GiB\n")
    assert config.stat().st_size <= 64 * 1024
    result = run_cli(["check", "--root", str(two_node_host), "--config", str(config)])
    assert result.exit_code in (0, 1), result.stderr


def test_config_from_standard_input_is_refused(two_node_host: Path) -> None:
    line = usage_error(["check", "--root", str(two_node_host), "--config", "-"])
    assert line.endswith("--config -: standard input is not read; name a file (./- for a file named -)")


@pytest.mark.parametrize("yaml_text, says", [
    ("arena: {size: 1GiB}\n", "arena: expected one value, got a mapping"),
    ("workers: [1, 2]\n", "workers: expected one value, got a list"),
])
def test_a_setting_that_is_not_one_value_is_one_line(two_node_host: Path, tmp_path: Path, yaml_text: str,
                                                     says: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml_text)
    assert _config_error(two_node_host, config).endswith(f"{config}: {says}")


def test_an_alias_bomb_in_a_setting_is_refused_before_it_is_expanded(two_node_host: Path,
                                                                     tmp_path: Path) -> None:
    # 9^8 (43 million) references to one small list: printing it would take minutes and GiBs.
    levels = ["&a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    config = tmp_path / "bomb.yaml"
    config.write_text("arena: [" + ", ".join(levels) + "]\n")
    line = _one_line_in_time(["check", "--root", str(two_node_host), "--config", str(config)])
    assert line.endswith(f"{config}: arena: expected one value, got a list")


def test_a_good_config_file_still_works(two_node_host: Path, tmp_path: Path) -> None:
    config = tmp_path / "good.yaml"
    config.write_text("arena: 10GiB\nkv: 1GiB\nlock: true\n")
    result = run_cli(["check", "--root", str(two_node_host), "--config", str(config), "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr



# -- the saved probe result --------------------------------------------------------------


def _cell_changes(**row: Any) -> Dict[str, Any]:
    """The seed probe with its first matrix row changed."""
    data = seed_probe()
    data["matrix"][0].update(row)
    return data


@pytest.mark.parametrize("document, why", [
    (_cell_changes(read_gbps=float("inf")), "matrix[0].read_gbps is not a number >= 0"),
    (_cell_changes(latency_ns=10 ** 400), "matrix[0].latency_ns is not a number >= 0"),
    (seed_probe(seconds=float("inf")), "seconds is not a number"),
    (seed_probe(gpu={"status": "measured", "reason": "GPU 0", "copies": [
        {"cpu_node": 1e999, "h2d_gbps": 20.0, "placed_fraction": 1.0}]}),
     "gpu.copies[0].cpu_node is not an integer"),
    (seed_probe(gpu={"status": "measured", "reason": "GPU 0", "copies": "abc"}),
     "gpu.copies is not a list"),
    (seed_probe(llc_bytes=True), "llc_bytes is not an integer or null"),
    (seed_probe(notes="abc"), "notes is not a list of strings"),
    (seed_probe(notes=["fine", 7]), "notes is not a list of strings"),
    (seed_probe(cpu_model=["a", "list"]), "cpu_model is not a string"),
    ("[" * 100000, "nested too deeply"),
    (json.dumps(seed_probe()).replace('"seconds": 10.0', '"seconds": 1e999'), "seconds is not a number"),
    (seed_probe(matrix=[{"cpu_node": n, "mem_node": n, "read_gbps": 1.0, "latency_ns": 1.0,
                         "placed_fraction": 1.0, "threads": 1} for n in range(5000)]),
     "matrix has 5,000 cells, more than 4,096"),
    (seed_probe(matrix=[{"cpu_node": n, "mem_node": 4000 - n, "read_gbps": 1.0, "latency_ns": 1.0,
                         "placed_fraction": 1.0, "threads": 1} for n in range(100)]),
     "matrix spans 100 CPU nodes x 100 memory nodes, more than 4,096 cells"),
])
def test_a_bad_saved_probe_is_unused_with_its_reason(seed_tree: Path, document: Any, why: str) -> None:
    text = document if isinstance(document, str) else json.dumps(document, allow_nan=True)
    save(seed_tree, text)
    result = run_cli(["check", "--root", str(seed_tree), "-v", "numa-binding"], env={"NO_COLOR": "1"})
    assert result.exit_code == 1, result.stderr
    said = " ".join(result.stdout.split())
    assert f"is not used: it is not a probe result: {why}; the ratio is the firmware's." in said, said
    report = run_cli(["report", "--root", str(seed_tree), "--format", "json"])
    assert report.exit_code == 0, report.stderr


def test_a_huge_saved_probe_is_unused_by_its_size(seed_tree: Path) -> None:
    data = seed_probe(created="x" * (5 << 20))
    save(seed_tree, data)
    said = " ".join(check_text(seed_tree).split())
    assert "is not used: it is larger than 4 MiB; the ratio is the firmware's." in said


def test_a_good_saved_probe_still_counts(seed_tree: Path) -> None:
    save(seed_tree, seed_probe(llc_bytes=None, notes=["a note"]))
    assert "remote reads 2.5x slower (24.4 vs 61.0 GB/s, measured)" in check_text(seed_tree)


# -- the command line --------------------------------------------------------------------

HOST_COMMANDS = ["check", "fix", "report", "map", "numa-plan", "init"]
"""The commands that open a host (--root, --config, --arena...)."""


def _bad_forms(command: str) -> List[List[str]]:
    """Common ways to get ``command``'s command line wrong."""
    forms = [["--no-such-option"], ["--format"], ["--format", "nope"], ["--format=nope"], ["-Z"]]
    if command != "check":  # check's arguments are check ids: a wrong one is its own line
        forms.append(["extra-argument"])
    if command in HOST_COMMANDS:
        forms += [["--root"], ["--arena"], ["--config"], ["--unit"], ["--workers"], ["--workers", "x"],
                  ["--headroom", "1"], ["--hugepages", "x"], ["--numa", "x"], ["--numa"], ["--lock=yes"]]
    if command in ("check", "report"):
        forms += [["--fail-on", "nonsense"], ["--fail-on"], ["--ignore"]]
    if command == "fix":
        forms += [["--only"], ["--skip"], ["--apply=yes"]]
    if command == "probe":
        forms += [["--seconds", "x"], ["--threads", "x"], ["--threads", "1.5"], ["--size", "x"],
                  ["--size"], ["--seconds"]]
    return forms


CASES = [(command, form) for command in [*HOST_COMMANDS, "list-checks", "probe"]
         for form in _bad_forms(command)]


@pytest.mark.parametrize("command, form", CASES, ids=[f"{c} {' '.join(f)}" for c, f in CASES])
def test_every_usage_error_is_one_line(two_node_host: Path, command: str, form: List[str]) -> None:
    where = ["--root", str(two_node_host)] if command in HOST_COMMANDS else []
    result = run_cli([command, *where, *form])
    assert (result.exit_code, result.stdout) == (2, ""), (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("strata-doctor: error: "), result.stderr
    assert "Usage:" not in result.stderr and "--help" not in result.stderr


@pytest.mark.parametrize("args, says", [
    (["bogus"], "No such command 'bogus'"),
    (["--bogus"], "--bogus"),  # "No such option '--bogus'"; click 8.1.3: "No such option: --bogus"
    (["check", "--format", "nope"], "'nope' is not one of 'text', 'json', 'prometheus', 'nfd'"),
    (["probe", "--threads", "x"], "'--threads': 'x' is not a valid integer"),
    (["fix", "--numa", "x"], "Invalid value for '--numa': expected auto, off or a node id"),
    (["map", "extra"], "Got unexpected extra argument (extra)"),
])
def test_the_line_keeps_what_click_found(args: List[str], says: str) -> None:
    line = usage_error(args)
    assert says in line, line
    assert not line.endswith("."), line
    if says == "--bogus":
        assert "No such option" in line, line


def test_help_is_still_help() -> None:
    result = run_cli(["check", "--help"])
    assert result.exit_code == 0 and result.stdout.startswith("Usage: ") and not result.stderr


@pytest.mark.parametrize("command, option", [
    (command, option) for command in HOST_COMMANDS for option in ("--root", "--config")
] + [("check", "--bundle"), ("fix", "--bundle"), ("map", "--bundle"), ("numa-plan", "--bundle"),
     ("report", "--bundle"), ("report", "--output"), ("report", "-o"), ("probe", "--root"),
     ("probe", "--bundle")])
def test_an_empty_path_is_a_usage_error(two_node_host: Path, command: str, option: str) -> None:
    # The host is named, so that before the fix an empty --bundle read the tree, never this host.
    where = ["--root", str(two_node_host)] if command in HOST_COMMANDS and option != "--root" else []
    line = usage_error([command, *where, option, ""])
    named = "--output" if option == "-o" else option
    assert line == f"strata-doctor: error: {named} '': an empty path names nothing", line


def test_an_empty_fleet_output_is_a_usage_error(two_node_host: Path) -> None:
    line = usage_error(["check", "--root", str(two_node_host), "--format", "prometheus", "--output", ""])
    assert line == "strata-doctor: error: --output '': an empty path names nothing"


# -- Ctrl-C ------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["check", "report", "numa-plan", "map"])
def test_ctrl_c_is_no_verdict(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # click's "Aborted!" ended with 1, which a script reads as "not ready"; an interrupted
    # run ends with 130, as a shell reports a command that SIGINT stopped.
    from tests.conftest import seed_copy

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("strata_doctor.context.HostContext", interrupted)
    result = run_cli([command, "--root", str(seed_copy(tmp_path / "h"))])
    assert result.exit_code == 130, (result.exit_code, result.output)
    assert result.stdout == "" and result.stderr == "strata-doctor: interrupted\n"
