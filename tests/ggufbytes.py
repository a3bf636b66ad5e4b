"""GGUF headers written byte by byte, so the parser's tests can write every malformed
header a file can hold (the real writer, gguf-py, writes only good ones)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterable, Sequence, Tuple

U32, F32, STRING, ARRAY, U64 = 4, 6, 8, 9, 10


def string(text: bytes) -> bytes:
    """A GGUF string: its length (uint64), then its bytes."""
    return struct.pack("<Q", len(text)) + text


def kv(key: str, kind: int, payload: bytes) -> bytes:
    """One metadata key/value: the key, the value type, the value's bytes."""
    return string(key.encode()) + struct.pack("<I", kind) + payload


def u32(key: str, value: int) -> bytes:
    return kv(key, U32, struct.pack("<I", value))


def text(key: str, value: str) -> bytes:
    return kv(key, STRING, string(value.encode()))


def u32_array(key: str, values: Sequence[int]) -> bytes:
    body = b"".join(struct.pack("<I", v) for v in values)
    return kv(key, ARRAY, struct.pack("<IQ", U32, len(values)) + body)


def token_array(key: str, count: int) -> bytes:
    """A tokenizer's array of ``count`` strings (``t0``, ``t1``...)."""
    body = b"".join(string(f"t{i}".encode()) for i in range(count))
    return kv(key, ARRAY, struct.pack("<IQ", STRING, count) + body)


def tensor(name: str, dims: Sequence[int], type_id: int, offset: int = 0) -> bytes:
    """One tensor info: name, n_dims, dims (innermost first), ggml type, offset."""
    packed = b"".join(struct.pack("<Q", d) for d in dims)
    return string(name.encode()) + struct.pack("<I", len(dims)) + packed + struct.pack("<IQ", type_id, offset)


def gguf(kvs: Iterable[bytes], tensors: Iterable[bytes] = (), version: int = 3,
         counts: Tuple[int, int] = (-1, -1)) -> bytes:
    """A whole header; ``counts`` (tensors, keys) overrides the counts it claims."""
    kvs, tensors = list(kvs), list(tensors)
    n_tensors = len(tensors) if counts[0] < 0 else counts[0]
    n_kvs = len(kvs) if counts[1] < 0 else counts[1]
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kvs) + b"".join(kvs) + b"".join(tensors)


def moe_header(arch: str = "qwen3moe", layers: int = 2, experts: int = 4) -> bytes:
    """A small MoE model: per layer three routed-expert tensors (Q4_K, Q4_K, Q8_0), a
    shared expert, the router and an F16 attention tensor."""
    kvs = [text("general.architecture", arch), text("general.name", "Tiny MoE"),
           u32(f"{arch}.block_count", layers), u32(f"{arch}.expert_count", experts),
           u32(f"{arch}.expert_used_count", 2), u32(f"{arch}.context_length", 4096),
           u32(f"{arch}.attention.head_count", 8), u32(f"{arch}.attention.head_count_kv", 2),
           u32(f"{arch}.attention.key_length", 64), u32(f"{arch}.attention.value_length", 64),
           u32(f"{arch}.embedding_length", 512)]
    infos = []
    for layer in range(layers):
        infos += [tensor(f"blk.{layer}.ffn_gate_exps.weight", (512, 256, experts), 12),
                  tensor(f"blk.{layer}.ffn_up_exps.weight", (512, 256, experts), 12),
                  tensor(f"blk.{layer}.ffn_down_exps.weight", (256, 512, experts), 8),
                  tensor(f"blk.{layer}.ffn_up_shexp.weight", (512, 256), 12),
                  tensor(f"blk.{layer}.ffn_gate_inp.weight", (512, experts), 0),
                  tensor(f"blk.{layer}.attn_q.weight", (512, 512), 1)]
    return gguf(kvs, infos)


MOE_ARENA = 2 * 4 * (2 * 512 * 256 // 256 * 144 + 256 * 512 // 32 * 34)
"""What :func:`moe_header`'s defaults hold in routed experts, by hand: 2 layers x 4
experts x (two Q4_K tensors of 512 x 256, 144 bytes a block of 256; one Q8_0 of 256 x 512,
34 bytes a block of 32)."""


def write_sparse(path: Path, header: bytes, size: int) -> Path:
    """``header`` at the start of a sparse file of ``size`` bytes (no GiBs written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(size)
    return path
