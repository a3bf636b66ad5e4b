"""seed-box-gguf: the seed box whose config gives no sizes, where the engine's ExecStart
names a GGUF model. check with no flags finds the hugepage trap with the seed's numbers;
the sizes' precedence (--arena, arena:, model:, ExecStart, the process's command line),
relative paths, a missing or unreadable model, and a bundle's replay."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List

import pytest

from strata_doctor.config import EngineConfig
from strata_doctor.context import HostContext
from strata_doctor.root import Root
from tests.conftest import HOSTS, REPO, check_json, copy_host, run_cli, usage_error

HOST = HOSTS / "seed-box-gguf"
MODEL = "/srv/models/Strata-MoE-48x128E-IQ4_XS.gguf"
ARENA = 50_294_947_840
"""48 x 2 IQ4_XS tensors of 356,515,840 bytes + 25 Q4_K of 377,487,360 + 23 Q3_K of 288,358,400."""
KV = 48 * 4 * (128 + 128) * 2 * 33_792
SERVER = "/opt/strata/venv/bin/python /opt/strata/serve/server.py"


def writer() -> ModuleType:
    """tests/fixtures/gguf_header.py, the standard-library GGUF writer the fixture uses."""
    path = REPO / "tests" / "fixtures" / "gguf_header.py"
    spec = importlib.util.spec_from_file_location("fixture_gguf_header", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_copy(tmp_path: Path) -> Path:
    return copy_host("seed-box-gguf", tmp_path / "tree")


def sizes(root: Path, *args: str) -> Dict[str, Any]:
    found: Dict[str, Any] = check_json(root, *args)["sizes"]
    return found


def rows(text: str) -> List[str]:
    """The check rows of ``check -v`` text: every line after the sizes line."""
    return text.split("\n\n", 1)[1].splitlines()


def set_unit_exec(tree: Path, exec_start: str, extra: str = "") -> None:
    unit = tree / "etc/systemd/system/strata.service"
    text = re.sub(r"(?m)^ExecStart=.*$", lambda _: f"ExecStart={exec_start}", unit.read_text())
    unit.write_text(text.replace("[Install]", f"{extra}[Install]") if extra else text)


# -- the fixture's GGUF header is real GGUF ---------------------------------------------
def test_gguf_reader_reads_the_fixture_tensor_by_tensor(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    header = (HOST / MODEL.lstrip("/")).read_bytes()
    gg = writer()
    tensors = gg.seed_model_tensors()
    full = tmp_path / "model.gguf"  # the header, and a hole where the weights would be
    full.write_bytes(header)
    os.truncate(full, len(header) + gg.data_bytes(tensors))
    reader = gguf.GGUFReader(str(full))
    assert [t.name for t in reader.tensors] == [name for name, _, _ in tensors]
    for found, (name, kind, shape) in zip(reader.tensors, tensors):
        assert found.tensor_type.name == kind, name
        assert [int(d) for d in found.shape] == list(shape), name
        assert int(found.n_bytes) == gg.tensor_bytes(kind, shape), name
    assert reader.data_offset == len(header)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    assert fields["general.architecture"] == "qwen3moe"
    assert fields["qwen3moe.block_count"] == 48
    assert (fields["qwen3moe.expert_count"], fields["qwen3moe.expert_used_count"]) == (128, 8)
    assert fields["qwen3moe.attention.head_count_kv"] == 4
    assert fields["qwen3moe.attention.key_length"] == fields["qwen3moe.attention.value_length"] == 128
    experts = sum(int(t.n_bytes) for t in reader.tensors if "_exps." in t.name)
    assert experts == ARENA == gg.routed_expert_bytes(tensors)


def test_the_capture_records_the_model_files_size() -> None:
    stats = json.loads((HOST / ".strata-doctor/stat.json").read_text())
    gg = writer()
    header = (HOST / MODEL.lstrip("/")).read_bytes()
    assert stats[MODEL]["size"] == len(header) + gg.data_bytes(gg.seed_model_tensors())


# -- acceptance: no flags, the seed's trap ------------------------------------------------
def test_check_without_flags_finds_the_trap_from_the_model() -> None:
    result = run_cli(["check", "--root", str(HOST), "-v"], env={"NO_COLOR": "1"})
    assert result.exit_code == 1
    first = result.stdout.splitlines()[0]
    assert first == (f"arena 46.84 GiB: the routed experts of {MODEL} (named by ExecStart in "
                     "strata.service); K/V 3.09 GiB: 48 layers x 4 K/V heads x (128 + 128) x 2 bytes "
                     "(f16) x 33,792 tokens")
    assert ("MAP_HUGETLB will fail: pool 24,000, free 15,779, needed 23,983 (46.84 GiB / 2 MiB → "
            "23,983 pages)") in result.stdout
    assert "8,221 of its pages are taken (strata-bench pid 30201: 8,221)" in " ".join(result.stdout.split())
    assert "skipped: no arena size" not in result.stdout


def test_the_rows_are_the_seed_boxs_at_the_models_sizes() -> None:
    """Row for row what seed-box says with the same sizes given by hand: only where the
    arena came from differs (the sizes line, and the hugepages evidence)."""
    given = run_cli(["check", "--root", str(HOSTS / "seed-box"), "-v", "--arena", f"{ARENA}B",
                     "--kv", f"{KV}B"], env={"NO_COLOR": "1"})
    found = run_cli(["check", "--root", str(HOST), "-v"], env={"NO_COLOR": "1"})
    assert found.exit_code == given.exit_code == 1
    evidence = "/etc/strata-doctor.yaml: arena=46.84 GiB hugepages=auto"
    expected = rows(given.stdout)
    at = next(i for i, line in enumerate(expected) if line.endswith(evidence))
    line = expected[at]
    expected[at:at + 1] = [line.replace(evidence, "/etc/strata-doctor.yaml: hugepages=auto"),
                           line.replace(evidence, f"{MODEL}: arena=46.84 GiB (its routed experts)")]
    assert rows(found.stdout) == expected


def test_the_json_sizes_say_bytes_and_sources() -> None:
    found = sizes(HOST)
    assert found["arena"]["bytes"] == ARENA and found["kv"]["bytes"] == KV
    assert found["arena"]["source"] == f"the routed experts of {MODEL} (named by ExecStart in strata.service)"
    assert found["model"] == {"path": MODEL, "named_by": "ExecStart in strata.service"}
    assert found["arena"]["reason"] is None and found["kv"]["reason"] is None


# -- precedence -----------------------------------------------------------------------
def test_arena_option_beats_the_model() -> None:
    found = sizes(HOST, "--arena", "40GiB")
    assert found["arena"] == {"bytes": 40 << 30, "source": "--arena", "how": None, "reason": None}
    assert found["kv"]["bytes"] == KV  # the K/V still comes from the model
    assert found["kv"]["source"].endswith(f"({MODEL}, named by ExecStart in strata.service)")


def test_arena_in_the_config_beats_the_model(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("arena: 30GiB\nkv: 1GiB\n")
    found = sizes(HOST, "--config", str(config))
    assert (found["arena"]["bytes"], found["arena"]["source"]) == (30 << 30, f"arena: in {config}")
    assert (found["kv"]["bytes"], found["kv"]["source"]) == (1 << 30, f"kv: in {config}")
    assert found["model"] is None  # both given: no model is read


def test_model_in_the_config_beats_execstart(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    other = "/srv/other/Other.gguf"
    (tree / other.lstrip("/")).parent.mkdir(parents=True)
    shutil.copy(tree / MODEL.lstrip("/"), tree / other.lstrip("/"))
    (tree / "etc/strata-doctor.yaml").write_text(f"workers: 44\nmodel: {other}\ncontext: 4096\n")
    found = sizes(tree)
    assert found["model"] == {"path": other, "named_by": "model: in /etc/strata-doctor.yaml"}
    assert found["kv"]["bytes"] == 48 * 4 * 256 * 2 * 4096  # context: beats the ExecStart's --ctx-size


def test_the_model_option_beats_the_config(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    (tree / "etc/strata-doctor.yaml").write_text("model: /srv/nowhere.gguf\n")
    found = sizes(tree, "--model", MODEL)
    assert found["model"] == {"path": MODEL, "named_by": "--model"}


def test_execstart_beats_the_processs_command_line(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    (tree / "proc/48213/cmdline").write_bytes(b"\0".join([*SERVER.encode().split(), b"--model",
                                                          b"/srv/elsewhere.gguf"]) + b"\0")
    assert sizes(tree)["model"]["path"] == MODEL


def test_the_process_names_the_model_when_the_unit_does_not(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    set_unit_exec(tree, SERVER)
    found = sizes(tree)
    assert found["model"] == {"path": MODEL, "named_by": "the command line of PID 48213"}
    assert found["arena"]["bytes"] == ARENA and found["kv"]["bytes"] == KV


def test_no_model_anywhere_keeps_the_old_skips(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    set_unit_exec(tree, SERVER)
    (tree / "proc/48213/cmdline").write_bytes(b"\0".join(SERVER.encode().split()) + b"\0")
    result = run_cli(["check", "--root", str(tree)])
    assert result.stdout.splitlines()[0].startswith("arena unknown: pass --arena, or set arena: or model:")
    assert "skipped: no arena size (pass --arena or set arena: in the config)" in result.stdout
    assert result.exit_code == 1  # the binding and oomd still fail; the trap is not seen


# -- relative paths --------------------------------------------------------------------
def test_a_relative_model_is_relative_to_working_directory(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    set_unit_exec(tree, f"{SERVER} --model models/Strata-MoE-48x128E-IQ4_XS.gguf")
    unit = tree / "etc/systemd/system/strata.service"
    unit.write_text(unit.read_text().replace("WorkingDirectory=/opt/strata", "WorkingDirectory=/srv"))
    found = sizes(tree)
    assert found["model"]["path"] == MODEL and found["arena"]["bytes"] == ARENA


def test_a_relative_model_on_the_process_uses_its_cwd(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    set_unit_exec(tree, SERVER)
    (tree / "proc/48213/cmdline").write_bytes(
        b"\0".join([*SERVER.encode().split(), b"-m", b"Strata-MoE-48x128E-IQ4_XS.gguf"]) + b"\0")
    cwd = tree / "proc/48213/cwd"
    if cwd.is_symlink() or cwd.exists():
        cwd.unlink()
    os.symlink("/srv/models", cwd)
    assert sizes(tree)["model"]["path"] == MODEL
    cwd.unlink()  # the link is gone: the path cannot be resolved, and the line says so
    found = sizes(tree)
    assert found["arena"]["bytes"] is None
    assert found["arena"]["reason"] == (
        "model Strata-MoE-48x128E-IQ4_XS.gguf (the command line of PID 48213): a relative path, and "
        "/proc/48213/cwd cannot be read (No such file or directory); pass --arena")


# -- a model that cannot be read ----------------------------------------------------------
def test_a_missing_model_is_a_reason_and_the_checks_still_run(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    (tree / MODEL.lstrip("/")).unlink()
    result = run_cli(["check", "--root", str(tree)])
    assert result.exit_code == 1, result.stderr
    why = f"model {MODEL} (named by ExecStart in strata.service)"
    assert why not in result.stdout  # said once, as the source names it:
    reason = f"model {MODEL} (ExecStart in strata.service): no such file; pass --arena"
    assert result.stdout.startswith(f"arena unknown: {reason}; K/V counted as 0 B: ")
    assert re.search(rf"^\? arena-fit +skipped: no arena size \({re.escape(reason)}\)$", result.stdout, re.M)
    assert f"no arena size to compare the node's free memory with ({reason})" in result.stdout
    assert f"no arena size to compare with ({reason})" in result.stdout  # hugepages


def test_a_model_that_is_no_gguf_is_a_reason(tmp_path: Path) -> None:
    tree = host_copy(tmp_path)
    (tree / MODEL.lstrip("/")).write_bytes(b"PK\x03\x04" + bytes(60))
    found = sizes(tree)
    assert found["arena"]["bytes"] is None and found["kv"]["bytes"] is None
    reason = found["arena"]["reason"]
    assert reason.startswith(f"model {MODEL} (ExecStart in strata.service): not a GGUF file")
    map_text = run_cli(["map", "--root", str(tree)]).stdout
    assert "size not configured (model " in map_text


# -- every entry point sees the same sizes ------------------------------------------------
def test_host_context_and_the_api_see_the_models_sizes() -> None:
    from strata_doctor.api import plan_binding

    ctx = HostContext(Root(HOST), EngineConfig())
    assert (ctx.config.arena_bytes, ctx.config.kv_bytes) == (ARENA, KV)
    assert plan_binding(HOST).numactl == ("numactl", "--preferred=1", "--cpunodebind=1")
    numa_plan = run_cli(["numa-plan", "--root", str(HOST)])
    assert numa_plan.exit_code == 0, numa_plan.stderr


def test_a_bundle_replays_to_the_same_sizes(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.gz"
    made = run_cli(["report", "--root", str(HOST), "--bundle", str(bundle),
                    "--output", str(tmp_path / "r.md")])
    assert made.exit_code == 0, made.stderr
    assert check_json_bundle(bundle)["sizes"] == sizes(HOST)


def check_json_bundle(bundle: Path) -> Dict[str, Any]:
    result = run_cli(["check", "--bundle", str(bundle), "--format", "json"])
    assert result.exit_code == 1, result.stderr
    data: Dict[str, Any] = json.loads(result.stdout)
    return data


# -- bad settings ------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "says"), [
    ("context: many", "context: expected a number of tokens (a whole number above 0), got 'many'"),
    ("context: 0", "context: expected a number of tokens (a whole number above 0), got 0"),
    ("context: [1, 2]", "context: expected one value, got a list"),
    ("cache_type: q3_k", "cache_type: expected one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, "
                         "q5_1, got 'q3_k'"),
    ("model: ''", "model: not a path: ''"),
    ("model: {a: 1}", "model: expected one value, got a mapping"),
])
def test_a_bad_model_setting_is_one_line(tmp_path: Path, line: str, says: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(line + "\n")
    assert usage_error(["check", "--root", str(HOST), "--config", str(config)]) == \
        f"strata-doctor: error: {config}: {says}"


def test_bad_model_options_are_one_line() -> None:
    assert usage_error(["check", "--root", str(HOST), "--context", "lots"]) == (
        "strata-doctor: error: Invalid value for '--context': expected a number of tokens (a whole "
        "number above 0), got 'lots'")
    assert usage_error(["check", "--root", str(HOST), "--cache-type", "fp8"]).startswith(
        "strata-doctor: error: Invalid value for '--cache-type': expected one of f32, f16")
    assert usage_error(["check", "--root", str(HOST), "--model", ""]) == \
        "strata-doctor: error: Invalid value for '--model': not a path: ''"
