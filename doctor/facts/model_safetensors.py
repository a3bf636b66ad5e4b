"""safetensors headers and Hugging Face ``config.json``, parsed from bytes, never from a file.

A safetensors file opens with its header's length (8 bytes, little-endian), then the
header: JSON, ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{...}}``; the weights follow. A model folder names its shards in
``model.safetensors.index.json`` (``weight_map``: tensor -> file) and its shape in
``config.json`` (multimodal models nest the language model's in ``text_config``).
"""

import json
import struct
from typing import Any, Dict, List, Optional, Tuple, Union

HEADER_BOUND = 16 << 20
"""The longest safetensors header read (16 MiB): a shard of a 1,000-tensor model has
about 100 KiB; the format itself allows 100 MB."""
LENGTH_BYTES = 8

Tensor = Tuple[str, str, Tuple[int, ...], Optional[int]]
"""(name, dtype, shape, bytes) of one tensor."""

CONFIG_KEYS: Dict[str, Tuple[str, ...]] = {
    "block_count": ("num_hidden_layers", "n_layer", "num_layers"),
    "expert_count": ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"),
    "expert_used_count": ("num_experts_per_tok", "moe_topk", "num_experts_per_token"),
    "context_length": ("max_position_embeddings",),
    "head_count": ("num_attention_heads",),
    "head_count_kv": ("num_key_value_heads",),
    "key_length": ("head_dim",),
    "value_length": ("head_dim",),
    "embedding_length": ("hidden_size",),
    "kv_lora_rank": ("kv_lora_rank",),
    "rope_dimension": ("qk_rope_head_dim",),
}
"""A :class:`~strata_doctor.facts.model_file.ModelHeader` field -> the config.json keys
that say it, the first present winning."""


def header_length(first: bytes, file_size: int) -> Union[int, str]:
    """The JSON header's length from a file's first 8 bytes, or why it is not one to read
    (a file shorter than 8 bytes, a length past the end of the file or over the bound)."""
    if len(first) < LENGTH_BYTES:
        return f"truncated: the header ends at byte {LENGTH_BYTES}, the file has {len(first):,}"
    length: int = struct.unpack_from("<Q", first)[0]
    if length > HEADER_BOUND:
        return f"header over {HEADER_BOUND >> 20} MiB ({length:,} bytes)"
    if LENGTH_BYTES + length > file_size:
        return f"truncated: the header ends at byte {LENGTH_BYTES + length:,}, the file has {file_size:,}"
    return length


def parse_header(data: bytes) -> Union[List[Tensor], str]:
    """The tensors a safetensors header (the JSON after the length) lists, in its order,
    or a one-line reason the JSON is not a header (``__metadata__`` is left out)."""
    found, why = _json(data, "the header")
    if why:
        return why
    if not isinstance(found, dict):
        return f"the header is JSON {type(found).__name__}, not a mapping of tensors"
    tensors: List[Tensor] = []
    for name in found:
        if name == "__metadata__":
            continue
        tensor = _tensor(name, found[name])
        if isinstance(tensor, str):
            return tensor
        tensors.append(tensor)
    return tensors


def _tensor(name: str, entry: Any) -> Union[Tensor, str]:
    bad = f"tensor {name[:80]!r} is not {{dtype, shape, data_offsets}}"
    if not isinstance(entry, dict):
        return bad
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list):
        return bad
    if not _uints(shape) or not _uints(offsets) or len(offsets) != 2:
        return bad
    begin, end = offsets
    if end < begin:
        return f"tensor {name[:80]!r} ends (byte {end:,}) before it begins (byte {begin:,})"
    return name, dtype, tuple(shape), end - begin


def _uints(values: List[Any]) -> bool:
    return all(type(v) is int and v >= 0 for v in values)


def parse_index(data: bytes) -> Union[List[str], str]:
    """The shard file names ``model.safetensors.index.json`` names (sorted, each once), or
    why there are none to read: not JSON, no ``weight_map``, a name that is not a plain
    file name of this folder."""
    found, why = _json(data, "the index")
    if why:
        return why
    weight_map = found.get("weight_map") if isinstance(found, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        return "the index has no weight_map naming its shards"
    for shard in weight_map.values():  # each checked before a set of them: a list is no key
        if not _plain_name(shard):
            return f"the index names a shard that is not a file of its folder: {str(shard)[:80]!r}"
    return sorted(set(weight_map.values()))


def _plain_name(shard: Any) -> bool:
    """A file name of the index's own folder: no ``/``, no ``..``, no NUL."""
    return isinstance(shard, str) and shard not in ("", ".", "..") and "/" not in shard and "\0" not in shard


def parse_config(data: bytes) -> Union[Dict[str, Any], str]:
    """The fields of a ``config.json`` a header has (:data:`CONFIG_KEYS`, ``architecture``
    from ``model_type``, ``name`` from ``_name_or_path``): integers only, a value of
    another type left out; ``text_config``'s values win over the top level's."""
    found, why = _json(data, "config.json")
    if why:
        return why
    if not isinstance(found, dict):
        return f"config.json is JSON {type(found).__name__}, not a mapping"
    text = found.get("text_config")
    layers = [text, found] if isinstance(text, dict) else [found]
    fields: Dict[str, Any] = {}
    for field, keys in CONFIG_KEYS.items():
        fields[field] = _first_int(layers, keys)
    fields["architecture"] = _first_str(layers, "model_type")
    fields["name"] = _first_str([found], "_name_or_path")
    return fields


def _first_int(layers: List[Dict[str, Any]], keys: Tuple[str, ...]) -> Optional[int]:
    for layer in layers:
        for key in keys:
            value = layer.get(key)
            if type(value) is int and value >= 0:
                return value
    return None


def _first_str(layers: List[Dict[str, Any]], key: str) -> Optional[str]:
    for layer in layers:
        value = layer.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _json(data: bytes, what: str) -> Tuple[Any, str]:
    """The JSON ``data`` holds and an empty reason, or None and why it holds none."""
    try:
        return json.loads(data.decode("utf-8")), ""
    except UnicodeDecodeError:
        return None, f"{what} is not UTF-8"
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply to parse
        return None, f"{what} is not JSON ({(str(exc).splitlines() or [''])[0][:80]})"
