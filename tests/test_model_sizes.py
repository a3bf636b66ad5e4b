"""The arena and the K/V cache from a model's header: real GGUF files written by gguf-py
(llama.cpp's own writer) and real safetensors folders written by safetensors, sized and
checked against hand-computed numbers and against gguf-py's own reader."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from strata_doctor.facts.model_file import ModelHeader, TensorInfo, read_model
from strata_doctor.root import Root
from strata_doctor.rules.model_sizes import CACHE_TYPES, SizeFigure, arena_from, kv_from
from tests.ggufbytes import MOE_ARENA, moe_header

SEED_ARENA = 50_289_704_960
"""44 layers x 128 experts x (2 x Q4_K 2,048 x 1,760 + Q8_0 1,760 x 2,048) + 4 layers x
128 experts x 3 x Q8_0 2,048 x 1,760: 46.84 GiB, the seed host's arena."""
SEED_KV = 48 * 4 * (128 + 128) * 2 * 33_792
"""3,321,888,768 bytes: 3.09 GiB, the seed host's K/V cache."""


def figure(found: object) -> SizeFigure:
    assert isinstance(found, SizeFigure), found
    return found


def write_seed_gguf(path: Path, kv_heads: object = 4) -> Path:
    """The seed host's model as gguf-py writes it: the header and tensor infos, then a
    sparse file as long as the data would be (no GiBs written)."""
    gguf = pytest.importorskip("gguf", reason="gguf-py (llama.cpp's writer) is not installed")
    np = pytest.importorskip("numpy", reason="numpy is not installed")
    quant = gguf.GGMLQuantizationType
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "qwen3moe")
    writer.add_name("Seed MoE")
    writer.add_block_count(48)
    writer.add_expert_count(128)
    writer.add_expert_used_count(8)
    writer.add_context_length(40_960)
    writer.add_embedding_length(2048)
    writer.add_head_count(32)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(128)
    writer.add_value_length(128)
    writer.add_token_list([f"t{i}" for i in range(2000)])
    total = 0
    for layer in range(48):
        kind = quant.Q4_K if layer < 44 else quant.Q8_0  # numpy order: ggml's dims reversed
        for name, shape, q in (("ffn_gate_exps", (128, 1760, 2048), kind),
                               ("ffn_up_exps", (128, 1760, 2048), kind),
                               ("ffn_down_exps", (128, 2048, 1760), quant.Q8_0),
                               ("ffn_up_shexp", (1760, 2048), kind), ("attn_q", (4096, 2048), quant.F16)):
            block, size = gguf.GGML_QUANT_SIZES[q]
            nbytes = int(np.prod(shape)) // block * size
            writer.add_tensor_info(f"blk.{layer}.{name}.weight", shape, np.float32, nbytes, raw_dtype=q)
            total += nbytes + (-nbytes % 32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size + (-size % 32) + total)
    return path


def test_the_seed_model_sizes_as_the_seed_host_configures_them(tmp_path: Path) -> None:
    path = write_seed_gguf(tmp_path / "srv" / "models" / "seed.gguf")
    read = read_model(Root(tmp_path), "/srv/models/seed.gguf")
    assert read.reason == ""
    header = read.header
    assert header is not None
    assert (header.architecture, header.name, header.block_count, header.expert_count) == \
        ("qwen3moe", "Seed MoE", 48, 128)
    arena = figure(arena_from(header))
    assert arena.bytes == SEED_ARENA
    assert arena.source == ("the routed experts of /srv/models/seed.gguf: 48 layers x 3 tensors, 46.84 GiB"
                            " (50,289,704,960 bytes)")
    kv = figure(kv_from(header, 33_792))
    assert kv.bytes == SEED_KV
    assert kv.source == "48 layers x 4 K/V heads x (128 + 128) x 2 bytes (f16) x 33,792 tokens = 3.09 GiB"
    assert path.stat().st_size > 47 << 30


def test_every_tensor_size_is_gguf_pys_own(tmp_path: Path) -> None:
    path = write_seed_gguf(tmp_path / "seed.gguf")
    gguf = pytest.importorskip("gguf")
    theirs = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors}
    header = read_model(Root(tmp_path), "/seed.gguf").header
    assert header is not None
    assert {t.name: t.nbytes for t in header.tensors} == theirs
    assert len(theirs) == 48 * 5


def test_per_layer_kv_heads_from_gguf_py_are_summed(tmp_path: Path) -> None:
    write_seed_gguf(tmp_path / "seed.gguf", kv_heads=[4, 0] * 24)
    header = read_model(Root(tmp_path), "/seed.gguf").header
    assert header is not None
    kv = figure(kv_from(header, 1024, "q8_0"))
    assert kv.bytes == 96 * 256 * 34 // 32 * 1024
    assert kv.source == ("96 K/V heads summed over 48 layers x (128 + 128) x 34/32 bytes (q8_0) x 1,024"
                         " tokens = 25.50 MiB")


# -- the rules on headers made by hand --------------------------------------------
def header(**fields: Any) -> ModelHeader:
    values: Dict[str, Any] = {name: None for name in ModelHeader._fields}
    values.update(path="/m.gguf", format="gguf", files=("/m.gguf",), head_count_kv_layers=(), tensors=())
    values.update(fields)
    return ModelHeader(**values)


def tensors(*items: tuple[str, Optional[int]]) -> tuple[TensorInfo, ...]:
    return tuple(TensorInfo(name, "type 99" if size is None else "Q8_0", (32,), size) for name, size in items)


def test_routed_experts_only_and_every_name_llama_cpp_gives_them() -> None:
    made = header(tensors=tensors(("blk.0.ffn_gate_exps.weight", 10), ("blk.0.ffn_up_exps.weight", 20),
                                  ("blk.0.ffn_down_exps.weight", 30), ("blk.0.ffn_gate_up_exps.weight", 40),
                                  ("blk.0.ffn_down_exps.bias", 1), ("blk.1.ffn_up_chexps.weight", 5),
                                  ("blk.0.ffn_up_shexp.weight", 1000), ("blk.0.ffn_gate_inp.weight", 1000),
                                  ("blk.0.exp_probs_b.bias", 1000), ("blk.0.attn_q.weight", 1000)))
    arena = figure(arena_from(made))
    assert arena.bytes == 106
    assert arena.source == "the routed experts of /m.gguf: 6 tensors in 2 layers, 106 B (106 bytes)"


def test_a_dense_model_has_no_arena_and_an_unknown_type_no_partial_sum() -> None:
    assert arena_from(header(tensors=tensors(("blk.0.ffn_up.weight", 10)))) == \
        "no routed-expert tensors: a dense model has no expert arena"
    unknown = header(tensors=tensors(("blk.0.ffn_up_exps.weight", 10), ("blk.1.ffn_up_exps.weight", None)))
    assert arena_from(unknown) == \
        "the routed-expert tensor blk.1.ffn_up_exps.weight has an unknown size (type 99)"


def test_a_layer_past_the_count_is_left_out_and_said() -> None:
    made = header(block_count=1,
                  tensors=tensors(("blk.0.ffn_up_exps.weight", 10), ("blk.1.ffn_up_exps.weight", 7)))
    assert figure(arena_from(made)).source.endswith("; layer 1, past the header's 1 layer, left out")
    assert figure(arena_from(made)).bytes == 10


def test_the_small_header_written_byte_by_byte(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(moe_header())
    made = read_model(Root(tmp_path), "/m.gguf").header
    assert made is not None
    assert figure(arena_from(made)).bytes == MOE_ARENA
    assert figure(kv_from(made, None)).source == \
        ("2 layers x 2 K/V heads x (64 + 64) x 2 bytes (f16) x 4,096 tokens (the model's trained context)"
         " = 4.00 MiB")


@pytest.mark.parametrize(("cache", "bytes_per_32"), [("f32", 128), ("F16", 64), ("bf16", 64), ("q8_0", 34),
                                                     ("q4_0", 18), ("q4_1", 20), ("q5_0", 22), ("q5_1", 24),
                                                     ("iq4_nl", 18)])
def test_each_cache_type_sizes_its_elements(cache: str, bytes_per_32: int) -> None:
    made = header(block_count=2, head_count_kv=2, key_length=64, value_length=32)
    assert figure(kv_from(made, 10, cache)).bytes == 2 * 2 * 96 * 10 * bytes_per_32 // 32
    assert len(CACHE_TYPES) == 9


@pytest.mark.parametrize(("fields", "context", "cache", "reason"), [
    ({}, 10, "q3_k",
     "unknown K/V cache type 'q3_k' (one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)"),
    ({"block_count": 2}, None, "f16", "no context length given, and the header gives none (context_length)"),
    ({}, 10, "f16", "the header does not give the number of layers (block_count, num_hidden_layers)"),
    ({"block_count": 2, "key_length": 8, "value_length": 8}, 10, "f16",
     "the header gives no K/V head count (head_count_kv, num_key_value_heads)"),
    ({"block_count": 2, "head_count_kv": 2}, 10, "f16",
     "the header gives no head size (key_length, head_dim) and no hidden size / heads to derive it"),
    ({"block_count": 2, "head_count_kv": 2, "key_length": 40, "value_length": 40}, 10, "q8_0",
     "a head of 40 + 40 elements is not whole q8_0 blocks of 32"),
    ({"block_count": 2, "head_count_kv_layers": (1, 2, 3)}, 10, "f16",
     "the header gives K/V heads for 3 layers of 2"),
    ({"block_count": 2, "kv_lora_rank": 512}, 10, "f16",
     "an MLA model (kv_lora_rank) whose header gives no rotary dimension (rope.dimension_count)"),
    ({"block_count": 2}, 0, "f16", "a context of 0 tokens has no K/V cache"),
])
def test_what_the_header_cannot_size_is_a_reason(fields: Dict[str, Any], context: Optional[int], cache: str,
                                                 reason: str) -> None:
    assert kv_from(header(**fields), context, cache) == reason


def test_derived_head_sizes_and_absent_kv_heads_are_said() -> None:
    made = header(block_count=2, head_count=32, embedding_length=4096)
    kv = figure(kv_from(made, 100))
    assert kv.bytes == 2 * 32 * 256 * 2 * 100
    assert kv.source == ("2 layers x 32 K/V heads (no K/V head count: as many as the 32 attention heads) x"
                         " (128 + 128) (head size 4,096 / 32 heads) x 2 bytes (f16) x 100 tokens = 3.12 MiB")


def test_mla_caches_the_latent_and_the_rotary_key_and_says_so() -> None:
    made = header(block_count=61, head_count_kv=128, key_length=192, value_length=128, kv_lora_rank=512,
                  rope_dimension=64)
    kv = figure(kv_from(made, 32_768))
    assert kv.bytes == 61 * (512 + 64) * 2 * 32_768
    assert kv.source == ("MLA, the compressed K/V and the rotary key per layer: 61 layers x (512 + 64)"
                         " x 2 bytes (f16) x 32,768 tokens = 2.14 GiB")


def test_every_value_type_gguf_py_writes_is_parsed_as_its_reader_reads_it(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf", reason="gguf-py (llama.cpp's writer) is not installed")
    from strata_doctor.facts.model_gguf import Gguf, parse_gguf

    path = tmp_path / "kinds.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint8("k.u8", 200)
    writer.add_int8("k.i8", -5)
    writer.add_uint16("k.u16", 60_000)
    writer.add_int16("k.i16", -30_000)
    writer.add_int32("k.i32", -2)
    writer.add_uint64("k.u64", 2**40)
    writer.add_int64("k.i64", -(2**40))
    writer.add_float32("k.f32", 0.5)
    writer.add_float64("k.f64", 0.25)
    writer.add_bool("k.bool", True)
    writer.add_string("k.str", "héllo")
    writer.add_array("k.ints", [1, 2, 3])
    writer.add_array("k.floats", [0.5, 1.5])
    writer.add_array("k.strs", ["a", "bc"])
    writer.add_array("k.nested", [[1, 2], [3]])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    found = parse_gguf(path.read_bytes())
    assert isinstance(found, Gguf)
    theirs = gguf.GGUFReader(str(path)).fields
    assert set(found.metadata) == {k for k in theirs if not k.startswith("GGUF.")}  # theirs: the counts too
    assert {k: v for k, v in found.metadata.items() if k.startswith("k.")} == {
        "k.u8": 200, "k.i8": -5, "k.u16": 60_000, "k.i16": -30_000, "k.i32": -2, "k.u64": 2**40,
        "k.i64": -(2**40), "k.f32": 0.5, "k.f64": 0.25, "k.bool": True, "k.str": "héllo", "k.ints": (1, 2, 3),
        "k.floats": None, "k.strs": None, "k.nested": None}
    assert found.end <= os.path.getsize(path) < found.end + 32  # the header, then padding to 32
