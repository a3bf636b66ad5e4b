"""GGUF headers (llama.cpp; ggml's docs/gguf.md), parsed from bytes, never from a file.

A GGUF file opens with ``GGUF``, a version (2 or 3; little-endian), the tensor and
metadata counts, the metadata (typed key/values; arrays of tokens can hold 150,000
strings), then one info per tensor (name, dimensions, ggml type, offset). Every count and
every length is checked against the bytes at hand: a prefix that ends inside the header is
:class:`Short` (the reader reads a longer prefix), a count no header could hold is a reason.
Arrays are walked, never kept, except the short integer ones (a per-layer K/V head count).
"""

import struct
from typing import Dict, NamedTuple, Optional, Tuple, Union

MAGIC = b"GGUF"
VERSIONS = (2, 3)
HEADER_BOUND = 64 << 20
"""The largest GGUF header read (64 MiB): tokenizer arrays take a few MiB; a header that
runs past it is a reason, and no count is believed that a header this size cannot hold."""
MAX_DIMS = 4
"""GGML_MAX_DIMS: a tensor has at most 4 dimensions."""
MAX_KEPT_ARRAY = 4096
"""Integer arrays up to this length are kept (per-layer values); longer ones are walked."""
MAX_NESTING = 4
"""Arrays of arrays deeper than this are refused (no real model has any)."""

GGML_TYPES: Dict[int, Tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
"""ggml type id -> (name, elements per block, bytes per block), as ggml.h and gguf-py's
``GGML_QUANT_SIZES`` give them. Ids 4, 5 and 31-33, 36-38 were removed from ggml."""

# GGUF value types: id -> struct format of a scalar (8 string, 9 array: see _skip_value)
_SCALARS: Dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
                            7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_INTEGERS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
_STRING, _ARRAY = 8, 9
_MIN_KV = 8 + 4 + 1  # a key's length, a type, one byte of value
_MIN_TENSOR = 8 + 4 + 4 + 8  # a name's length, n_dims, a type, an offset

Value = Union[int, float, bool, str, Tuple[int, ...], None]
"""A metadata value as kept: a scalar, a short integer array, or None for a walked array."""


class GgufTensor(NamedTuple):
    """One tensor info of a GGUF header."""

    name: str
    """Its name (``blk.0.ffn_up_exps.weight``)."""
    dims: Tuple[int, ...]
    """ggml's ``ne``: innermost first."""
    type_id: int
    """Its ggml type id."""
    offset: int
    """Its data's offset from the start of the data section."""

    @property
    def type_name(self) -> str:
        """``Q4_K``, or ``type 99`` for an id :data:`GGML_TYPES` does not know."""
        known = GGML_TYPES.get(self.type_id)
        return known[0] if known else f"type {self.type_id}"

    @property
    def nbytes(self) -> Optional[int]:
        """Bytes of its data: elements / block size x block bytes; None for an unknown
        type, or a first dimension that is not a whole number of blocks."""
        known = GGML_TYPES.get(self.type_id)
        if known is None:
            return None
        _, block, size = known
        count = 1
        for dim in self.dims:
            count *= dim
        if self.dims and self.dims[0] % block:
            return None
        return count // block * size


class Gguf(NamedTuple):
    """A parsed GGUF header."""

    version: int
    """2 or 3."""
    metadata: Dict[str, Value]
    """Every key, its scalar value (arrays: a tuple of integers, or None when walked)."""
    tensors: Tuple[GgufTensor, ...]
    """The tensor infos, in the file's order."""
    end: int
    """The byte the header (tensor infos included) ends at."""


class Short(NamedTuple):
    """The bytes at hand end inside the header: at least ``need`` bytes are needed."""

    need: int
    """The byte the header runs to, at least."""


class _Past(Exception):
    def __init__(self, need: int) -> None:
        super().__init__(need)
        self.need = need


class _Bad(Exception):
    pass


def parse_gguf(data: bytes) -> Union[Gguf, Short, str]:
    """The header in ``data`` (a file's first bytes); :class:`Short` when ``data`` ends
    inside it, or why it is no GGUF header this tool reads (a one-line reason)."""
    if len(data) < 4:  # a file this short: GGUF cut short, or no GGUF at all
        return Short(24) if MAGIC.startswith(data) else f"not a GGUF file (magic {data!r})"
    if data[:4] != MAGIC:
        return f"not a GGUF file (magic {data[:4]!r})"
    reader = _Reader(data)
    try:
        return reader.header()
    except _Past as past:
        return Short(past.need)
    except _Bad as bad:
        return str(bad)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 4

    def take(self, fmt: str) -> object:
        size = struct.calcsize(fmt)
        end = self.pos + size
        if end > len(self.data):
            raise _Past(end)
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos = end
        return value

    def int_(self, fmt: str) -> int:
        value = self.take(fmt)
        assert isinstance(value, int)
        return value

    def skip(self, size: int) -> None:
        end = self.pos + size
        if end > len(self.data):
            raise _Past(end)
        self.pos = end

    def header(self) -> Gguf:
        version = self.int_("<I")
        if version not in VERSIONS:
            raise _Bad(_version_reason(version))
        tensors, kvs = self.int_("<Q"), self.int_("<Q")
        _bound_count(kvs, _MIN_KV, "metadata keys")
        _bound_count(tensors, _MIN_TENSOR, "tensors")
        metadata: Dict[str, Value] = {}
        for _ in range(kvs):
            key = self.string(key=True)
            metadata[key] = self.value(self.int_("<I"), 0)
        infos = [self.tensor() for _ in range(tensors)]
        return Gguf(version, metadata, tuple(infos), self.pos)

    def string(self, key: bool = False) -> str:
        length = self.int_("<Q")
        start = self.pos
        self.skip(length)
        raw = self.data[start:self.pos]
        if not key:
            return raw.decode("utf-8", "replace")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"a metadata key at byte {start:,} is not UTF-8") from None

    def value(self, kind: int, depth: int) -> Value:
        if kind in _SCALARS:
            scalar = self.take(_SCALARS[kind])
            assert isinstance(scalar, (int, float, bool))
            return scalar
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            return self.array(depth)
        raise _Bad(f"unknown metadata value type {kind} at byte {self.pos - 4:,}")

    def array(self, depth: int) -> Value:
        if depth >= MAX_NESTING:
            raise _Bad(f"arrays nested over {MAX_NESTING} deep at byte {self.pos:,}")
        kind, count = self.int_("<I"), self.int_("<Q")
        if kind in _SCALARS:
            size = struct.calcsize(_SCALARS[kind])
            _bound_count(count, size, "array elements")
            start = self.pos
            self.skip(count * size)  # the whole array at hand, or Short: never a loop over a huge count
            if kind in _INTEGERS and count <= MAX_KEPT_ARRAY:
                fmt = "<" + _SCALARS[kind][1] * count
                return tuple(int(v) for v in struct.unpack_from(fmt, self.data, start))
            return None
        if kind not in (_STRING, _ARRAY):
            raise _Bad(f"unknown array element type {kind} at byte {self.pos - 12:,}")
        _bound_count(count, 8, "array elements")
        if kind == _STRING:
            self.pos = _skip_strings(self.data, self.pos, count)
            return None
        for _ in range(count):
            self.array(depth + 1)
        return None

    def tensor(self) -> GgufTensor:
        name = self.string()
        n_dims = self.int_("<I")
        if n_dims > MAX_DIMS:
            raise _Bad(f"tensor {name!r} has {n_dims:,} dimensions (GGUF allows {MAX_DIMS})")
        dims = tuple(self.int_("<Q") for _ in range(n_dims))
        return GgufTensor(name, dims, self.int_("<I"), self.int_("<Q"))


_LENGTH = struct.Struct("<Q")


def _skip_strings(data: bytes, pos: int, count: int) -> int:
    """The byte after ``count`` strings from ``pos`` (a tokenizer's 150,000 tokens: the
    one loop that runs long, kept tight)."""
    unpack, size = _LENGTH.unpack_from, len(data)
    for _ in range(count):
        if pos + 8 > size:
            raise _Past(pos + 8)
        pos += 8 + unpack(data, pos)[0]
    if pos > size:
        raise _Past(pos)
    return pos


def _bound_count(count: int, least: int, what: str) -> None:
    """A count no header of :data:`HEADER_BOUND` bytes could hold is a reason, before any
    loop runs over it (2**64 - 1 tensors would loop for ever)."""
    if count * least > HEADER_BOUND:
        raise _Bad(f"the header claims {count:,} {what}, more than {HEADER_BOUND >> 20} MiB could hold")


def _version_reason(version: int) -> str:
    swapped = struct.unpack("<I", struct.pack(">I", version))[0]
    if swapped in VERSIONS:
        return f"a big-endian GGUF file (version {swapped}): only little-endian files are read"
    if version == 1:
        return "GGUF version 1 (llama.cpp before August 2023): only versions 2 and 3 are read"
    return f"unknown GGUF version {version:,}: only versions 2 and 3 are read"
