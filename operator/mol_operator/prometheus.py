"""The operator's Prometheus reads: one instant query, and what its samples hold.

Canary analysis and the adapter health check both read what the routers export
through Prometheus rather than asking each router: the figures are already summed over
every router replica and survive a router's restart.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

import aiohttp

QUERY_TIMEOUT_S: Final = 10.0


class PrometheusError(RuntimeError):
    """Prometheus could not be queried, or refused the query; what depends on it holds."""


async def query(client: aiohttp.ClientSession, base: str, promql: str) -> list[dict[str, Any]]:
    """The samples of an instant query (``data.result``)."""
    try:
        async with client.get(f"{base.rstrip('/')}/api/v1/query",
                              params={"query": promql}) as rsp:
            body = json.loads(await rsp.read())
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise PrometheusError(f"Prometheus at {base} unreachable: {exc!r}") from exc
    if not isinstance(body, dict) or body.get("status") != "success":
        got = body if isinstance(body, dict) else {}
        raise PrometheusError(
            f"Prometheus refused {promql!r}: {got.get('errorType')}: {got.get('error')}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def query_one(base: str, promql: str) -> list[dict[str, Any]]:
    """:func:`query` on a session of its own, bounded by :data:`QUERY_TIMEOUT_S`."""
    async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=QUERY_TIMEOUT_S)) as client:
        return await query(client, base, promql)


def value(sample: Mapping[str, Any]) -> float | None:
    """A sample's value; None for NaN and infinities (a ratio over no requests)."""
    number = float(sample["value"][1])
    return None if math.isnan(number) or math.isinf(number) else number
