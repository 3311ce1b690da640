"""Read and validate the header of a safetensors file without touching its tensors.

A safetensors file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON
``{name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}`` and then the data
section. Compatibility checks and base-model registration only need the header, so the
reader takes a stream, a path, the bytes, or a ranged ``fetch`` (an S3 ranged GET) and
never reads the weights. Everything that does not follow the format raises
:class:`HeaderError` with a message that says what is wrong.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

# The library's limits: a header of at most 100,000,000 bytes, JSON nested at most 127
# levels (serde_json's recursion limit), sizes in 64-bit integers.
DEFAULT_MAX_HEADER_BYTES = 100_000_000
MAX_DEPTH = 127
U64_MAX = 2**64 - 1
METADATA_KEY = "__metadata__"
ENTRY_FIELDS = ("dtype", "shape", "data_offsets")

# Size of one element in bits, per safetensors dtype.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


class HeaderError(ValueError):
    """A file that is not a well-formed safetensors file; the message names the problem."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor entry of a safetensors header (offsets relative to the data section)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]


def _header_length(prefix: bytes, file_size: int, max_header_bytes: int) -> int:
    if len(prefix) < 8:
        raise HeaderError(
            f"file is truncated: {len(prefix)} bytes, a safetensors file starts with an "
            "8-byte header length"
        )
    (length,) = struct.unpack("<Q", prefix[:8])
    if length == 0:
        raise HeaderError("header length is 0: not a safetensors file")
    if length > max_header_bytes:
        raise HeaderError(
            f"header length {length} bytes exceeds the limit of {max_header_bytes} bytes"
        )
    if length > file_size - 8:
        raise HeaderError(
            f"header length {length} bytes is beyond the end of the file "
            f"({file_size} bytes): truncated or not a safetensors file"
        )
    return int(length)


class _Obj(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in order: duplicates stay visible."""


class _Number(float):
    """A JSON number that is not a non-negative 64-bit integer (``-0``, ``-3``, ``2**64``,
    ``1.5``): valid JSON, but not a dimension or an offset."""


def _parse_int(text: str) -> int | float:
    # float() first: it bounds the magnitude without int()'s 4300-digit limit.
    if math.isinf(float(text)):
        raise HeaderError(f"header has a number out of range ({text[:20]}...)")
    value = int(text)
    return value if not text.startswith("-") and value <= U64_MAX else _Number(value)


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise HeaderError(f"header has a number out of range ({text[:20]})")
    return _Number(value)


def _parse_constant(text: str) -> Any:
    raise HeaderError(f"header is not JSON: {text} is not a JSON value")


def _check_tree(doc: Any) -> None:
    """Nesting at most MAX_DEPTH levels and no lone UTF-16 surrogates in any string,
    as the library's JSON parser demands."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
                raise HeaderError("header has a string with a lone UTF-16 surrogate escape")
            continue
        if not isinstance(value, list):
            continue
        if depth > MAX_DEPTH:
            raise HeaderError(f"header is nested more than {MAX_DEPTH} levels deep")
        pairs = value if isinstance(value, _Obj) else ()
        for key, _ in pairs:
            stack.append((key, depth))
        items = (v for _, v in pairs) if isinstance(value, _Obj) else iter(value)
        stack.extend((item, depth + 1) for item in items)


def _usize(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64_MAX


def _fields(name: str, raw: Any) -> tuple[Any, Any, Any]:
    """(dtype, shape, data_offsets) of an entry: an object or a 3-element array."""
    if isinstance(raw, _Obj):
        found: dict[str, Any] = {}
        for key, value in raw:
            if key in ENTRY_FIELDS:
                if key in found:
                    raise HeaderError(f"tensor {name!r}: field {key!r} appears twice")
                found[key] = value
        missing = [k for k in ENTRY_FIELDS if k not in found]
        if missing:
            raise HeaderError(f"tensor {name!r}: missing field {missing[0]!r}")
        return found["dtype"], found["shape"], found["data_offsets"]
    if isinstance(raw, list):
        if len(raw) != len(ENTRY_FIELDS):
            raise HeaderError(f"tensor {name!r}: an array entry needs exactly 3 elements "
                              "(dtype, shape, data_offsets)")
        return raw[0], raw[1], raw[2]
    kind = "null" if raw is None else type(raw).__name__
    raise HeaderError(f"tensor {name!r}: entry must be an object, got {kind}")


def _dtype(name: str, raw: Any) -> str:
    if isinstance(raw, _Obj) and len(raw) == 1 and raw[0][1] is None:
        raw = raw[0][0]  # {"F32": null}: the library's enum also reads this form
    if not isinstance(raw, str) or raw not in DTYPE_BITS:
        raise HeaderError(f"tensor {name!r}: unknown dtype {raw!r} (expected one of "
                          f"{', '.join(sorted(DTYPE_BITS))})")
    return raw


def _entry(name: str, raw: Any) -> TensorInfo:
    raw_dtype, shape, offsets = _fields(name, raw)
    dtype = _dtype(name, raw_dtype)
    if not isinstance(shape, list) or isinstance(shape, _Obj) or not all(
            _usize(d) for d in shape):
        raise HeaderError(f"tensor {name!r}: shape must be a list of non-negative integers, "
                          f"got {_show(shape)}")
    if (not isinstance(offsets, list) or isinstance(offsets, _Obj) or len(offsets) != 2
            or not all(_usize(o) for o in offsets)):
        raise HeaderError(f"tensor {name!r}: data_offsets must be [begin, end] non-negative "
                          f"integers, got {_show(offsets)}")
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape),
                      data_offsets=(offsets[0], offsets[1]))


def _show(value: Any) -> str:
    if isinstance(value, _Obj):
        return repr(dict(value))
    return repr(float(value) if isinstance(value, _Number) else value)


def _metadata(raw: Any) -> None:
    if raw is None:
        return
    if not isinstance(raw, _Obj) or not all(isinstance(v, str) for _, v in raw):
        raise HeaderError(f"{METADATA_KEY} must be an object of strings")


def _byte_size(info: TensorInfo) -> int:
    """The bytes ``dtype`` x ``shape`` needs, with the library's 64-bit overflow checks."""
    count = 1
    for dim in info.shape:
        count *= dim
        if count > U64_MAX:
            raise HeaderError(f"tensor {info.name!r}: shape {list(info.shape)} is too large")
    bits = count * DTYPE_BITS[info.dtype]
    if bits > U64_MAX:
        raise HeaderError(f"tensor {info.name!r}: shape {list(info.shape)} is too large")
    if bits % 8:
        raise HeaderError(f"tensor {info.name!r}: {info.dtype} with shape {list(info.shape)} "
                          "does not end on a byte boundary")
    return bits // 8


def _check_layout(tensors: Mapping[str, TensorInfo], data_size: int) -> None:
    """Tensors, in offset order, tile the data section from 0 to its end exactly."""
    end = 0
    previous: TensorInfo | None = None
    for info in sorted(tensors.values(), key=lambda t: t.data_offsets):
        begin, stop = info.data_offsets
        if begin < end:
            assert previous is not None
            raise HeaderError(f"tensors {previous.name!r} and {info.name!r} overlap "
                              f"(data_offsets {list(previous.data_offsets)} and "
                              f"[{begin}, {stop}])")
        if begin > end:
            raise HeaderError(f"tensor {info.name!r}: gap of {begin - end} bytes before it "
                              f"(data_offsets [{begin}, {stop}], previous tensor ends at {end})")
        if stop < begin:
            raise HeaderError(f"tensor {info.name!r}: data_offsets [{begin}, {stop}] end "
                              "before they begin")
        needed = _byte_size(info)
        if stop - begin != needed:
            raise HeaderError(f"tensor {info.name!r}: data_offsets span {stop - begin} bytes "
                              f"but dtype {info.dtype} with shape {list(info.shape)} needs "
                              f"{needed} bytes")
        end, previous = stop, info
    if end > data_size:
        raise HeaderError(f"file is truncated: the tensors need {end} bytes of data, the file "
                          f"has {data_size}")
    if end < data_size:
        raise HeaderError(f"{data_size - end} trailing bytes after the last tensor's data "
                          f"(the tensors cover {end} of {data_size} bytes)")


def parse_header(raw: bytes, file_size: int) -> dict[str, TensorInfo]:
    """Parse the JSON header bytes of a file of ``file_size`` bytes (length prefix excluded).

    Accepts exactly what the ``safetensors`` library loads (its JSON rules included:
    no NaN, no lone surrogates, nesting limit, no duplicate fields) so that nothing the
    catalog stores fails later in the engine.
    """
    data_size = file_size - 8 - len(raw)
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_Obj, parse_int=_parse_int,
                         parse_float=_parse_float, parse_constant=_parse_constant)
    except UnicodeDecodeError as exc:
        raise HeaderError(f"header is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise HeaderError(f"header is not JSON: {exc.msg} at byte {exc.pos}") from None
    except RecursionError:
        raise HeaderError(f"header is nested more than {MAX_DEPTH} levels deep") from None
    if not isinstance(doc, _Obj):
        kind = "null" if doc is None else type(doc).__name__
        raise HeaderError(f"header must be a JSON object, got {kind}")
    _check_tree(doc)
    tensors: dict[str, TensorInfo] = {}
    seen_metadata = False
    for name, entry in doc:
        if name == METADATA_KEY:
            if seen_metadata:
                raise HeaderError(f"{METADATA_KEY} appears twice")
            seen_metadata = True
            _metadata(entry)
        else:
            tensors[name] = _entry(name, entry)  # a repeated name: the last entry wins
    _check_layout(tensors, data_size)
    return tensors


def _stream_size(stream: BinaryIO) -> int:
    try:
        pos = stream.tell()
        end = stream.seek(0, os.SEEK_END)
        stream.seek(pos)
    except (OSError, ValueError) as exc:
        raise HeaderError(f"cannot determine the file size ({exc}); pass file_size") from None
    return end - pos


def _read_exact(stream: BinaryIO, count: int) -> bytes:
    chunks: list[bytes] = []
    left = count
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_stream(stream: BinaryIO, file_size: int | None, max_header_bytes: int) -> dict[
    str, TensorInfo
]:
    size = _stream_size(stream) if file_size is None else file_size
    prefix = _read_exact(stream, 8)
    length = _header_length(prefix, size, max_header_bytes)
    raw = _read_exact(stream, length)
    if len(raw) < length:
        raise HeaderError(f"file is truncated: header needs {length} bytes, read {len(raw)}")
    return parse_header(raw, size)


def read_header(
    source: BinaryIO | Path | bytes,
    *,
    file_size: int | None = None,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> dict[str, TensorInfo]:
    """Read and validate the header of a safetensors file.

    ``source`` is an open binary stream positioned at the start of the file, a path or
    the file's bytes (only the header part is needed when ``file_size`` is given).
    Returns tensor name -> :class:`TensorInfo`; ``__metadata__`` is ignored.
    """
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        size = len(data) if file_size is None else file_size
        length = _header_length(data[:8], size, max_header_bytes)
        raw = data[8 : 8 + length]
        if len(raw) < length:
            raise HeaderError(f"file is truncated: header needs {length} bytes, got {len(raw)}")
        return parse_header(raw, size)
    if isinstance(source, Path):
        path = source
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size if file_size is None else file_size
                return _read_stream(fh, size, max_header_bytes)
        except OSError as exc:
            raise HeaderError(f"cannot read {path}: {exc.strerror or exc}") from None
    return _read_stream(source, file_size, max_header_bytes)


def read_header_ranged(
    fetch: Callable[[int, int], bytes],
    file_size: int,
    *,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> dict[str, TensorInfo]:
    """Read the header through ``fetch(start, end_inclusive)`` (e.g. an S3 ranged GET).

    Two calls: the 8-byte length, then the header itself; the weights are never read.
    """
    if file_size < 8:
        raise HeaderError(f"file is truncated: {file_size} bytes, a safetensors file starts "
                          "with an 8-byte header length")
    prefix = fetch(0, 7)
    length = _header_length(prefix, file_size, max_header_bytes)
    raw = fetch(8, 8 + length - 1)
    if len(raw) != length:
        raise HeaderError(f"ranged read returned {len(raw)} bytes, header needs {length}")
    return parse_header(raw, file_size)


def header_shapes(header: Mapping[str, TensorInfo]) -> dict[str, list[int]]:
    """Tensor name -> shape as JSON-friendly lists (what the catalog stores for a base)."""
    return {name: list(info.shape) for name, info in header.items()}
