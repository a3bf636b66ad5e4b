"""The engine's model file, read for its header only: the GGUF or safetensors header
(metadata and tensor infos) says how large the routed experts are and how large a K/V
cache each token needs, so the arena and the K/V cache need not be given by hand
(:mod:`strata_doctor.rules.model_sizes` turns a :class:`ModelHeader` into sizes).

Never the weights: a GGUF header is read as a prefix (:data:`FIRST_READ`, doubled while
the header runs on, up to :data:`HEADER_BOUND`), a safetensors shard as its 8-byte length
and the JSON after it, through :meth:`Root.read_head <strata_doctor.root.Root.read_head>`,
so a bundle keeps exactly the prefix that was read (docs/model-sizes.md).
"""

import posixpath
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from strata_doctor.facts.model_gguf import HEADER_BOUND, Gguf, Short, Value, parse_gguf
from strata_doctor.facts.model_safetensors import (
    LENGTH_BYTES,
    header_length,
    parse_config,
    parse_header,
    parse_index,
)
from strata_doctor.root import Root

FIRST_READ = 1 << 20
"""The first prefix of a GGUF file read (1 MiB): most headers fit; a tokenizer's arrays
can take several MiB, and then the prefix is doubled, up to :data:`HEADER_BOUND` (64 MiB)."""
INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
MAX_SPLITS = 256
"""The most files of a split GGUF model read (llama.cpp's gguf-split names
``NAME-00001-of-00005.gguf``); a larger count is a reason."""
SPLIT_NAME = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")

class TensorInfo(NamedTuple):
    """One tensor of a model file, as its header describes it."""

    name: str
    """Its name, e.g. ``blk.3.ffn_up_exps.weight`` or ``model.layers.3.mlp.experts.7.up_proj.weight``."""
    dtype: str
    """Its type's name: a ggml type (``Q4_K``, ``F16``; ``type 99`` for an id the table
    does not know) or a safetensors dtype (``BF16``, ``F8_E4M3``)."""
    shape: Tuple[int, ...]
    """Its dimensions as the file lists them (GGUF: innermost first)."""
    nbytes: Optional[int]
    """Its size in bytes; None when its type is unknown (never 0 for unknown)."""


class ModelHeader(NamedTuple):
    """What a model's header says; every metadata field is None when the file does not say it."""

    path: str
    """The host path given (a file, or a folder of safetensors shards)."""
    format: str
    """``gguf`` or ``safetensors``."""
    files: Tuple[str, ...]
    """The host paths whose headers were read (the shards of a folder; the file itself)."""
    architecture: Optional[str]
    """``general.architecture`` (GGUF) or ``model_type`` (config.json)."""
    name: Optional[str]
    """``general.name``, or config.json's ``_name_or_path``."""
    block_count: Optional[int]
    """Layers: ``{arch}.block_count`` / ``num_hidden_layers``."""
    expert_count: Optional[int]
    """Routed experts per layer: ``{arch}.expert_count`` / ``num_experts``,
    ``num_local_experts``, ``n_routed_experts``."""
    expert_used_count: Optional[int]
    """Experts a token uses: ``{arch}.expert_used_count`` / ``num_experts_per_tok``."""
    context_length: Optional[int]
    """Trained context: ``{arch}.context_length`` / ``max_position_embeddings``."""
    head_count: Optional[int]
    """Attention heads: ``{arch}.attention.head_count`` / ``num_attention_heads`` (None
    when a per-layer array differs between layers)."""
    head_count_kv: Optional[int]
    """K/V heads: ``{arch}.attention.head_count_kv`` / ``num_key_value_heads``; None when
    given per layer with different values (see :attr:`head_count_kv_layers`)."""
    head_count_kv_layers: Tuple[int, ...]
    """K/V heads of each layer, when the file gives them per layer (an array); else empty."""
    key_length: Optional[int]
    """Key size per head: ``{arch}.attention.key_length`` / ``head_dim``."""
    value_length: Optional[int]
    """Value size per head: ``{arch}.attention.value_length`` / ``head_dim``."""
    embedding_length: Optional[int]
    """Hidden size: ``{arch}.embedding_length`` / ``hidden_size``."""
    kv_lora_rank: Optional[int]
    """MLA's compressed K/V size (DeepSeek-V2/V3): ``{arch}.attention.kv_lora_rank`` / ``kv_lora_rank``."""
    rope_dimension: Optional[int]
    """The rotary part of a head: ``{arch}.rope.dimension_count`` / ``qk_rope_head_dim``."""
    tensors: Tuple[TensorInfo, ...]
    """Every tensor the header lists, in the file's order (shard after shard)."""


class ModelRead(NamedTuple):
    """What reading a model's header gave: a header, or why there is none."""

    header: Optional[ModelHeader]
    """The header; None when it could not be read."""
    reason: str
    """Why there is no header (``missing``, ``not a GGUF file (magic b'PK\\x03\\x04')``,
    ``header over 64 MiB``, ``truncated: the header ends at byte N, the file has M``);
    empty when there is one."""


def read_model(root: Root, host_path: str) -> ModelRead:
    """The header of the model at ``host_path``: a GGUF file (the first of a split model's
    files reads the others' headers too), a ``.safetensors`` file (with the
    ``config.json`` beside it, if any), or a folder of safetensors shards with its
    ``config.json``. Never raises for what the files hold; only headers are read
    (:meth:`Root.read_head <strata_doctor.root.Root.read_head>`, so a bundle keeps them).

    Returns ``ModelRead(header, "")``, or ``ModelRead(None, reason)`` with a one-line
    reason (``missing``, ``not a GGUF file (magic b'PK\\x03\\x04')``, ``header over 64 MiB``,
    ``truncated: the header ends at byte N, the file has M``, ``X.safetensors: ...``).
    """
    if root.is_dir(host_path):
        return _read_folder(root, host_path.rstrip("/") or "/")
    if host_path.endswith(".safetensors"):
        return _read_safetensors(root, host_path, [host_path], posixpath.dirname(host_path))
    found = _read_gguf(root, host_path)
    if isinstance(found, str):
        return ModelRead(None, found)
    splits = found.metadata.get("split.count")
    if type(splits) is int and splits > 1:
        return _read_splits(root, host_path, found, splits)
    return ModelRead(_gguf_header(host_path, [host_path], found, list(found.tensors)), "")


def _read_gguf(root: Root, host_path: str) -> Union[Gguf, str]:
    """One GGUF file's header, read in prefixes doubled from :data:`FIRST_READ` while it
    runs on, to :data:`HEADER_BOUND`; or why it cannot be had."""
    size = FIRST_READ
    while True:
        data = root.read_head(host_path, size)
        if data is None:
            return root.reads.get(host_path) or "unreadable"
        parsed = parse_gguf(data)
        if not isinstance(parsed, Short):
            return parsed
        if len(data) < size:  # the whole file is at hand: it ends inside its header
            return f"truncated: the header ends at byte {parsed.need:,}, the file has {len(data):,}"
        if size >= HEADER_BOUND or parsed.need > HEADER_BOUND:
            return f"header over {HEADER_BOUND >> 20} MiB"
        larger = size * 2
        while larger < parsed.need:
            larger *= 2
        size = min(larger, HEADER_BOUND)


def _read_splits(root: Root, host_path: str, first: Gguf, count: int) -> ModelRead:
    """A split GGUF model: every file's tensors (``NAME-0000K-of-0000N.gguf``)."""
    named = SPLIT_NAME.match(posixpath.basename(host_path))
    if named is None or int(named.group(2)) != 1 or int(named.group(3)) != count:
        return ModelRead(None, f"split.count is {count:,}, and the file is not named as the first of"
                               f" {count:,} (NAME-00001-of-{count:05d}.gguf)")
    if count > MAX_SPLITS:
        return ModelRead(None, f"split.count is {count:,}, over the {MAX_SPLITS} files read")
    folder = posixpath.dirname(host_path)
    files, tensors = [host_path], list(first.tensors)
    for number in range(2, count + 1):
        path = posixpath.join(folder, f"{named.group(1)}-{number:05d}-of-{count:05d}.gguf")
        found = _read_gguf(root, path)
        if isinstance(found, str):
            return ModelRead(None, f"{posixpath.basename(path)}: {found}")
        files.append(path)
        tensors += found.tensors
    return ModelRead(_gguf_header(host_path, files, first, tensors), "")


def _gguf_header(host_path: str, files: List[str], gguf: Gguf, tensors: List[Any]) -> ModelHeader:
    meta = gguf.metadata
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    name = meta.get("general.name")

    def number(key: str) -> Optional[int]:
        return _one(meta.get(f"{arch}.{key}")) if arch else None

    kv_heads = meta.get(f"{arch}.attention.head_count_kv") if arch else None
    return ModelHeader(
        host_path, "gguf", tuple(files), arch, name if isinstance(name, str) else None,
        number("block_count"), number("expert_count"), number("expert_used_count"),
        number("context_length"), number("attention.head_count"), _one(kv_heads),
        kv_heads if isinstance(kv_heads, tuple) else (),
        number("attention.key_length"), number("attention.value_length"), number("embedding_length"),
        number("attention.kv_lora_rank"), number("rope.dimension_count"),
        tuple(TensorInfo(t.name, t.type_name, t.dims, t.nbytes) for t in tensors),
    )


def _one(value: Value) -> Optional[int]:
    """An integer metadata value; a per-layer array's value when every layer has the same;
    None for anything else (a float, a string, an array that differs)."""
    if isinstance(value, tuple):
        return value[0] if value and len(set(value)) == 1 else None
    return value if type(value) is int else None


def _read_folder(root: Root, folder: str) -> ModelRead:
    index_path = posixpath.join(folder, INDEX)
    index = root.read_bytes(index_path)
    if index is not None:
        names = parse_index(index)
        if isinstance(names, str):
            return ModelRead(None, f"{INDEX}: {names}")
    else:
        names = [n for n in root.listdir(folder) if n.endswith(".safetensors")]
        if not names:
            return ModelRead(None, f"no {INDEX} and no .safetensors files in {folder}")
    paths = [posixpath.join(folder, n) for n in names]
    return _read_safetensors(root, folder, paths, folder)


def _read_safetensors(root: Root, host_path: str, paths: List[str], folder: str) -> ModelRead:
    tensors: List[TensorInfo] = []
    for path in paths:
        found = _read_shard(root, path)
        if isinstance(found, str):
            return ModelRead(None, f"{posixpath.basename(path)}: {found}")
        tensors += found
    config_path = posixpath.join(folder, CONFIG)
    raw = root.read_bytes(config_path)
    fields: Dict[str, Any] = {}
    if raw is not None:
        parsed = parse_config(raw)
        if isinstance(parsed, str):
            return ModelRead(None, f"{CONFIG}: {parsed}")
        fields = parsed
    get = fields.get
    header = ModelHeader(
        host_path, "safetensors", tuple(paths), get("architecture"), get("name"),
        get("block_count"), get("expert_count"), get("expert_used_count"), get("context_length"),
        get("head_count"), get("head_count_kv"), (), get("key_length"), get("value_length"),
        get("embedding_length"), get("kv_lora_rank"), get("rope_dimension"), tuple(tensors),
    )
    return ModelRead(header, "")


def _read_shard(root: Root, host_path: str) -> Union[List[TensorInfo], str]:
    """One shard's tensors: its 8-byte length, then exactly the header it gives."""
    first = root.read_head(host_path, LENGTH_BYTES)
    if first is None:
        return root.reads.get(host_path) or "unreadable"
    length = header_length(first, root.heads[host_path].size)
    if isinstance(length, str):
        return length
    data = root.read_head(host_path, LENGTH_BYTES + length)
    end = LENGTH_BYTES + length
    if data is None or len(data) < end:  # shorter now than its stat said
        return f"truncated: the header ends at byte {end:,}, the file has {len(data or b''):,}"
    found = parse_header(data[LENGTH_BYTES:])
    if isinstance(found, str):
        return found
    return [TensorInfo(*tensor) for tensor in found]
