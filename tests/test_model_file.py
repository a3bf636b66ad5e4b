"""The model file's GGUF header: parsed from bytes (every malformed header a reason, never
an exception), read through Root in bounded prefixes, and checked against gguf-py's own
writer and reader."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata_doctor.facts.model_file import FIRST_READ, read_model
from strata_doctor.facts.model_gguf import GGML_TYPES, HEADER_BOUND, Gguf, Short, parse_gguf
from strata_doctor.root import Root
from tests.ggufbytes import (
    ARRAY,
    U32,
    gguf,
    kv,
    moe_header,
    tensor,
    text,
    token_array,
    u32,
    u32_array,
    write_sparse,
)


def parsed(data: bytes) -> Gguf:
    found = parse_gguf(data)
    assert isinstance(found, Gguf), found
    return found


def test_a_header_gives_its_metadata_and_tensors() -> None:
    found = parsed(moe_header())
    assert found.version == 3
    assert found.metadata["general.architecture"] == "qwen3moe"
    assert found.metadata["qwen3moe.block_count"] == 2
    first = found.tensors[0]
    assert (first.name, first.dims, first.type_name) == ("blk.0.ffn_gate_exps.weight", (512, 256, 4), "Q4_K")
    assert first.nbytes == 512 * 256 * 4 // 256 * 144
    assert found.end == len(moe_header())


@pytest.mark.parametrize(("data", "reason"), [
    (b"PK\x03\x04" + bytes(40), "not a GGUF file (magic b'PK\\x03\\x04')"),
    (b"PK", "not a GGUF file (magic b'PK')"),
    (gguf([], version=1), "GGUF version 1 (llama.cpp before August 2023): only versions 2 and 3 are read"),
    (b"GGUF" + struct.pack(">IQQ", 3, 0, 0),
     "a big-endian GGUF file (version 3): only little-endian files are read"),
    (gguf([], version=7), "unknown GGUF version 7: only versions 2 and 3 are read"),
    (gguf([], counts=(2**64 - 1, 0)),
     "the header claims 18,446,744,073,709,551,615 tensors, more than 64 MiB could hold"),
    (gguf([], counts=(0, 2**40)),
     "the header claims 1,099,511,627,776 metadata keys, more than 64 MiB could hold"),
    (gguf([kv("a", ARRAY, struct.pack("<IQ", U32, 2**62))]),
     "the header claims 4,611,686,018,427,387,904 array elements, more than 64 MiB could hold"),
    (gguf([b"\x02\x00\x00\x00\x00\x00\x00\x00\xff\xfe" + struct.pack("<II", U32, 1)]),
     "a metadata key at byte 32 is not UTF-8"),
    (gguf([kv("a", 13, b"")]), "unknown metadata value type 13 at byte 33"),
    (gguf([kv("a", ARRAY, struct.pack("<IQ", 13, 1))]), "unknown array element type 13 at byte 37"),
    (gguf([], [tensor("x", (1,) * 9, 0)]), "tensor 'x' has 9 dimensions (GGUF allows 4)"),
    (gguf([kv("a", ARRAY, struct.pack("<IQ", ARRAY, 1) * 5 + struct.pack("<IQ", U32, 0))]),
     "arrays nested over 4 deep at byte 85"),
])
def test_malformed_headers_are_reasons(data: bytes, reason: str) -> None:
    assert parse_gguf(data) == reason


def test_a_header_cut_anywhere_is_short_never_an_error() -> None:
    """Every prefix of a good header asks for more bytes than it has."""
    data = gguf([text("general.architecture", "llama"), u32_array("llama.x", [1, 2, 3]), token_array("t", 3)],
                [tensor("a", (32, 2), 8)])
    assert isinstance(parse_gguf(data), Gguf)
    for cut in range(len(data)):
        found = parse_gguf(data[:cut])
        assert isinstance(found, Short), (cut, found)
        assert found.need > cut


def test_a_string_longer_than_the_bytes_at_hand_asks_for_them() -> None:
    data = gguf([kv("a", 8, struct.pack("<Q", 5000) + b"abc")])
    assert parse_gguf(data) == Short(len(data) - 3 + 5000)


def test_an_unknown_ggml_type_has_no_size_not_zero() -> None:
    found = parsed(gguf([], [tensor("blk.0.ffn_up_exps.weight", (256, 4), 99), tensor("b", (256,), 4)]))
    assert [(t.type_name, t.nbytes) for t in found.tensors] == [("type 99", None), ("type 4", None)]


def test_a_first_dimension_of_no_whole_blocks_has_no_size() -> None:
    assert parsed(gguf([], [tensor("a", (100, 2), 12)])).tensors[0].nbytes is None


def test_integer_arrays_are_kept_short_and_string_arrays_walked() -> None:
    keys = [u32_array("kv", [4, 4, 0, 8]), token_array("tokens", 5), u32_array("big", [1] * 5000)]
    found = parsed(gguf(keys))
    assert found.metadata == {"kv": (4, 4, 0, 8), "tokens": None, "big": None}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(data: bytes) -> None:
    assert isinstance(parse_gguf(data), (Gguf, Short, str))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.sampled_from([2, 3]))
def test_random_bytes_after_a_good_start_never_raise(data: bytes, version: int) -> None:
    found = parse_gguf(b"GGUF" + struct.pack("<I", version) + data)
    assert isinstance(found, (Gguf, Short, str))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 1000), st.binary(min_size=1, max_size=8))
def test_a_good_header_with_bytes_changed_never_raises(at: int, junk: bytes) -> None:
    data = bytearray(moe_header(layers=1))
    at %= len(data)
    data[at:at + len(junk)] = junk
    assert isinstance(parse_gguf(bytes(data)), (Gguf, Short, str))


# -- read through Root -----------------------------------------------------------
def test_a_missing_model_is_a_reason(tmp_path: Path) -> None:
    assert read_model(Root(tmp_path), "/srv/models/none.gguf").reason == "missing"


def test_a_file_that_ends_inside_its_header_is_truncated(tmp_path: Path) -> None:
    data = moe_header()
    (tmp_path / "m.gguf").write_bytes(data[:300])
    found = read_model(Root(tmp_path), "/m.gguf")
    assert found.header is None
    assert found.reason.startswith("truncated: the header ends at byte ")
    assert found.reason.endswith(", the file has 300")


def test_a_header_over_the_bound_is_a_reason_after_one_read(tmp_path: Path) -> None:
    huge = gguf([kv("a", 8, struct.pack("<Q", 100 << 20))])
    write_sparse(tmp_path / "m.gguf", huge, 200 << 20)
    root = Root(tmp_path)
    assert read_model(root, "/m.gguf").reason == "header over 64 MiB"
    assert len(root.content("/m.gguf") or b"") == FIRST_READ


def test_a_long_tokenizer_doubles_the_prefix_until_the_header_fits(tmp_path: Path) -> None:
    """A header of about 2.6 MiB: prefixes of 1, 2 and 4 MiB; the 4 MiB one is kept."""
    body = gguf([text("general.architecture", "llama"), token_array("tokenizer.ggml.tokens", 200_000),
                 u32("llama.block_count", 2)], [tensor("a", (32,), 8)])
    assert 2 << 20 < len(body) < 4 << 20
    write_sparse(tmp_path / "m.gguf", body, 47 << 30)
    root = Root(tmp_path)
    found = read_model(root, "/m.gguf")
    assert found.reason == "" and found.header is not None
    assert found.header.block_count == 2
    assert len(root.content("/m.gguf") or b"") == 4 << 20
    assert HEADER_BOUND == 64 << 20


def test_per_layer_kv_heads_are_kept_per_layer(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(gguf([text("general.architecture", "jamba"),
                                            u32_array("jamba.attention.head_count_kv", [0, 8, 0, 8]),
                                            u32_array("jamba.attention.head_count", [32, 32, 32, 32])]))
    header = read_model(Root(tmp_path), "/m.gguf").header
    assert header is not None
    assert (header.head_count_kv, header.head_count_kv_layers, header.head_count) == (None, (0, 8, 0, 8), 32)


def test_a_split_model_reads_every_file_and_names_a_missing_one(tmp_path: Path) -> None:
    def split(number: int, layer: int) -> bytes:
        keys = [text("general.architecture", "llama"), u32("llama.block_count", 2)] if number == 1 else []
        keys += [kv("split.count", 2, struct.pack("<H", 2)), kv("split.no", 2, struct.pack("<H", number))]
        return gguf(keys,
                    [tensor(f"blk.{layer}.ffn_up_exps.weight", (256, 2, 2), 12)])

    (tmp_path / "m-00001-of-00002.gguf").write_bytes(split(1, 0))
    assert read_model(Root(tmp_path), "/m-00001-of-00002.gguf").reason == "m-00002-of-00002.gguf: missing"
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(split(2, 1))
    header = read_model(Root(tmp_path), "/m-00001-of-00002.gguf").header
    assert header is not None
    assert [t.name for t in header.tensors] == ["blk.0.ffn_up_exps.weight", "blk.1.ffn_up_exps.weight"]
    assert len(header.files) == 2


def test_the_ggml_type_table_is_gguf_pys() -> None:
    constants = pytest.importorskip("gguf.constants", reason="gguf-py (llama.cpp's writer) is not installed")
    theirs = {int(t): (t.name, block, size) for t, (block, size) in constants.GGML_QUANT_SIZES.items()}
    assert {k: v for k, v in GGML_TYPES.items() if k in theirs} == theirs
    assert not set(theirs) - set(GGML_TYPES)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(["m.gguf", "m.safetensors", "m"]))
def test_any_file_read_as_a_model_is_a_header_or_a_reason(data: bytes, name: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        Path(folder, name).write_bytes(data)
        found = read_model(Root(folder), f"/{name}")
    assert (found.header is None) == bool(found.reason)
