"""The engine's model file, read for its header only: the GGUF or safetensors header
(metadata and tensor infos) says how large the routed experts are and how large a K/V
cache each token needs, so the arena and the K/V cache need not be given by hand
(:mod:`strata_doctor.rules.model_sizes` turns a :class:`ModelHeader` into sizes).

Never the weights: a GGUF header is read as a prefix (:data:`FIRST_READ`, doubled while
the header runs on, up to :data:`HEADER_BOUND`), a safetensors shard as its 8-byte length
and the JSON after it, through :meth:`Root.read_head <strata_doctor.root.Root.read_head>`,
so a bundle keeps exactly the prefix that was read (docs/model-sizes.md).
"""

from typing import NamedTuple, Optional, Tuple

from strata_doctor.root import Root

FIRST_READ = 1 << 20
"""The first prefix of a GGUF file read (1 MiB): most headers fit; a tokenizer's arrays
can take several MiB, and then the prefix is doubled."""
HEADER_BOUND = 64 << 20
"""The largest GGUF header read (64 MiB); a header that runs past it is a reason."""


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
    """Routed experts per layer: ``{arch}.expert_count`` / ``num_experts``, ``num_local_experts``, ``n_routed_experts``."""
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
    """The header of the model at ``host_path``: a ``.gguf`` file (or any file starting
    with the GGUF magic), a ``.safetensors`` file, or a folder of safetensors shards with
    its ``config.json``. Never raises for what the file holds; only headers are read."""
    return ModelRead(None, "not read yet")
