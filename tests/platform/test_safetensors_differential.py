"""The header reader accepts a file if and only if the ``safetensors`` library (the engine
venv's version, pinned in the dev extra) loads it, and then reads the same tensors.

Files are generated well formed and then mutated the ways real files go wrong:
overlapping or gapped ``data_offsets``, data sections too short or too long, wrong
dtypes and shapes, duplicate keys and fields, odd JSON (``NaN``, ``-0``, huge numbers,
deep nesting, lone surrogates), flipped, cut and appended bytes.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import safetensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mol_platform.contract.safetensors_header import (
    DTYPE_BITS,
    HeaderError,
    TensorInfo,
    read_header,
    read_header_ranged,
)


class Raw(str):
    """JSON text written as is (``NaN``, ``-0``, ``1e400``...)."""


class Pairs(list[tuple[str, Any]]):
    """A JSON object written pair by pair, duplicates included."""


def dump(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Pairs):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)


# safetensors ships no annotations: its (name, {dtype, shape, data}) list, typed here.
_deserialize: Callable[[bytes], list[tuple[str, dict[str, Any]]]] = safetensors.deserialize


def library(data: bytes) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    try:
        loaded = _deserialize(data)
    except Exception:  # SafetensorError; anything else is a refusal too
        return None
    return {name: (t["dtype"], tuple(t["shape"])) for name, t in loaded}


def ours(data: bytes) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    try:
        header = read_header(data)
    except HeaderError:
        return None
    return {name: (t.dtype, t.shape) for name, t in header.items()}


NAMES = ["a", "b", "lora_A.weight", "lora_B.weight", "", "__metadata__", "\u00e9", "a"]
ODD_NUMBERS = ["-0", "-1", "1.0", "1e2", "18446744073709551615", "18446744073709551616",
               "1e400", "9" * 400, "NaN", "Infinity", "true", "null", '"3"']
ODD_VALUES: list[Any] = [Raw(n) for n in ODD_NUMBERS] + [
    Raw('"\\ud800"'), Raw('"\\ud83d\\ude00"'), Raw('"\\u0000"'), Pairs(), [], "x",
    Pairs([("k", "v")]), Pairs([("k", 1)]), Pairs([("k", None)]),
    Raw("[" * 126 + "]" * 126), Raw("[" * 125 + "]" * 125), Raw("[" * 2000 + "]" * 2000),
]


@st.composite
def files(draw: st.DrawFn) -> bytes:
    dtypes = sorted(DTYPE_BITS)
    entries: list[tuple[str, Any]] = []
    offset = 0
    for name in draw(st.lists(st.sampled_from(NAMES[:5]), max_size=4, unique=True)):
        dtype = draw(st.sampled_from(dtypes))
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        bits = math.prod(shape) * DTYPE_BITS[dtype]
        if bits % 8 and draw(st.booleans()):
            shape = [*shape, 2]  # usually keep sub-byte dtypes on a byte boundary
            bits *= 2
        size = (bits + 7) // 8
        entries.append((name, Pairs([("dtype", dtype), ("shape", shape),
                                     ("data_offsets", [offset, offset + size])])))
        offset += size
    for _ in range(draw(st.integers(0, 3))):
        _mutate(draw, entries)
    header = Pairs(entries)
    text = dump(header) + " " * draw(st.integers(0, 3))
    data = text.encode("utf-8", "surrogatepass")
    body = bytes(max(0, offset + draw(st.sampled_from([0, 0, 0, -2, -1, 1, 3]))))
    out = bytearray(struct.pack("<Q", len(data)) + data + body)
    for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 4)) == 0 else 0):
        _corrupt(draw, out)
    return bytes(out)


def _mutate(draw: st.DrawFn, entries: list[tuple[str, Any]]) -> None:
    kind = draw(st.sampled_from(["offset", "dtype", "shape", "dup", "metadata", "extra",
                                 "array", "drop", "dupfield", "odd", "notobj"]))
    if kind == "metadata":
        entries.insert(draw(st.integers(0, len(entries))),
                       ("__metadata__", draw(st.sampled_from(
                           [Pairs([("format", "pt")]), None, Pairs([("k", 1)]), [],
                            Pairs([("a", "1"), ("a", "2")])]))))
        return
    if not entries:
        return
    i = draw(st.integers(0, len(entries) - 1))
    name, entry = entries[i]
    if not isinstance(entry, Pairs):
        return
    fields = dict(entry)
    if kind in ("offset", "odd") and not all(
            isinstance(fields.get(f), list) and not isinstance(fields.get(f), Raw)
            and len(fields[f]) >= 1 for f in ("shape", "data_offsets")):
        return  # an earlier mutation already broke the field
    if kind == "offset":
        begin, end = ([*list(fields["data_offsets"]), 0, 0])[:2]
        if not (isinstance(begin, int) and isinstance(end, int)):
            return
        fields["data_offsets"] = [max(0, begin + draw(st.integers(-3, 3))),
                                  max(0, end + draw(st.integers(-3, 3)))]
    elif kind == "dtype":
        fields["dtype"] = draw(st.sampled_from([*DTYPE_BITS, "F128", "f32", 3, None,
                                                Pairs([("F32", None)])]))
    elif kind == "shape":
        fields["shape"] = draw(st.lists(st.integers(-1, 2**64) | st.sampled_from(
            [Raw("-0"), True, 1.5]), max_size=3))
    elif kind == "dup":
        entries.insert(draw(st.integers(0, len(entries))), (name, Pairs(list(entry))))
        return
    elif kind == "extra":
        fields["x"] = draw(st.sampled_from(ODD_VALUES))
    elif kind == "odd" and fields["shape"]:
        field = draw(st.sampled_from(["shape", "data_offsets"]))
        fields[field] = [draw(st.sampled_from(ODD_VALUES)), *fields[field][1:]]
    elif kind == "drop":
        del fields[draw(st.sampled_from(sorted(fields)))]
    elif kind == "array":
        values = [fields.get("dtype"), fields.get("shape"), fields.get("data_offsets")]
        entries[i] = (name, ([*values, 0])[: draw(st.integers(2, 4))])
        return
    elif kind == "dupfield":
        entries[i] = (name, Pairs([*entry, (draw(st.sampled_from(sorted(fields))), fields[
            draw(st.sampled_from(sorted(fields)))])]))
        return
    elif kind == "notobj":
        entries[i] = (name, draw(st.sampled_from([None, 3, "x", []])))
        return
    entries[i] = (name, Pairs(list(fields.items())))


def _corrupt(draw: st.DrawFn, out: bytearray) -> None:
    kind = draw(st.sampled_from(["flip", "cut", "append", "length"]))
    if kind == "flip" and out:
        pos = draw(st.integers(0, len(out) - 1))
        out[pos] = draw(st.integers(0, 255))
    elif kind == "cut":
        del out[draw(st.integers(0, len(out))):]
    elif kind == "append":
        out.extend(draw(st.binary(min_size=1, max_size=4)))
    elif kind == "length" and len(out) >= 8:
        (n,) = struct.unpack("<Q", out[:8])
        out[:8] = struct.pack("<Q", max(0, n + draw(st.integers(-3, 3))))


@settings(max_examples=1500, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(files())
def test_reader_accepts_exactly_what_the_library_loads(data: bytes) -> None:
    expected = library(data)
    got = ours(data)
    assert (got is not None) == (expected is not None), (
        f"library {'loads' if expected is not None else 'refuses'} it, our reader "
        f"{'accepts' if got is not None else 'refuses'}: {data[:300]!r}")
    assert got == expected
    if got is not None:  # ranged reads (S3) see the same file the same way
        ranged = read_header_ranged(lambda s, e: data[s:e + 1], len(data))
        assert {n: (t.dtype, t.shape) for n, t in ranged.items()} == got


def _file(header: dict[str, Any], data_size: int) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(data_size)


U8 = {"dtype": "U8", "shape": [4]}
DEFECTS = [
    ("overlapping data_offsets", _file({"a": {**U8, "data_offsets": [0, 4]},
                                        "b": {**U8, "data_offsets": [2, 6]}}, 6), "overlap"),
    ("gap in the data section", _file({"a": {**U8, "data_offsets": [2, 6]}}, 6), "gap"),
    ("trailing bytes", _file({"a": {**U8, "data_offsets": [0, 4]}}, 9), "trailing bytes"),
    ("cut short", _file({"a": {**U8, "data_offsets": [0, 4]}}, 3), "truncated"),
    ("NaN in the header", _file({"a": {**U8, "data_offsets": [0, 4], "x": math.nan}}, 4),
     "not a JSON value"),
    ("sub-byte dtype off a byte boundary",
     _file({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, 2), "byte boundary"),
]


@pytest.mark.parametrize(("data", "reason"), [d[1:] for d in DEFECTS],
                         ids=[d[0] for d in DEFECTS])
def test_defects_the_engine_refuses_are_named(data: bytes, reason: str,
                                              tmp_path: Path) -> None:
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(data)
    with pytest.raises(Exception, match=r"Error while deserializing|incomplete|invalid"):
        safetensors.safe_open(str(path), framework="numpy")
    with pytest.raises(HeaderError, match=reason):
        read_header(path)


def test_a_file_the_library_loads_reads_the_same(tmp_path: Path) -> None:
    data = _file({"__metadata__": {"format": "pt"},
                  "b": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [4, 8]},
                  "a": {**U8, "data_offsets": [0, 4]}}, 8)
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(data)
    with safetensors.safe_open(str(path), framework="numpy") as f:
        names = set(f.keys())
    assert read_header(path) == {
        "a": TensorInfo("a", "U8", (4,), (0, 4)),
        "b": TensorInfo("b", "BF16", (2, 1), (4, 8)),
    }
    assert names == {"a", "b"}
