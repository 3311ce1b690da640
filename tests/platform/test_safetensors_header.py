"""The safetensors header reader: real files, malformed files, ranged reads, fuzzing."""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save

from mol_platform.contract.compat import (
    AdapterConfigError,
    AdapterInfo,
    BaseShapes,
    Reason,
    ServingProfileSpec,
    check_base,
    check_profile,
)
from mol_platform.contract.safetensors_header import (
    DTYPE_BITS,
    HeaderError,
    TensorInfo,
    header_shapes,
    read_header,
    read_header_ranged,
)


def pack(header: Any, data: bytes = b"", *, raw: bytes | None = None) -> bytes:
    """A file by hand: 8-byte LE length, the JSON header, the data section."""
    body = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + data


@pytest.fixture
def real_file() -> bytes:
    return save(
        {
            "a": np.zeros((4, 3), dtype=np.float32),
            "b": np.ones((2,), dtype=np.float16),
            "c": np.zeros((0, 5), dtype=np.int64),
        },
        metadata={"format": "pt"},
    )


def test_reads_a_file_written_by_safetensors(real_file: bytes, tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(real_file)
    from_bytes = read_header(real_file)
    assert read_header(path) == from_bytes
    with path.open("rb") as fh:
        assert read_header(fh) == from_bytes
    assert read_header(io.BytesIO(real_file)) == from_bytes
    assert set(from_bytes) == {"a", "b", "c"}  # __metadata__ is not a tensor
    assert from_bytes["a"].dtype == "F32"
    assert from_bytes["a"].shape == (4, 3)
    assert from_bytes["a"].nbytes == 48
    assert from_bytes["b"].dtype == "F16"
    assert header_shapes(from_bytes) == {"a": [4, 3], "b": [2], "c": [0, 5]}


def test_only_the_header_bytes_are_needed_with_file_size(real_file: bytes) -> None:
    (length,) = struct.unpack("<Q", real_file[:8])
    head = real_file[: 8 + length]
    assert read_header(head, file_size=len(real_file)) == read_header(real_file)
    with pytest.raises(HeaderError, match="truncated"):
        read_header(head)  # without file_size the data section looks empty


def test_ranged_read_fetches_only_the_header(real_file: bytes) -> None:
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        return real_file[start : end + 1]

    header = read_header_ranged(fetch, len(real_file))
    (length,) = struct.unpack("<Q", real_file[:8])
    assert header == read_header(real_file)
    assert calls == [(0, 7), (8, 8 + length - 1)]


def test_ranged_read_rejects_short_answers(real_file: bytes) -> None:
    with pytest.raises(HeaderError, match="ranged read returned"):
        # one byte short on the second (header) read
        read_header_ranged(lambda s, e: real_file[s : e + (s == 0)], len(real_file))
    with pytest.raises(HeaderError, match="truncated"):
        read_header_ranged(lambda s, e: b"", 4)


def test_missing_path_is_a_header_error(tmp_path: Path) -> None:
    with pytest.raises(HeaderError, match="cannot read"):
        read_header(tmp_path / "absent.safetensors")


F32_2x2 = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}

BAD_FILES: list[tuple[str, bytes, str]] = [
    ("empty file", b"", "truncated"),
    ("truncated length", b"\x10\x00\x00", "truncated"),
    ("zero header length", struct.pack("<Q", 0), "header length is 0"),
    ("header beyond the file", struct.pack("<Q", 1000) + b"{}", "beyond the end of the file"),
    ("header not JSON", pack(None, raw=b"{not json"), "not JSON"),
    ("header not UTF-8", pack(None, raw=b'{"\xff": 1}'), "not UTF-8"),
    ("header a list", pack([1, 2]), "must be a JSON object, got list"),
    ("entry not an object", pack({"t": 3}), "entry must be an object"),
    ("unknown dtype", pack({"t": {**F32_2x2, "dtype": "F128"}}, bytes(16)), "unknown dtype"),
    ("missing dtype", pack({"t": {"shape": [1], "data_offsets": [0, 4]}}, bytes(4)),
     "missing field 'dtype'"),
    ("negative dim", pack({"t": {**F32_2x2, "shape": [-2, 2]}}, bytes(16)), "shape must be"),
    ("bool dim", pack({"t": {**F32_2x2, "shape": [True, 4]}}, bytes(16)), "shape must be"),
    ("shape a string", pack({"t": {**F32_2x2, "shape": "2x2"}}, bytes(16)), "shape must be"),
    ("three offsets", pack({"t": {**F32_2x2, "data_offsets": [0, 8, 16]}}, bytes(16)),
     "data_offsets must be"),
    ("offsets reversed", pack({"t": {**F32_2x2, "data_offsets": [16, 0]}}, bytes(16)),
     "gap of 16 bytes"),
    ("offsets past the data", pack({"t": F32_2x2}, bytes(8)), "truncated.* has 8"),
    ("size disagrees with dtype*shape", pack({"t": {**F32_2x2, "dtype": "F16"}}, bytes(16)),
     "needs 8 bytes"),
]


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])
def test_malformed_files_are_rejected_with_a_reason(data: bytes, message: str) -> None:
    with pytest.raises(HeaderError, match=message):
        read_header(data)
    with pytest.raises(HeaderError, match=message):
        read_header(io.BytesIO(data))


def test_header_size_limit() -> None:
    data = pack({"t": F32_2x2}, bytes(16))
    with pytest.raises(HeaderError, match="exceeds the limit of 10 bytes"):
        read_header(data, max_header_bytes=10)


def test_sub_byte_dtypes_end_on_a_byte_boundary() -> None:
    entry = {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}  # 16 bits -> 2 bytes
    assert read_header(pack({"t": entry}, bytes(2)))["t"] == TensorInfo("t", "F4", (4,), (0, 2))
    odd = {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}  # 12 bits: the library refuses
    with pytest.raises(HeaderError, match="byte boundary"):
        read_header(pack({"t": odd}, bytes(2)))


# --- fuzzing -------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)
dims = st.lists(st.integers(min_value=0, max_value=6), max_size=3)
entries = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from([*DTYPE_BITS, "F128", 3]),
        "shape": dims | json_values,
        "data_offsets": st.lists(st.integers(min_value=-2, max_value=64), min_size=1,
                                 max_size=3) | json_values,
    }
)
tensor_names = st.sampled_from([
    "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
    "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight",
    "base_model.model.model.layers.7.mlp.up_proj.lora_A.default.weight",
    "base_model.model.model.embed_tokens.lora_embedding_A",
    "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
    "base_model.model.lm_head.weight",
    "base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias",
    "__metadata__",
]) | st.text(max_size=30)
headers = st.dictionaries(tensor_names, entries | json_values, max_size=6) | json_values


@st.composite
def valid_files(draw: st.DrawFn) -> bytes:
    """Well-formed files with LoRA-like names and random shapes: these reach the checker."""
    header: dict[str, Any] = {}
    offset = 0
    for name in draw(st.lists(tensor_names, max_size=6, unique=True)):
        if name == "__metadata__":
            continue
        dtype = draw(st.sampled_from(sorted(DTYPE_BITS)))
        shape = draw(dims)
        shape = [*shape, 2]  # an even count: sub-byte dtypes end on a byte boundary
        size = (int(np.prod(shape, dtype=np.int64)) * DTYPE_BITS[dtype] + 7) // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return pack(header, bytes(offset))


files = st.builds(lambda h, n: pack(h, bytes(n)), headers, st.integers(0, 80)) | valid_files()
configs = st.fixed_dictionaries(
    {},
    optional={
        "peft_type": st.sampled_from(["LORA", "IA3", None, 1]),
        "r": st.integers(min_value=-1, max_value=70) | json_values,
        "lora_alpha": st.integers(0, 64) | json_values,
        "use_dora": st.booleans() | json_values,
        "bias": st.sampled_from(["none", "all", "lora_only"]) | json_values,
        "modules_to_save": st.lists(st.sampled_from(["lm_head", "score"]), max_size=2)
        | json_values,
        "target_modules": st.lists(st.text(max_size=8), max_size=3) | json_values,
        "rank_pattern": st.dictionaries(st.sampled_from(["q_proj", "(", "layers.0.*"]),
                                        st.integers(-1, 70), max_size=2) | json_values,
    },
) | json_values

BASE = BaseShapes(
    architecture="LlamaForCausalLM",
    num_layers=2,
    modules={"self_attn.q_proj": (4, 4), "self_attn.k_proj": (2, 4), "mlp.up_proj": (8, 4),
             "embed_tokens": (16, 4), "lm_head": (16, 4)},
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | st.builds(lambda b, t: pack(None, t, raw=b),
                                            st.binary(max_size=120), st.binary(max_size=40)))
def test_random_bytes_never_crash_the_reader(data: bytes) -> None:
    with contextlib.suppress(HeaderError):
        read_header(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files, configs, st.integers(min_value=1, max_value=64))
def test_random_headers_never_crash_reader_or_checker(
    data: bytes, config: Any, max_rank: int
) -> None:
    try:
        parsed = read_header(data)
    except HeaderError:
        return
    assert read_header_ranged(lambda s, e: data[s : e + 1], len(data)) == parsed
    try:
        info = AdapterInfo.from_files(config, parsed)
    except AdapterConfigError:
        return
    reasons = check_base(info, BASE) + check_profile(
        info, ServingProfileSpec("p", max_rank, ("q_proj", "mlp.up_proj"))
    )
    assert all(isinstance(r, Reason) and r.code and r.message for r in reasons)
