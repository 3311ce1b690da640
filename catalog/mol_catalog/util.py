"""Small helpers shared by the domains: cursors, names, checked text and JSON."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

from mol_catalog.errors import ApiError, BadRequest, InvalidName
from mol_platform.contract import refs


def encode_cursor(*values: Any) -> str:
    raw = json.dumps(list(values), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


MAX_BIGINT = 2**63 - 1  # the largest id a BIGINT column (and SQLite's INTEGER) holds
MAX_JSON_DEPTH = 32
MAX_CURSOR_CHARS = 64


def decode_cursor(cursor: str | None) -> int | None:
    """The key of a cursor made by encode_cursor; 400 when it was tampered with."""
    if not cursor:
        return None
    bad = BadRequest(f"invalid cursor {cursor[:MAX_CURSOR_CHARS]!r}: pass next_cursor back "
                     "unchanged")
    if len(cursor) > MAX_CURSOR_CHARS:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        raise bad from None
    if (not isinstance(values, list) or len(values) != 1 or type(values[0]) is not int
            or not 0 <= values[0] <= MAX_BIGINT):
        raise bad
    return values[0]


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text on every backend (Postgres refuses NUL and
    unpaired surrogates cannot be encoded), or None."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired UTF-16 surrogate"
    return None


def clean_text(value: str | None, what: str) -> str | None:
    """Free text from a query or form field; 400 when no backend can store it."""
    if value is not None:
        problem = text_problem(value)
        if problem:
            raise BadRequest(f"{what} {problem}")
    return value


def _text(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A request-body string that every backend can store (422 otherwise).
Text = Annotated[str, AfterValidator(_text)]


def check_json(value: Any, what: str, error: type[ApiError] = BadRequest) -> Any:
    """A JSON document the catalog stores and serves back: finite numbers, 64-bit integers,
    storable strings, nested at most MAX_JSON_DEPTH levels; 400 naming the problem."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        problem = None
        if isinstance(item, str):
            problem = text_problem(item)
        elif isinstance(item, float) and not math.isfinite(item):
            problem = f"contains {item}, which JSON cannot represent"
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_BIGINT:
            problem = "contains an integer beyond the 64-bit range"
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                problem = f"is nested more than {MAX_JSON_DEPTH} levels deep"
            elif isinstance(item, dict):
                stack.extend((k, depth) for k in item)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        if problem:
            raise error(f"{what} {problem}")
    return value


def load_json(raw: bytes | str, what: str, error: type[ApiError] = BadRequest) -> Any:
    """Parse untrusted JSON: NaN/Infinity refused (JSON has neither) and checked as above."""
    def constant(name: str) -> Any:
        raise error(f"{what} contains {name}, which JSON cannot represent")

    try:
        value = json.loads(raw, parse_constant=constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise error(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep") from None
    return check_json(value, what, error)


def checked(check: Callable[[str], str], value: str) -> str:
    """``value`` passed through one of the contract's ``refs`` validators; 400 if refused."""
    try:
        return check(value)
    except refs.RefError as exc:
        raise InvalidName(str(exc)) from None


def valid_name(value: str, what: str) -> str:
    return checked(lambda v: refs.check_name(v, what), value)


def valid_alias(value: str) -> str:
    return checked(refs.check_alias, value)


def version_number(text: str, what: str = "version") -> int:
    """``3`` or ``v3`` (``refs.parse_version``); 400 otherwise."""
    try:
        return refs.parse_version(text, what)
    except refs.RefError as exc:
        raise BadRequest(str(exc)) from None


def clamp_limit(limit: int, maximum: int = 500) -> int:
    if limit < 1 or limit > maximum:
        raise BadRequest(f"limit must be between 1 and {maximum}, got {limit}")
    return limit


class ResponseBody(BaseModel):
    """A response body for OpenAPI: documented field by field, later additions allowed.

    Handlers still answer with pre-encoded JSON; these models only describe it (FastAPI
    passes a returned Response through without validating it against the model)."""

    model_config = ConfigDict(extra="allow")
