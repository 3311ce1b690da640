"""Event types of the change feed."""

from __future__ import annotations

EVENT_TYPES = ("version.published", "alias.moved", "version.yanked", "profile.set",
               "base.registered")
