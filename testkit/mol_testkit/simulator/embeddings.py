"""The simulator's ``/v1/embeddings``: deterministic vectors that tests can predict.

A router's semantic signal (and a trained head) only needs an OpenAI-compatible
embeddings server whose vectors carry the words of the text; vLLM's pooling runner on a
real model is what the end-to-end tests use. Here each word adds one to the bucket
``crc32(word) % dims`` (``dims`` = :data:`DIMS`), so texts sharing words point the same
way, and the same text always gets the same vector in every process.
"""

from __future__ import annotations

import base64
import math
import re
import struct
import zlib
from typing import Any

DIMS = 32
_WORD = re.compile(r"\w+")


def vector(text: str, dims: int = DIMS) -> list[float]:
    """The text's bag of words hashed into ``dims`` buckets, unit length (all zeros with
    a tiny first component for a text without words, so it is never a zero vector)."""
    out = [0.0] * dims
    for word in _WORD.findall(text.lower()):
        out[zlib.crc32(word.encode()) % dims] += 1.0
    norm = math.sqrt(sum(v * v for v in out))
    if not norm:
        out[0] = 1.0
        return out
    return [v / norm for v in out]


def encoded(values: list[float]) -> str:
    """``encoding_format: base64``: the vector as little-endian float32 bytes."""
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def response(model: str, inputs: list[str], encoding: str = "float") -> dict[str, Any]:
    """The OpenAI embeddings answer for ``inputs`` (``encoding``: float or base64)."""
    shape = encoded if encoding == "base64" else (lambda v: v)
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": shape(vector(t))}
                     for i, t in enumerate(inputs)],
            "usage": {"prompt_tokens": sum(len(t.split()) for t in inputs),
                      "total_tokens": sum(len(t.split()) for t in inputs)}}
