"""Event types of the change feed and its response bodies."""

from __future__ import annotations

from typing import Any

from mol_catalog.util import ResponseBody

EVENT_TYPES = ("version.published", "alias.moved", "version.yanked", "profile.set",
               "base.registered", "version.deleted")


class EventOut(ResponseBody):
    id: int
    type: str
    adapter: str | None
    version: int | None
    alias: str | None
    data: dict[str, Any] | None
    created_at: str | None


class EventPageOut(ResponseBody):
    items: list[EventOut]
    last: int
