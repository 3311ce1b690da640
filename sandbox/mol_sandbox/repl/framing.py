"""The frames the service and the driver exchange: a 4-byte big-endian length, then
UTF-8 JSON (``mol_sandbox.repl.driver`` speaks the same, standalone)."""

from __future__ import annotations

import json
import struct
from typing import Any

HEADER = struct.Struct(">I")


class FrameError(ValueError):
    """A reply that is not a frame the driver writes: the interpreter is not to be trusted."""


def encode(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return HEADER.pack(len(data)) + data


def frame_size(header: bytes, limit: int) -> int:
    (size,) = HEADER.unpack(header)
    if size > limit:
        raise FrameError(f"a reply of {size} bytes (at most {limit})")
    return int(size)


def decode(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"a reply that is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError("a reply that is not an object")
    return message
