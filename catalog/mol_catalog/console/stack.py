"""The running stack as the console shows it, read from the configured router: its
``/status`` (experts with their stable and canary versions, engines with their resident
adapters), its ``/metrics`` (request rates, mean time to first token of streamed answers
and mean whole-answer time per expert), its
``/v1/models`` (what the playground may ask), and its chat API (the playground's calls,
streamed through)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from mol_catalog.errors import BadRequest, Unavailable
from mol_catalog.settings import CatalogSettings

REQUESTS = "mol_router_requests"  # the parser drops a counter's _total suffix
TTFT = "mol_router_time_to_first_token_seconds"  # streamed answers only
DURATION = "mol_router_request_duration_seconds"  # every answer
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
    duration_sum: dict[str, float] = field(default_factory=dict)
    duration_count: dict[str, float] = field(default_factory=dict)


def _sample(text: str) -> _Sample:
    """Per-expert totals from the router's exposition (summed over versions and codes)."""
    sample = _Sample(time.monotonic())
    targets = {f"{REQUESTS}_total": sample.requests, f"{TTFT}_sum": sample.ttft_sum,
               f"{TTFT}_count": sample.ttft_count, f"{DURATION}_sum": sample.duration_sum,
               f"{DURATION}_count": sample.duration_count}
    for family in text_string_to_metric_families(text):
        if family.name not in (REQUESTS, TTFT, DURATION):
            continue
        for s in family.samples:
            target = targets.get(s.name)
            if target is not None:
                expert = s.labels.get("expert", "")
                target[expert] = target.get(expert, 0.0) + s.value
    return sample


def _mean_ms(now_sum: float, now_count: float, before_sum: float,
             before_count: float) -> float | None:
    """The mean since the previous scrape when something was added in between, else the
    mean since the router started; None when there is nothing to average."""
    if now_count > before_count:
        return (now_sum - before_sum) / (now_count - before_count) * 1000
    return now_sum / now_count * 1000 if now_count else None


# The previous scrape per router URL: rates are the difference to it (one per process).
_PREVIOUS: dict[str, _Sample] = {}


def _rates(url: str, now: _Sample) -> dict[str, dict[str, float | None]]:
    """Per expert since the previous scrape: requests per second, the mean time to first
    token (ms) and the mean whole-answer time (ms), each the mean since the router
    started when nothing was answered in between. Time to first token exists only for
    streamed answers (the router measures it at the first content byte it streams), so
    ``streamed`` says how many there were: a stack served only whole answers has
    requests and no TTFT."""
    before = _PREVIOUS.get(url)
    _PREVIOUS[url] = now
    if before is not None and now.at <= before.at:
        before = None
    was = before or _Sample(0.0)  # no scrape before: everything since the router started
    out: dict[str, dict[str, float | None]] = {}
    for expert in set(now.requests) | set(now.ttft_count) | set(now.duration_count):
        total = now.requests.get(expert, 0.0)
        streamed = now.ttft_count.get(expert, 0.0)
        rate = None if before is None else \
            (total - before.requests.get(expert, 0.0)) / (now.at - before.at)
        ttft = _mean_ms(now.ttft_sum.get(expert, 0.0), streamed,
                        was.ttft_sum.get(expert, 0.0), was.ttft_count.get(expert, 0.0))
        latency = _mean_ms(now.duration_sum.get(expert, 0.0),
                           now.duration_count.get(expert, 0.0),
                           was.duration_sum.get(expert, 0.0),
                           was.duration_count.get(expert, 0.0))
        out[expert] = {"requests": total, "streamed": streamed, "rate": rate,
                       "ttft_ms": ttft, "latency_ms": latency}
    return out


def shown(live: dict[str, Any]) -> dict[str, Any]:
    """``live`` with the texts the page shows (the page and its refresh share them): a
    figure, else why there is none."""
    def ms(value: float | None) -> str | None:
        return None if value is None else f"{value:.0f} ms"

    none = "no requests yet" if not live["requests"] else None
    return {**live, "ttft_text": ms(live["ttft_ms"]) or none or "no streamed requests yet",
            "latency_text": ms(live["latency_ms"]) or none or "none yet"}


async def snapshot(settings: CatalogSettings) -> dict[str, Any]:
    """The stack page's data: the router's status with live figures per expert."""
    status: dict[str, Any] = (await _get(settings, "/status")).json()
    figures = _rates(router_url(settings), _sample((await _get(settings, "/metrics")).text))
    for expert in status.get("experts", []):
        expert["live"] = shown(figures.get(expert["name"], {
            "requests": 0.0, "streamed": 0.0, "rate": None, "ttft_ms": None,
            "latency_ms": None}))
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
    event by event (closing the connection when the browser stops reading, ending with
    an error event when the router's stream breaks)."""
    url = router_url(settings) + "/v1/chat/completions"
    client = httpx.AsyncClient(timeout=CHAT_TIMEOUT)
    request = client.build_request("POST", url, content=payload, headers={
        **_headers(settings), "content-type": "application/json"})
    try:
        upstream = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        raise Unavailable(f"the router at {url} did not answer: {exc!r}") from None

    events = upstream.headers.get("content-type", "").startswith("text/event-stream")

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            if not events:
                raise
            # The router's stream broke (headers long gone): the browser's ends with an
            # error event saying where, as the router's own do, instead of being cut.
            yield b"\n\ndata: " + orjson.dumps({"error": {
                "message": f"the router's stream was cut ({exc.__class__.__name__})",
                "type": "upstream_error", "code": 502}}) + b"\n\n"
        finally:
            await upstream.aclose()
            await client.aclose()

    headers = {k: upstream.headers[k] for k in PASSED_HEADERS if k in upstream.headers}
    return Relay(upstream.status_code, upstream.headers.get("content-type", "text/plain"),
                 headers, body())
