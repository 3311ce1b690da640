"""The request body: the fields the router itself reads, checked before routing."""

from __future__ import annotations

from typing import Any

import orjson

from mol_router.errors import RouterError


def nonneg(value: object) -> int:
    """A token count from an engine's ``usage``: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,), "router": (str,), "user": (str,), "stream": (bool,),
    "stream_options": (dict,), "tools": (list,), "max_tokens": (int,),
    "temperature": (int, float), "top_p": (int, float), "n": (int,),
}


def parse_body(data: bytes, chat: bool) -> dict[str, Any]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RouterError(400, f"request body is not valid JSON (UTF-8): {exc}",
                          "invalid_json") from None
    if not isinstance(body, dict):
        raise RouterError(400, "request body must be a JSON object", "invalid_json")
    _check_fields(body, chat)
    return body


def _check_fields(body: dict[str, Any], chat: bool) -> None:
    """The fields the router itself reads; the engine validates the rest (its 400s
    pass through)."""
    for name, value in body.items():
        types = _TYPES.get(name)
        if types is not None and value is not None and (not isinstance(value, types) or (
                isinstance(value, bool) and bool not in types)):
            expected = " or ".join(t.__name__.replace("dict", "object").replace(
                "list", "array").replace("str", "string") for t in types)
            raise RouterError(400, f"'{name}' must be {expected}", "invalid_type", param=name)
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RouterError(400, "'messages' must be a non-empty array", "invalid_type",
                              param="messages")
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, (str, list)):
            raise RouterError(400, "'prompt' must be a string or an array", "invalid_type",
                              param="prompt")
