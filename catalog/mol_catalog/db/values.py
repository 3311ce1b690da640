"""Column values as ``Prepared`` reads hand them back, decoded the same on every backend.

Driver SQL skips SQLAlchemy's result processing: JSON columns arrive as text, SQLite's
timestamps as their stored text (naive, UTC) and its booleans as 0/1.
"""

from __future__ import annotations

from datetime import datetime
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
    try:
        return orjson.Fragment(value)
    except TypeError:  # a driver that decodes JSON itself (psycopg)
        return orjson.Fragment(orjson.dumps(value))


def datetime_value(value: Any) -> datetime | None:
    """A timestamp in UTC (naive from SQLite, which hands back its stored text; Postgres
    sessions run in UTC). Responses encode it with orjson (``errors.json_bytes``): the one
    timestamp format."""
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return cast(datetime | None, value)
