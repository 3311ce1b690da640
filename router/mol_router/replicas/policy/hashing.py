"""Rendezvous (highest-random-weight) hashing of an adapter over endpoints.

Every router replica computes the same order for the same adapter and endpoint set,
so they agree on an adapter's "home" engines without sharing state; when an endpoint
leaves, only the adapters ranked first on it move.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache


def weight(key: str, endpoint: str) -> int:
    """A stable 64-bit pseudo-random weight of (key, endpoint); same on every host."""
    digest = hashlib.blake2b(f"{key}\0{endpoint}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@lru_cache(maxsize=65536)
def _ranking(key: str, endpoints: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(endpoints, key=lambda e: weight(key, e), reverse=True))


def ranking(key: str, endpoints: Sequence[str]) -> tuple[str, ...]:
    """``endpoints`` ordered by descending weight for ``key`` (cached: pure function)."""
    return _ranking(key, tuple(endpoints))


def home(key: str, endpoints: Sequence[str]) -> str | None:
    """The endpoint ranked first for ``key``, or None when there are none."""
    if not endpoints:
        return None
    return max(endpoints, key=lambda e: weight(key, e))
