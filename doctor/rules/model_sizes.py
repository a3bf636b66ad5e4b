"""The engine's sizes from its model's header: the pinned expert arena (the routed
experts' tensors) and the pinned K/V cache (layers x K/V heads x head sizes x bytes per
element x tokens). Pure: a :class:`~strata_doctor.facts.model_file.ModelHeader` in, a
:class:`SizeFigure` (bytes, and a sentence in numbers the reader can redo) or a one-line
reason out (docs/model-sizes.md).
"""

import re
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

from strata_doctor.facts.model_file import ModelHeader, TensorInfo
from strata_doctor.facts.parse import format_bytes, format_count

GGUF_ROUTED = re.compile(r"^blk\.(\d+)\.ffn_(?:gate_up|gate|up|down)_(?:ch)?exps\.")
"""llama.cpp's routed-expert tensors (gguf-py ``MODEL_TENSOR.FFN_*_EXP``, ``FFN_*_CHEXP``),
weights, biases and scales alike; shared experts (``ffn_*_shexp``) and the router
(``ffn_gate_inp``) are not routed."""
SAFETENSORS_ROUTED = re.compile(
    r"(?:^|\.)layers\.(\d+)\.(?:mlp|block_sparse_moe|feed_forward|moe)\.experts\.(?:\d+\.)?"
    r"(?:gate_up_proj|gate_proj|up_proj|down_proj|w1|w2|w3)(?:[._]|$)"
)
"""Hugging Face routed experts: ``mlp.experts.E.{gate,up,down}_proj`` (Qwen, DeepSeek),
``block_sparse_moe.experts.E.w1/w2/w3`` (Mixtral), fused ``mlp.experts.gate_up_proj``
(gpt-oss, Llama 4), with their scales and biases; ``shared_expert(s)`` are not."""

CACHE_TYPES: Dict[str, Tuple[int, int]] = {
    "f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32),
    "q4_1": (20, 32), "q5_0": (22, 32), "q5_1": (24, 32), "iq4_nl": (18, 32),
}
"""llama.cpp's ``--cache-type-k``/``-v`` names -> (bytes, per elements): f16 is 2 bytes an
element, q8_0 34 bytes a block of 32."""


class SizeFigure(NamedTuple):
    """A size computed from a model's header, with how."""

    bytes: int
    """The size in bytes."""
    source: str
    """How it was computed, in numbers the reader can redo, e.g. ``48 layers x 4 K/V heads
    x (128 + 128) x 2 bytes (f16) x 33,792 tokens = 3.09 GiB``."""


def arena_from(header: ModelHeader) -> Union[SizeFigure, str]:
    """The routed experts' bytes (the arena): ``SizeFigure(bytes, "the routed experts of
    PATH: 48 layers x 3 tensors, 46.84 GiB (50,289,704,960 bytes)")``; or a reason: a dense
    model (no routed-expert tensors), a routed tensor of unknown size (never a partial sum).
    Layers at or past the header's layer count (DeepSeek's multi-token-prediction layer,
    which the engine does not load) are left out, and the sentence says so."""
    routed = routed_tensors(header)
    if not routed:
        return "no routed-expert tensors: a dense model has no expert arena"
    limit = header.block_count
    extra = _past(routed, limit)
    kept = [(layer, t) for layer, t in routed if layer not in extra]
    unknown = [t for _, t in kept if t.nbytes is None]
    if unknown:
        return f"the routed-expert tensor {unknown[0].name} has an unknown size ({unknown[0].dtype})"
    total = sum(t.nbytes or 0 for _, t in kept)
    source = f"the routed experts of {header.path}: {_layers_tensors(kept)}, {format_bytes(total)}"
    return SizeFigure(total, source + f" ({format_count(total)} bytes)" + _left_out(extra, limit))


def _past(routed: List[Tuple[int, TensorInfo]], limit: Optional[int]) -> List[int]:
    """The layers at or past the header's layer count (none when it gives none)."""
    return [] if limit is None else sorted({layer for layer, _ in routed if layer >= limit})


def _left_out(extra: List[int], limit: Optional[int]) -> str:
    """What the sentence says of layers past the header's count (none: nothing)."""
    if not extra or limit is None:
        return ""
    named = ", ".join(str(layer) for layer in extra)
    return f"; layer {named}, past the header's {_plural(limit, 'layer')}, left out"


def routed_tensors(header: ModelHeader) -> List[Tuple[int, TensorInfo]]:
    """(layer, tensor) of every routed-expert tensor of the header, in its order."""
    pattern = GGUF_ROUTED if header.format == "gguf" else SAFETENSORS_ROUTED
    found = ((pattern.search(t.name), t) for t in header.tensors)
    return [(int(match.group(1)), t) for match, t in found if match is not None]


def _layers_tensors(kept: List[Tuple[int, TensorInfo]]) -> str:
    """``48 layers x 3 tensors``, or ``18,432 tensors in 47 layers`` when layers differ."""
    per: Dict[int, int] = {}
    for layer, _ in kept:
        per[layer] = per.get(layer, 0) + 1
    counts = set(per.values())
    if len(counts) == 1:
        return f"{_plural(len(per), 'layer')} x {_plural(counts.pop(), 'tensor')}"
    return f"{_plural(len(kept), 'tensor')} in {_plural(len(per), 'layer')}"


def _plural(count: int, word: str) -> str:
    return f"{format_count(count)} {word}{'' if count == 1 else 's'}"


def kv_from(header: ModelHeader, context: Optional[int], cache_type: str = "f16") -> Union[SizeFigure, str]:
    """The K/V cache's bytes for ``context`` tokens (None: the model's trained context) in
    ``cache_type`` (:data:`CACHE_TYPES`, llama.cpp's ``--cache-type-k`` names):
    ``SizeFigure(bytes, "48 layers x 4 K/V heads x (128 + 128) x 2 bytes (f16) x 33,792
    tokens = 3.09 GiB")``; per-layer K/V head counts are summed over the layers; an MLA
    model (``kv_lora_rank``: DeepSeek-V2/V3) caches layers x (kv_lora_rank + rotary
    dimension), and the sentence says so. Else a one-line reason (an unknown cache type,
    a count the header does not give)."""
    cache = CACHE_TYPES.get(cache_type.lower())
    if cache is None:
        return f"unknown K/V cache type {cache_type!r} (one of {', '.join(CACHE_TYPES)})"
    tokens, told = _tokens(header, context)
    if tokens is None:
        return told
    layers = header.block_count
    if layers is None or layers <= 0:
        return "the header does not give the number of layers (block_count, num_hidden_layers)"
    if header.kv_lora_rank is not None:
        return _mla(header, layers, tokens, told, cache_type.lower(), cache)
    heads = _kv_heads(header, layers)
    if isinstance(heads, str):
        return heads
    head_total, heads_text = heads
    sizes = _head_sizes(header)
    if isinstance(sizes, str):
        return sizes
    key, value, sizes_text = sizes
    if key % cache[1] or value % cache[1]:
        return f"a head of {key} + {value} elements is not whole {cache_type} blocks of {cache[1]}"
    total = _bytes(head_total * (key + value) * tokens, cache)
    source = (f"{heads_text} x ({key} + {value}){sizes_text} x {_per_element(cache_type.lower(), cache)}"
              f" x {format_count(tokens)} tokens{told} = {format_bytes(total)}")
    return SizeFigure(total, source)


def _tokens(header: ModelHeader, context: Optional[int]) -> Tuple[Optional[int], str]:
    """The tokens to size, and what the sentence adds about them (or the reason)."""
    if context is not None:
        if context <= 0:
            return None, f"a context of {context} tokens has no K/V cache"
        return context, ""
    if header.context_length is None or header.context_length <= 0:
        return None, "no context length given, and the header gives none (context_length)"
    return header.context_length, " (the model's trained context)"


def _kv_heads(header: ModelHeader, layers: int) -> Union[Tuple[int, str], str]:
    """K/V heads summed over the layers, and how the sentence says it."""
    per_layer = header.head_count_kv_layers
    if per_layer:
        if len(per_layer) != layers:
            return f"the header gives K/V heads for {len(per_layer)} layers of {layers}"
        total = sum(per_layer)
        return total, f"{format_count(total)} K/V heads summed over {_plural(layers, 'layer')}"
    heads = header.head_count_kv
    said = ""
    if heads is None:
        heads = header.head_count
        if heads is None:
            return "the header gives no K/V head count (head_count_kv, num_key_value_heads)"
        said = f" (no K/V head count: as many as the {format_count(heads)} attention heads)"
    return layers * heads, f"{_plural(layers, 'layer')} x {_plural(heads, 'K/V head')}{said}"


def _head_sizes(header: ModelHeader) -> Union[Tuple[int, int, str], str]:
    """The key and value sizes per head, and what the sentence adds when they are derived
    (hidden size / attention heads)."""
    key, value = header.key_length, header.value_length
    if key is not None and value is not None:
        return key, value, ""
    hidden, heads = header.embedding_length, header.head_count
    if hidden is None or not heads or hidden % heads:
        return "the header gives no head size (key_length, head_dim) and no hidden size / heads to derive it"
    derived = hidden // heads
    said = f" (head size {format_count(hidden)} / {_plural(heads, 'head')})"
    return (key if key is not None else derived), (value if value is not None else derived), said


def _mla(header: ModelHeader, layers: int, tokens: int, told: str, name: str,
         cache: Tuple[int, int]) -> Union[SizeFigure, str]:
    rank, rope = header.kv_lora_rank or 0, header.rope_dimension
    if rope is None:
        return "an MLA model (kv_lora_rank) whose header gives no rotary dimension (rope.dimension_count)"
    if (rank + rope) % cache[1]:
        return f"an MLA row of {rank} + {rope} elements is not whole {name} blocks of {cache[1]}"
    total = _bytes(layers * (rank + rope) * tokens, cache)
    source = (f"MLA, the compressed K/V and the rotary key per layer: {_plural(layers, 'layer')} x"
              f" ({rank} + {rope}) x {_per_element(name, cache)} x {format_count(tokens)} tokens{told}"
              f" = {format_bytes(total)}")
    return SizeFigure(total, source)


def _bytes(elements: int, cache: Tuple[int, int]) -> int:
    """Bytes of ``elements`` (whole blocks: the callers checked) in the cache's type."""
    size, per = cache
    return elements // per * size


def _per_element(name: str, cache: Tuple[int, int]) -> str:
    size, per = cache
    return f"{size} bytes ({name})" if per == 1 else f"{size}/{per} bytes ({name})"
