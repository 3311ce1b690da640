"""Small helpers shared by the domains: timestamps, cursors, names."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mol_catalog.errors import BadRequest, InvalidName
from mol_platform import refs


def iso(value: datetime | None) -> str | None:
    """RFC 3339 in UTC (SQLite hands back naive datetimes; they are UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def encode_cursor(*values: Any) -> str:
    raw = json.dumps(list(values), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None, arity: int) -> list[Any] | None:
    """The values of a cursor made by encode_cursor; 400 when it was tampered with."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
    except (ValueError, TypeError):
        raise BadRequest(f"invalid cursor {cursor!r}: pass next_cursor back unchanged") from None
    if not isinstance(values, list) or len(values) != arity:
        raise BadRequest(f"invalid cursor {cursor!r}: pass next_cursor back unchanged")
    return values


def checked(check: Callable[[str], str], value: str) -> str:
    """``value`` passed through one of ``mol_platform.refs``' validators; 400 when refused."""
    try:
        return check(value)
    except refs.RefError as exc:
        raise InvalidName(str(exc)) from None


def valid_name(value: str, what: str) -> str:
    return checked(lambda v: refs.check_name(v, what), value)


def valid_alias(value: str) -> str:
    return checked(refs.check_alias, value)


def clamp_limit(limit: int, maximum: int = 500) -> int:
    if limit < 1 or limit > maximum:
        raise BadRequest(f"limit must be between 1 and {maximum}, got {limit}")
    return limit
