"""``strata-doctor init``: the config it would write (goldens), what ``--apply`` writes and
``fix --revert`` takes back, and that the file reads back as the settings it was made of.

After an intended change of the plan's words, regenerate with ``STRATA_UPDATE_GOLDEN=1
python -m pytest tests/test_init.py`` and read the diff.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List

import pytest

from strata_doctor.config import KEYS, EngineConfig, load_config
from strata_doctor.root import Root
from tests.conftest import REPO, check_json, compare_golden, copy_host, run_cli, usage_error, write_tree
from tests.test_fix_hosts import snapshot

GOLDEN = REPO / "tests" / "golden" / "init"
CONFIG = "etc/strata-doctor.yaml"
PLAN_HOSTS = ("seed-box", "no-gpu", "container-numa-limits")


def _config_of(tree: Path) -> EngineConfig:
    return load_config(Root(str(tree)), None)


def _same_settings(one: EngineConfig, other: EngineConfig) -> None:
    """Every field but where the settings were read from."""
    for field in EngineConfig._fields:
        if field not in ("source", "gpu_source"):
            assert getattr(one, field) == getattr(other, field), field


@pytest.mark.parametrize("host", PLAN_HOSTS)
def test_the_plan_shows_the_file_it_would_write(tmp_path: Path, host: str) -> None:
    tree = copy_host(host, tmp_path / host)
    original = snapshot(tree)
    shown = run_cli(["init", "--root", str(tree), "--force"])
    assert shown.exit_code == 0, shown.stderr
    compare_golden(GOLDEN / f"{host}.txt", shown.stdout)
    assert snapshot(tree) == original, "init without --apply wrote something"


def test_an_operators_config_is_refused_without_force_and_the_diff_still_shown(tmp_path: Path) -> None:
    tree = copy_host("seed-box", tmp_path / "seed-box")
    shown = run_cli(["init", "--root", str(tree)])
    # As fix's dry run: the plan --apply would refuse exits 2, and says why on stderr.
    assert shown.exit_code == 2, shown.stderr
    assert "cannot apply: /etc/strata-doctor.yaml: exists and was not written by strata-doctor" \
        in shown.stdout
    assert shown.stderr.startswith("strata-doctor: error: cannot apply: /etc/strata-doctor.yaml: exists")
    assert "With --force, /etc/strata-doctor.yaml would be replaced so:\n" in shown.stdout
    assert "+gpu: 0000:84:00.0\n" in shown.stdout
    applied = run_cli(["init", "--root", str(tree), "--apply"])
    assert applied.exit_code == 2 and "not applied: /etc/strata-doctor.yaml: exists" in applied.stderr
    assert not (tree / "var/lib/strata-doctor/applies").exists()


@pytest.mark.parametrize("host", PLAN_HOSTS)
def test_apply_then_revert_returns_the_tree_to_the_byte(tmp_path: Path, host: str) -> None:
    tree = copy_host(host, tmp_path / host)
    original = snapshot(tree)
    before = _config_of(tree)
    applied = run_cli(["init", "--root", str(tree), "--force", "--apply"])
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    assert f"undo with `strata-doctor fix --revert --root {tree}`" in applied.stdout
    text = (tree / CONFIG).read_text()
    assert text.startswith("# Managed by strata-doctor: written by `strata-doctor init --apply`.\n")
    assert "20" + "2" not in text.split("\n", 3)[0]  # no timestamp in the header
    written = _config_of(tree)
    _same_settings(written, before._replace(gpu=written.gpu))  # the GPU is the one gpu-placement chose
    again = run_cli(["init", "--root", str(tree), "--apply"])  # ours now: no --force needed
    assert again.exit_code == 0 and again.stdout.startswith("Nothing to change:"), again.stdout
    reverted = run_cli(["fix", "--root", str(tree), "--revert"])
    assert reverted.exit_code == 0, reverted.stderr
    assert "restored /etc/strata-doctor.yaml" in reverted.stdout
    assert snapshot(tree) == original


def test_every_setting_given_is_written_and_reads_back(tmp_path: Path) -> None:
    tree = copy_host("seed-box", tmp_path / "seed-box")
    (tree / CONFIG).unlink()
    flags = ["--arena", "40.5GiB", "--kv", "0", "--unit", "engine", "--workers", "20",
             "--headroom", "3221225472B", "--hugepages", "thp", "--gpu", "84:00.0", "--numa", "1",
             "--lock", "--release-pool", "--model", "/srv/models/x.gguf", "--context", "8192",
             "--cache-type", "q8_0"]
    applied = run_cli(["init", "--root", str(tree), "--apply", *flags])
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    text = (tree / CONFIG).read_text()
    for key in KEYS:
        assert f"\n{key}: " in text, key
    assert "# given on the command line: --arena 40.5GiB\narena: 40.5GiB\n" in text
    assert "# given on the command line: --gpu 84:00.0\ngpu: '84:00.0'\n" in text  # YAML would read 5040.0
    assert "Not set here" not in text
    written = _config_of(tree)
    assert (written.arena_bytes, written.kv_bytes, written.headroom_bytes) == (
        round(40.5 * 2**30), 0, 3 * 2**30)
    assert (written.unit, written.workers, written.hugepages, written.gpu, written.numa) == (
        "engine.service", 20, "thp", "84:00.0", "1")
    assert written.lock and written.release_pool
    assert (written.model, written.context, written.cache_type) == ("/srv/models/x.gguf", 8192, "q8_0")
    assert run_cli(["fix", "--root", str(tree), "--revert"]).exit_code == 0
    assert not (tree / CONFIG).exists(), "the config init created is removed again"


def test_a_second_check_without_flags_sees_the_settings(tmp_path: Path) -> None:
    tree = copy_host("seed-box", tmp_path / "seed-box")
    applied = run_cli(["init", "--root", str(tree), "--force", "--apply", "--arena", "40GiB",
                       "--workers", "20", "--headroom", "2GiB"])
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    engine = check_json(tree)["engine"]
    assert (engine["arena_bytes"], engine["workers"], engine["headroom_bytes"]) == (40 * 2**30, 20, 2 * 2**30)
    assert engine["kv_bytes"] == round(3.09 * 2**30)  # kept from the config that was there


def test_a_host_without_config_or_unit_gets_what_it_shows(tmp_path: Path) -> None:
    tree = copy_host("no-gpu", tmp_path / "no-gpu")
    (tree / CONFIG).unlink()
    shown = run_cli(["init", "--root", str(tree), "--output", "-"])
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.endswith("# Not set here, so their defaults apply (docs/config.md): "
                                 f"{', '.join(KEYS)}.\n")
    assert "None" not in shown.stdout


def test_a_private_config_keeps_its_mode(tmp_path: Path) -> None:
    tree = copy_host("no-gpu", tmp_path / "no-gpu")
    (tree / CONFIG).chmod(0o600)
    assert run_cli(["init", "--root", str(tree), "--force", "--apply"]).exit_code == 0
    assert (tree / CONFIG).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("target", ["-", "/dev/null", "file"])
def test_output_writes_only_the_yaml(tmp_path: Path, target: str) -> None:
    tree = copy_host("seed-box", tmp_path / "seed-box")
    original = snapshot(tree)
    path = str(tmp_path / "out.yaml") if target == "file" else target
    result = run_cli(["init", "--root", str(tree), "--output", path])
    assert result.exit_code == 0, result.stderr
    if target == "-":
        assert result.stdout.startswith("# Managed by strata-doctor") and "REPLACE" not in result.stdout
    else:
        assert result.stdout == ""
    if target == "file":
        assert Path(path).read_text().startswith("# Managed by strata-doctor")
    assert snapshot(tree) == original


@pytest.mark.parametrize("args, says", [
    (["--apply", "--output", "-"], "--apply and --output exclude each other"),
    (["--workers", "many"], "Invalid value for '--workers': expected a whole number, got 'many'"),
    (["--headroom", "4"], "Invalid value for '--headroom': '4' has no unit"),
    (["--hugepages", "always"], "Invalid value for '--hugepages': expected one of auto, hugetlb, thp"),
    (["--numa", "near"], "Invalid value for '--numa': expected auto, off or a node id, got 'near'"),
    (["--numa", "9"], "--numa 9: no such NUMA node on this host (nodes: 0,1)"),
    (["--output", ""], "--output '': an empty path names nothing"),
])
def test_bad_input_is_one_line(two_node_host: Path, args: List[str], says: str) -> None:
    line = usage_error(["init", "--root", str(two_node_host), *args])
    assert says in line, line


@pytest.mark.parametrize("command", ["check", "fix", "report", "map", "numa-plan"])
@pytest.mark.parametrize("flag, value, says", [
    ("--workers", "-1", "Invalid value for '--workers': expected a whole number, got '-1'"),
    ("--headroom", "lots", "Invalid value for '--headroom': not a size: 'lots'"),
    ("--hugepages", "maybe", "Invalid value for '--hugepages': expected one of auto, hugetlb, thp"),
])
def test_every_host_command_takes_the_setting_flags(two_node_host: Path, command: str, flag: str,
                                                    value: str, says: str) -> None:
    assert says in usage_error([command, "--root", str(two_node_host), flag, value])


def test_release_pool_is_for_the_commands_that_write(two_node_host: Path) -> None:
    said = usage_error(["check", "--root", str(two_node_host), "--release-pool"])
    # click 8.1.3 says "No such option: --release-pool", later ones "No such option '--release-pool'".
    assert re.search(r"No such option:? '?--release-pool'?", said), said


def test_the_setting_flags_reach_the_checks(two_node_host: Path) -> None:
    engine = check_json(two_node_host, "--workers", "3", "--headroom", "1GiB", "--hugepages", "thp",
                        "--numa", "0")["engine"]
    assert (engine["workers"], engine["headroom_bytes"], engine["hugepages"], engine["numa"]) == (
        3, 2**30, "thp", "0")


# -- the preflight checks what the operator saw ------------------------------------------
def _preflight_line(tree: Path, *args: str) -> str:
    result = run_cli(["fix", "--root", str(tree), "--preflight", "--only", "numa-binding",
                      "--format", "json", *args])
    assert result.exit_code == 0, result.stderr
    files = json.loads(result.stdout)["plan"]["files"]
    dropin = next(f for f in files if f["path"].endswith("60-strata-doctor-preflight.conf"))
    return next(line for line in dropin["content"].splitlines() if line.startswith("ExecStartPre="))


def test_the_preflight_names_the_config_in_effect(two_node_host: Path) -> None:
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "arena: 8GiB\n"})
    line = _preflight_line(two_node_host)
    assert line.endswith(" check --quiet --fail-on error --config /etc/strata-doctor.yaml"), line


def test_the_preflight_carries_the_sizes_given_as_flags(two_node_host: Path) -> None:
    line = _preflight_line(two_node_host, "--arena", "8GiB", "--kv", "1GiB", "--lock", "--release-pool")
    assert line.endswith(" check --quiet --fail-on error --arena 8GiB --kv 1GiB --lock"), line  # check
    # takes no --release-pool: it would refuse every start


def test_the_preflight_carries_a_config_file_named_and_the_flags_over_it(two_node_host: Path,
                                                                        tmp_path: Path) -> None:
    config = tmp_path / "my engine.yaml"
    config.write_text("arena: 8GiB\n")
    line = _preflight_line(two_node_host, "--config", str(config), "--kv", "1GiB")
    assert line.endswith(f' --config "{config}" --kv 1GiB'), line


def test_the_model_the_engine_names_is_written_and_sizes_the_next_run(tmp_path: Path) -> None:
    """seed-box-gguf: no arena: or kv:, the model on ExecStart; init writes model: from it,
    never the sizes the model gave (they would go stale when the model changes)."""
    tree = copy_host("seed-box-gguf", tmp_path / "seed-box-gguf")
    shown = run_cli(["init", "--root", str(tree), "--output", "-"])
    assert shown.exit_code == 0, shown.stderr
    assert ("# the engine's model, named by ExecStart in strata.service\n"
            "model: /srv/models/Strata-MoE-48x128E-IQ4_XS.gguf\n") in shown.stdout
    assert "\narena:" not in shown.stdout and "\nkv:" not in shown.stdout
    applied = run_cli(["init", "--root", str(tree), "--apply", "--force"])
    assert applied.exit_code == 0, applied.stderr
    again = run_cli(["check", "--root", str(tree), "--format", "json"])
    sizes = json.loads(again.stdout)["sizes"]
    assert sizes["arena"]["bytes"] == 50294947840
    assert "model: in /etc/strata-doctor.yaml" in sizes["arena"]["source"]
