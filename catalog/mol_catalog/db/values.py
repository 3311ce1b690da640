"""Column values as ``Prepared`` reads hand them back, decoded the same on every backend.

Driver SQL skips SQLAlchemy's result processing: JSON columns arrive as text, SQLite's
timestamps as their stored text (naive, UTC) and its booleans as 0/1.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import orjson


def json_value(value: Any) -> Any:
    """A JSON column: text (or bytes) from the driver, decoded."""
    if isinstance(value, str | bytes):
        return orjson.loads(value)
    return value


def json_text(value: Any, default: str) -> orjson.Fragment:
    """A JSON column passed through to an orjson-encoded response, never decoded."""
    if value is None:
        return orjson.Fragment(default)
    if not isinstance(value, str | bytes):  # a driver that decodes JSON itself (psycopg)
        value = orjson.dumps(value)
    return orjson.Fragment(value)


def datetime_value(value: Any) -> datetime | None:
    """A timestamp in UTC (naive from SQLite, which hands back its stored text). Responses
    encode it with orjson (``errors.json_bytes``): the one timestamp format."""
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    if value is not None and value.utcoffset():  # a session in another time zone
        return cast(datetime, value.astimezone(UTC))
    return cast(datetime | None, value)
