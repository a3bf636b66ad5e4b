"""safetensors models: shards written by safetensors itself, a folder with its index and
config.json, sized against numbers computed by hand; every malformed header a reason."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Dict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata_doctor.facts.model_file import read_model
from strata_doctor.facts.model_safetensors import (
    HEADER_BOUND,
    header_length,
    parse_config,
    parse_header,
    parse_index,
)
from strata_doctor.root import Root
from strata_doctor.rules.model_sizes import SizeFigure, arena_from, kv_from

CONFIG = {"model_type": "qwen3_vl_moe", "text_config": {
    "num_hidden_layers": 2, "num_key_value_heads": 4, "num_attention_heads": 16, "hidden_size": 64,
    "head_dim": 32, "max_position_embeddings": 8192, "num_experts": 2, "num_experts_per_tok": 1}}


def figure(found: object) -> SizeFigure:
    assert isinstance(found, SizeFigure), found
    return found


def save(path: Path, names: Dict[str, tuple[int, ...]]) -> None:
    numpy = pytest.importorskip("numpy", reason="numpy is not installed")
    st = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")
    path.parent.mkdir(parents=True, exist_ok=True)
    st.save_file({name: numpy.zeros(shape, dtype=numpy.float16) for name, shape in names.items()}, str(path))


def write_folder(folder: Path, config: Dict[str, Any] = CONFIG) -> int:
    """Two shards, an index naming them and a config.json; returns the routed bytes."""
    first = {"model.layers.0.mlp.experts.0.gate_proj.weight": (8, 64),
             "model.layers.0.mlp.experts.1.up_proj.weight": (8, 64),
             "model.layers.0.mlp.shared_expert.up_proj.weight": (8, 64),
             "model.layers.0.mlp.gate.weight": (2, 64),
             "model.layers.0.self_attn.q_proj.weight": (64, 64)}
    second = {"model.layers.1.mlp.experts.0.down_proj.weight": (64, 8),
              "model.layers.1.block_sparse_moe.experts.1.w2.weight": (64, 8),
              "model.layers.1.mlp.experts.gate_up_proj": (2, 64, 16)}
    save(folder / "model-00001-of-00002.safetensors", first)
    save(folder / "model-00002-of-00002.safetensors", second)
    weight_map = {name: "model-00001-of-00002.safetensors" for name in first}
    weight_map.update({name: "model-00002-of-00002.safetensors" for name in second})
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(config))
    return (4 * 8 * 64 + 2 * 64 * 16) * 2  # four 8 x 64 tensors and the fused 2 x 64 x 16, 2 bytes each


def test_a_folder_of_shards_is_sized_from_its_headers_and_config(tmp_path: Path) -> None:
    routed = write_folder(tmp_path / "srv" / "m")
    read = read_model(Root(tmp_path), "/srv/m")
    assert read.reason == ""
    header = read.header
    assert header is not None
    assert (header.format, header.architecture, header.block_count, header.expert_count) == \
        ("safetensors", "qwen3_vl_moe", 2, 2)
    assert len(header.files) == 2 and len(header.tensors) == 8
    arena = figure(arena_from(header))
    assert arena.bytes == routed == 8192
    assert arena.source == "the routed experts of /srv/m: 5 tensors in 2 layers, 8.00 KiB (8,192 bytes)"
    kv = figure(kv_from(header, 1000))
    assert kv.bytes == 2 * 4 * (32 + 32) * 2 * 1000
    assert kv.source == "2 layers x 4 K/V heads x (32 + 32) x 2 bytes (f16) x 1,000 tokens = 1000.00 KiB"


def test_a_lone_file_reads_the_config_beside_it(tmp_path: Path) -> None:
    save(tmp_path / "model.safetensors", {"model.layers.0.mlp.experts.0.up_proj.weight": (4, 4)})
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 8}))
    header = read_model(Root(tmp_path), "/model.safetensors").header
    assert header is not None
    assert (header.block_count, header.embedding_length, header.head_count_kv) == (1, 8, None)
    assert figure(arena_from(header)).bytes == 32


def test_a_folder_without_an_index_reads_its_shards(tmp_path: Path) -> None:
    save(tmp_path / "m" / "a.safetensors", {"model.layers.0.mlp.experts.0.up_proj.weight": (4, 4)})
    save(tmp_path / "m" / "b.safetensors", {"model.layers.1.mlp.experts.0.up_proj.weight": (4, 4)})
    header = read_model(Root(tmp_path), "/m").header
    assert header is not None and len(header.files) == 2
    assert read_model(Root(tmp_path), "/").reason == \
        "no model.safetensors.index.json and no .safetensors files in /"


def test_an_index_naming_a_missing_shard_says_which(tmp_path: Path) -> None:
    write_folder(tmp_path / "m")
    (tmp_path / "m" / "model-00002-of-00002.safetensors").unlink()
    assert read_model(Root(tmp_path), "/m").reason == "model-00002-of-00002.safetensors: missing"


def test_a_header_length_past_the_file_and_over_the_bound(tmp_path: Path) -> None:
    (tmp_path / "a.safetensors").write_bytes(struct.pack("<Q", 500) + b"{}")
    assert read_model(Root(tmp_path), "/a.safetensors").reason == \
        "a.safetensors: truncated: the header ends at byte 508, the file has 10"
    (tmp_path / "b.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    assert read_model(Root(tmp_path), "/b.safetensors").reason == \
        "b.safetensors: header over 16 MiB (9,223,372,036,854,775,808 bytes)"
    (tmp_path / "c.safetensors").write_bytes(b"\x01")
    assert read_model(Root(tmp_path), "/c.safetensors").reason == \
        "c.safetensors: truncated: the header ends at byte 8, the file has 1"
    assert HEADER_BOUND == 16 << 20


@pytest.mark.parametrize(("data", "reason"), [
    (b"[1, 2]", "the header is JSON list, not a mapping of tensors"),
    (b'"x"', "the header is JSON str, not a mapping of tensors"),
    (b"{", "the header is not JSON (Expecting property name enclosed in double quotes: line 1 column 2"
           " (char 1))"),
    (b"\xff{}", "the header is not UTF-8"),
    (b'{"a": 1}', "tensor 'a' is not {dtype, shape, data_offsets}"),
    (b'{"a": {"dtype": "F16", "shape": [2], "data_offsets": [4]}}',
     "tensor 'a' is not {dtype, shape, data_offsets}"),
    (b'{"a": {"dtype": "F16", "shape": [-2], "data_offsets": [0, 4]}}',
     "tensor 'a' is not {dtype, shape, data_offsets}"),
    (b'{"a": {"dtype": "F16", "shape": [2], "data_offsets": [8, 4]}}',
     "tensor 'a' ends (byte 4) before it begins (byte 8)"),
    (b"[" * 100_000 + b"]" * 100_000, None),
])
def test_a_header_that_is_not_the_expected_json_is_a_reason(data: bytes, reason: str | None) -> None:
    found = parse_header(data)
    assert isinstance(found, str)
    if reason is not None:
        assert found == reason


def test_metadata_is_left_out_and_sizes_come_from_the_offsets() -> None:
    data = (b'{"__metadata__": {"format": "pt"},'
            b' "a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}}')
    assert parse_header(data) == [("a", "BF16", (2, 3), 12)]


@pytest.mark.parametrize(("data", "reason"), [
    (b"{}", "the index has no weight_map naming its shards"),
    (b'{"weight_map": {"a": "../x.safetensors"}}',
     "the index names a shard that is not a file of its folder: '../x.safetensors'"),
    (b'{"weight_map": {"a": 3}}', "the index names a shard that is not a file of its folder: '3'"),
    (b"nope", "the index is not JSON (Expecting value: line 1 column 1 (char 0))"),
])
def test_an_index_that_names_no_plain_shards_is_a_reason(data: bytes, reason: str) -> None:
    assert parse_index(data) == reason


def test_config_values_of_the_wrong_type_are_left_out_and_text_config_wins() -> None:
    found = parse_config(json.dumps({"num_hidden_layers": "48", "hidden_size": True, "head_dim": 128,
                                     "text_config": {"head_dim": 64}, "n_routed_experts": 256}).encode())
    assert isinstance(found, dict)
    assert (found["block_count"], found["embedding_length"], found["key_length"], found["expert_count"]) == \
        (None, None, 64, 256)
    assert parse_config(b"[]") == "config.json is JSON list, not a mapping"


def test_a_broken_config_json_is_the_reason(tmp_path: Path) -> None:
    write_folder(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{")
    assert read_model(Root(tmp_path), "/m").reason.startswith("config.json: config.json is not JSON")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data: bytes) -> None:
    assert isinstance(parse_header(data), (list, str))
    assert isinstance(parse_index(data), (list, str))
    assert isinstance(parse_config(data), (dict, str))
    assert isinstance(header_length(data, len(data)), (int, str))


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                               max_size=3),
                    max_leaves=12))
def test_any_json_is_a_header_or_a_reason(value: Any) -> None:
    data = json.dumps({"t": value, "u": {"dtype": "F16", "shape": value, "data_offsets": value}}).encode()
    assert isinstance(parse_header(data), (list, str))
    assert isinstance(parse_index(json.dumps({"weight_map": value}).encode()), (list, str))
    assert isinstance(parse_config(json.dumps({"text_config": value, "num_hidden_layers": value}).encode()),
                      (dict, str))
