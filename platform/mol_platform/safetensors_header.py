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

MIB = 1024 * 1024
DEFAULT_MAX_HEADER_BYTES = 100 * MIB
METADATA_KEY = "__metadata__"

# Size of one element in bits, per safetensors dtype.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
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


def _int_list(value: Any) -> list[int] | None:
    """The value as a list of non-negative ints, or None (bools are not ints here)."""
    if not isinstance(value, list):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None
    return list(value)


def _entry(name: str, raw: Any, data_size: int) -> TensorInfo:
    if not isinstance(raw, dict):
        raise HeaderError(f"tensor {name!r}: entry must be an object, got {type(raw).__name__}")
    dtype = raw.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise HeaderError(
            f"tensor {name!r}: unknown dtype {dtype!r} (expected one of "
            f"{', '.join(sorted(DTYPE_BITS))})"
        )
    shape = _int_list(raw.get("shape"))
    if shape is None:
        raise HeaderError(
            f"tensor {name!r}: shape must be a list of non-negative integers, "
            f"got {raw.get('shape')!r}"
        )
    offsets = _int_list(raw.get("data_offsets"))
    if offsets is None or len(offsets) != 2:
        raise HeaderError(
            f"tensor {name!r}: data_offsets must be [begin, end] non-negative integers, "
            f"got {raw.get('data_offsets')!r}"
        )
    begin, end = offsets
    if begin > end or end > data_size:
        raise HeaderError(
            f"tensor {name!r}: data_offsets [{begin}, {end}] outside the data section "
            f"of {data_size} bytes"
        )
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    expected = (bits + 7) // 8
    if end - begin != expected:
        raise HeaderError(
            f"tensor {name!r}: data_offsets span {end - begin} bytes but dtype {dtype} with "
            f"shape {shape} needs {expected} bytes"
        )
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), data_offsets=(begin, end))


def parse_header(raw: bytes, file_size: int) -> dict[str, TensorInfo]:
    """Parse the JSON header bytes of a file of ``file_size`` bytes (length prefix excluded)."""
    data_size = file_size - 8 - len(raw)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise HeaderError(f"header is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise HeaderError(f"header is not JSON: {exc.msg} at byte {exc.pos}") from None
    except RecursionError:
        raise HeaderError("header is not JSON a reader accepts: nested too deeply") from None
    if not isinstance(doc, dict):
        raise HeaderError(f"header must be a JSON object, got {type(doc).__name__}")
    tensors: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        if name == METADATA_KEY:
            continue
        tensors[name] = _entry(name, entry, data_size)
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
