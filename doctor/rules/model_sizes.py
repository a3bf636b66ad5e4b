"""The engine's sizes from its model's header: the pinned expert arena (the routed
experts' tensors) and the pinned K/V cache (layers x K/V heads x head sizes x bytes per
element x tokens). Pure: a :class:`~strata_doctor.facts.model_file.ModelHeader` in, a
:class:`SizeFigure` (bytes and a sentence the reader can redo) or a reason out
(docs/model-sizes.md).
"""

from typing import NamedTuple, Optional, Union

from strata_doctor.facts.model_file import ModelHeader


class SizeFigure(NamedTuple):
    """A size computed from a model's header, with how."""

    bytes: int
    """The size in bytes."""
    source: str
    """How it was computed, in numbers the reader can redo, e.g. ``48 layers x 4 K/V heads
    x (128 + 128) x 2 bytes (f16) x 33,792 tokens = 3.09 GiB``."""


def arena_from(header: ModelHeader) -> Union[SizeFigure, str]:
    """The routed experts' bytes (the arena), or why they cannot be told (a dense model,
    an expert tensor of unknown size)."""
    return "not computed yet"


def kv_from(header: ModelHeader, context: Optional[int], cache_type: str = "f16") -> Union[SizeFigure, str]:
    """The K/V cache's bytes for ``context`` tokens (None: the model's trained context)
    of ``cache_type`` (llama.cpp's ``--cache-type-k`` names), or why it cannot be told."""
    return "not computed yet"
