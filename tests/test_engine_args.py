"""The engine's command line, parsed for its model, context and K/V cache type: each flag
form, ExecStart's quoting and prefixes, launcher prefixes, a Python interpreter's options."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

from strata_doctor.facts.engine_args import (
    EngineArgs,
    engine_words,
    exec_words,
    is_model_folder,
    parse_engine_args,
    read_process_command,
    read_unit_command,
    resolve,
)
from strata_doctor.root import Root
from tests.conftest import write_tree

SERVER = "/opt/strata/venv/bin/python /opt/strata/serve/server.py"


def parsed(exec_start: str) -> EngineArgs:
    return parse_engine_args(exec_words(exec_start))


@pytest.mark.parametrize(("line", "model"), [
    (f"{SERVER} --model /srv/m.gguf", "/srv/m.gguf"),
    (f"{SERVER} --model=/srv/m.gguf", "/srv/m.gguf"),
    ("/usr/bin/llama-server -m /srv/m.gguf", "/srv/m.gguf"),
    (f"{SERVER} --model-path /srv/hf", "/srv/hf"),
    (f"{SERVER} --model_path /srv/hf", "/srv/hf"),
    (f"{SERVER} --model_path=/srv/hf", "/srv/hf"),
    (f"{SERVER} --gguf-path /srv/gguf", "/srv/gguf"),
    # ktransformers: --model_path holds config.json only, --gguf_path the weights
    ("python -m ktransformers.server.main --model_path /srv/cfg --gguf_path /srv/gguf", "/srv/gguf"),
    (f"{SERVER} --port 8080 /srv/models/m.gguf", "/srv/models/m.gguf"),
    (f"{SERVER} /srv/models/m.safetensors", "/srv/models/m.safetensors"),
    (f"{SERVER} --model /srv/a.gguf --model /srv/b.gguf", "/srv/b.gguf"),  # argparse: the last wins
    (f"{SERVER} --port 8080", None),
])
def test_each_form_of_the_model_flag(line: str, model: Optional[str]) -> None:
    assert parsed(line).model == model


@pytest.mark.parametrize(("line", "context"), [
    (f"{SERVER} -m /m.gguf --ctx-size 33792", "33792"),
    (f"{SERVER} -m /m.gguf --ctx-size=33792", "33792"),
    (f"{SERVER} -m /m.gguf -c 8192", "8192"),
    (f"{SERVER} -m /m.gguf --context 4096", "4096"),
    ("vllm serve /srv/hf --max-model-len 32768", "32768"),
    ("python -m ktransformers.server.main --gguf_path /g --max_seq_len 16384", "16384"),
    (f"{SERVER} -m /m.gguf", None),
])
def test_each_form_of_the_context_flag(line: str, context: Optional[str]) -> None:
    assert parsed(line).context == context


def test_the_cache_type_flags() -> None:
    assert parsed("llama-server -m /m.gguf --cache-type-k q8_0").cache_type == "q8_0"
    assert parsed("llama-server -m /m.gguf -ctk q4_0").cache_type == "q4_0"
    assert parsed("llama-server -m /m.gguf --cache-type-k=q8_0").cache_type == "q8_0"
    assert parsed("llama-server -m /m.gguf").cache_type is None


def test_a_path_with_spaces_in_execstart_quoting() -> None:
    assert parsed(f'{SERVER} --model "/srv/my models/m.gguf" -c 4096').model == "/srv/my models/m.gguf"
    assert parsed(f"{SERVER} --model '/srv/my models/m.gguf'").model == "/srv/my models/m.gguf"
    assert parsed(f"{SERVER} --model /srv/my\\ models/m.gguf").model == "/srv/my models/m.gguf"


def test_execstart_prefixes_are_dropped() -> None:
    assert exec_words("-/usr/bin/llama-server -m /m.gguf") == ["/usr/bin/llama-server", "-m", "/m.gguf"]
    assert exec_words("!!/usr/bin/llama-server -m /m.gguf")[0] == "/usr/bin/llama-server"
    # @: the second word is argv[0], not an argument
    assert exec_words("@/usr/bin/llama-server llama -m /m.gguf") == ["/usr/bin/llama-server", "-m", "/m.gguf"]


@pytest.mark.parametrize("prefix", [
    "numactl --preferred=1 --cpunodebind=1 --",
    "numactl -m 1 -N 1",  # numactl's own -m is --membind: never the model
    "/usr/bin/numactl --membind 1 --cpunodebind 1",
    "env CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=44",
    "/usr/bin/env -u LD_PRELOAD HF_HOME=/srv/hf",
    "env -- A=1",
    "taskset -c 22-43,66-87",
    "nice -n 5 numactl --preferred=1 --",
    "/usr/local/bin/strata-numa --",
])
def test_launcher_prefixes_are_passed_over(prefix: str) -> None:
    found = parsed(f"{prefix} {SERVER} --model /srv/m.gguf -c 4096")
    assert found == EngineArgs("/srv/m.gguf", "4096", None)


def test_numactl_short_options_are_its_own() -> None:
    words = engine_words(exec_words(f"numactl -m 1 -N 1 {SERVER} --port 1"))
    assert words == ["/opt/strata/serve/server.py", "--port", "1"]


def test_pythons_module_flag_is_no_model() -> None:
    found = parsed("/usr/bin/python3 -u -X dev -m vllm.entrypoints.openai.api_server --model /srv/hf")
    assert found.model == "/srv/hf"
    assert parsed("python3 -m llama_cpp.server").model is None
    # after -c, the program text; its words are not the interpreter's
    assert parsed("python3 -c pass --model /srv/m.gguf").model == "/srv/m.gguf"


def test_a_bare_folder_counts_when_it_holds_a_model() -> None:
    argv = ["vllm", "serve", "/srv/hf/Model", "--port", "8000"]
    assert parse_engine_args(argv).model is None
    assert parse_engine_args(argv, lambda p: p == "/srv/hf/Model").model == "/srv/hf/Model"


def test_relative_paths_resolve_against_the_working_folder() -> None:
    assert resolve("models/m.gguf", "/srv") == "/srv/models/m.gguf"
    assert resolve("../m.gguf", "/srv/app") == "/srv/m.gguf"
    assert resolve("/srv/./m.gguf", None) == "/srv/m.gguf"
    assert resolve("m.gguf", None) is None


UNIT = "[Service]\nWorkingDirectory={wd}\nExecStart=/usr/bin/llama-server -m {model} -c 4096\n"


def test_the_unit_reader_merges_dropins_and_knows_its_folder(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "/etc/systemd/system/strata.service": UNIT.format(wd="-/srv", model="models/a.gguf"),
        "/etc/systemd/system/strata.service.d/20-model.conf":
            "[Service]\nExecStart=\nExecStart=/usr/bin/llama-server -m models/b.gguf\n",
    })
    found = read_unit_command(Root(tmp_path), "strata.service")
    assert found is not None
    assert found.args.model == "models/b.gguf"
    assert (found.cwd, found.named_by) == ("/srv", "ExecStart in strata.service")


def test_a_unit_without_working_directory_starts_in_the_root(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/etc/systemd/system/strata.service": "[Service]\nExecStart=/bin/e -m m.gguf\n"})
    found = read_unit_command(Root(tmp_path), "strata.service")
    assert found is not None and found.cwd == "/"


def test_no_unit_file_is_no_command(tmp_path: Path) -> None:
    assert read_unit_command(Root(tmp_path), "strata.service") is None


def test_the_process_reader_takes_cmdline_and_cwd(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/77/cmdline": "llama-server\0-m\0m.gguf\0", "/proc/77/cwd": "->/srv/models"})
    found = read_process_command(Root(tmp_path), 77)
    assert found is not None
    assert (found.args.model, found.cwd) == ("m.gguf", "/srv/models")
    assert found.named_by == "the command line of PID 77"


def test_a_process_without_its_cwd_link_says_so(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/77/cmdline": "llama-server\0-m\0m.gguf\0"})
    found = read_process_command(Root(tmp_path), 77)
    assert found is not None and found.cwd is None
    assert found.cwd_why == "/proc/77/cwd cannot be read (No such file or directory)"
    assert read_process_command(Root(tmp_path), 78) is None


def test_a_model_folder_holds_config_and_safetensors(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/srv/hf/config.json": "{}", "/srv/hf/model-00001.safetensors": "",
                          "/srv/cfg/config.json": "{}"})
    root = Root(tmp_path)
    assert is_model_folder(root, "/srv/hf")
    assert not is_model_folder(root, "/srv/cfg")
    assert not is_model_folder(root, "/srv/none")
    assert not is_model_folder(root, "srv/hf")
