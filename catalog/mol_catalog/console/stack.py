"""The running stack as the console shows it, read from the configured router: its
``/status`` (experts with their stable and canary versions, engines with their resident
adapters), its ``/metrics`` (request rates and time to first token per expert), its
``/v1/models`` (what the playground may ask), and its chat API (the playground's calls,
streamed through)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from mol_catalog.errors import BadRequest, Unavailable
from mol_catalog.settings import CatalogSettings

REQUESTS = "mol_router_requests"  # the parser drops a counter's _total suffix
TTFT = "mol_router_time_to_first_token_seconds"
TIMEOUT = httpx.Timeout(5.0)
CHAT_TIMEOUT = httpx.Timeout(5.0, read=300.0)  # a streamed answer may pause between events
PASSED_HEADERS = ("x-request-id", "x-mol-expert", "x-mol-adapter-version", "x-mol-canary",
                  "x-mol-handoffs", "x-mol-route", "retry-after")


def router_url(settings: CatalogSettings) -> str:
    if not settings.router_url:
        raise BadRequest("no router is configured: start the catalog with "
                         "MOL_CATALOG_ROUTER_URL (mol up sets it)")
    return settings.router_url.rstrip("/")


def _headers(settings: CatalogSettings) -> dict[str, str]:
    key = settings.router_api_key
    return {"authorization": f"Bearer {key}"} if key else {}


async def _get(settings: CatalogSettings, path: str) -> httpx.Response:
    url = router_url(settings) + path
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            response = await client.get(url, headers=_headers(settings))
    except httpx.HTTPError as exc:
        raise Unavailable(f"the router at {url} did not answer: {exc!r}") from None
    if response.status_code != 200:
        raise Unavailable(f"the router answered {response.status_code} on {path}: "
                          f"{response.text[:300]}")
    return response


@dataclass
class _Sample:
    at: float
    requests: dict[str, float] = field(default_factory=dict)
    ttft_sum: dict[str, float] = field(default_factory=dict)
    ttft_count: dict[str, float] = field(default_factory=dict)


def _sample(text: str) -> _Sample:
    """Per-expert totals from the router's exposition (summed over versions and codes)."""
    sample = _Sample(time.monotonic())
    for family in text_string_to_metric_families(text):
        if family.name not in (REQUESTS, TTFT):
            continue
        for s in family.samples:
            expert = s.labels.get("expert", "")
            if s.name == f"{REQUESTS}_total":
                target = sample.requests
            elif s.name == f"{TTFT}_sum":
                target = sample.ttft_sum
            elif s.name == f"{TTFT}_count":
                target = sample.ttft_count
            else:
                continue
            target[expert] = target.get(expert, 0.0) + s.value
    return sample


# The previous scrape per router URL: rates are the difference to it (one per process).
_PREVIOUS: dict[str, _Sample] = {}


def _rates(url: str, now: _Sample) -> dict[str, dict[str, float | None]]:
    """Requests per second and mean TTFT (ms) per expert since the previous scrape; the
    mean since the router started when nothing was answered in between."""
    before = _PREVIOUS.get(url)
    _PREVIOUS[url] = now
    out: dict[str, dict[str, float | None]] = {}
    for expert in set(now.requests) | set(now.ttft_count):
        total = now.requests.get(expert, 0.0)
        count = now.ttft_count.get(expert, 0.0)
        total_sum = now.ttft_sum.get(expert, 0.0)
        rate: float | None = None
        ttft = total_sum / count * 1000 if count else None
        if before is not None and now.at > before.at:
            rate = (total - before.requests.get(expert, 0.0)) / (now.at - before.at)
            new = count - before.ttft_count.get(expert, 0.0)
            if new > 0:
                ttft = (total_sum - before.ttft_sum.get(expert, 0.0)) / new * 1000
        out[expert] = {"requests": total, "rate": rate, "ttft_ms": ttft}
    return out


async def snapshot(settings: CatalogSettings) -> dict[str, Any]:
    """The stack page's data: the router's status with live figures per expert."""
    status: dict[str, Any] = (await _get(settings, "/status")).json()
    figures = _rates(router_url(settings), _sample((await _get(settings, "/metrics")).text))
    for expert in status.get("experts", []):
        expert["live"] = figures.get(expert["name"], {"requests": 0.0, "rate": None,
                                                      "ttft_ms": None})
    return status


async def models(settings: CatalogSettings) -> list[dict[str, Any]]:
    """What the router's /v1/models offers: experts, ``auto``, tenant adapters."""
    data: list[dict[str, Any]] = (await _get(settings, "/v1/models")).json().get("data", [])
    return data


@dataclass
class Relay:
    """An answer from the router being passed on: status, the headers worth showing,
    and the body as it arrives."""

    status: int
    content_type: str
    headers: dict[str, str]
    body: AsyncIterator[bytes]


async def chat(settings: CatalogSettings, payload: bytes) -> Relay:
    """POST the playground's request to the router's chat API; the body streams back
    event by event (closing the connection when the browser stops reading)."""
    url = router_url(settings) + "/v1/chat/completions"
    client = httpx.AsyncClient(timeout=CHAT_TIMEOUT)
    request = client.build_request("POST", url, content=payload, headers={
        **_headers(settings), "content-type": "application/json"})
    try:
        upstream = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        raise Unavailable(f"the router at {url} did not answer: {exc!r}") from None

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        finally:
            await upstream.aclose()
            await client.aclose()

    headers = {k: upstream.headers[k] for k in PASSED_HEADERS if k in upstream.headers}
    return Relay(upstream.status_code, upstream.headers.get("content-type", "text/plain"),
                 headers, body())
