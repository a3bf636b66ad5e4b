"""Where the arena and K/V sizes came from, as check's first line and its JSON ``sizes``
object (docs/json-schema.md): each size, who gave it or how the model's header makes it,
or why it is unknown."""

from __future__ import annotations

from typing import Any, Dict, Optional

from strata_doctor.config import EngineConfig
from strata_doctor.facts.parse import format_bytes
from strata_doctor.model import SizeSources

NO_ARENA = "pass --arena, or set arena: or model: in the config (no model found on the engine's command line)"
"""Why the arena is unknown where nothing names it or a model."""
NO_KV = "pass --kv, or set kv: in the config"
"""Why the K/V size is unknown where nothing gives it."""


def sizes_line(config: EngineConfig) -> str:
    """One line: ``arena 46.84 GiB: SOURCE; K/V 3.09 GiB: SOURCE``, or why each is unknown."""
    sizes = config.sizes or SizeSources()
    if config.arena_bytes is not None:
        arena = f"arena {format_bytes(config.arena_bytes)}: {sizes.arena or 'given'}"
    else:
        arena = f"arena unknown: {sizes.arena_reason or NO_ARENA}"
    if sizes.kv is not None:
        kv = f"K/V {format_bytes(config.kv_bytes)}: {sizes.kv}"
    else:
        kv = f"K/V counted as 0 B: {sizes.kv_reason or NO_KV}"
    return f"{arena}; {kv}"


def sizes_data(config: EngineConfig) -> Dict[str, Any]:
    """``sizes`` of the check document: ``arena`` and ``kv``, each ``bytes``, ``source``,
    ``how`` and ``reason``; ``model`` with its ``path`` and ``named_by``, or null."""
    sizes = config.sizes or SizeSources()
    model = None if sizes.model is None else {"path": sizes.model, "named_by": sizes.model_by}
    return {
        "arena": _one(config.arena_bytes, sizes.arena, sizes.arena_how, sizes.arena_reason or NO_ARENA),
        "kv": _one(config.kv_bytes if sizes.kv is not None else None, sizes.kv, sizes.kv_how,
                   sizes.kv_reason or NO_KV),
        "model": model,
    }


def _one(size: Optional[int], source: Optional[str], how: str, reason: str) -> Dict[str, Any]:
    """One size: its bytes and who gave it, or null bytes with the reason."""
    if size is None:
        return {"bytes": None, "source": None, "how": None, "reason": reason}
    return {"bytes": size, "source": source, "how": how or None, "reason": None}
