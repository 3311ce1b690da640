"""Closed-loop streamed completions: throughput and time to first token.

``concurrency`` clients each send their next request as soon as the last one ended,
``requests`` in all, naming the models in turn (so N models give N distinct adapters
in every batch). Every request asks for exactly ``max_tokens`` (``ignore_eos``: a
random model would otherwise stop at a random token) and for the usage chunk, whose
``completion_tokens`` is what the throughput counts: tokens the engine says it made,
not tokens assumed. aiohttp, not httpx: httpx costs milliseconds of CPU per request
under concurrency (bench/http_clients.py, docs/benchmarks.md), which would be charged to
the server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from _report import percentile


@dataclass(frozen=True)
class Traffic:
    target: str  # "engine" or "router"
    models: tuple[str, ...]
    requests: int
    concurrency: int
    max_tokens: int
    output_tokens: int
    seconds: float
    ttft_s: tuple[float, ...]
    errors: int
    first_error: str

    def figures(self, adapters: int) -> dict[str, Any]:
        done = self.ttft_s or (0.0,)
        return {
            "target": self.target, "adapters": adapters, "requests": self.requests,
            "concurrency": self.concurrency, "max_tokens": self.max_tokens,
            "output_tokens": self.output_tokens, "seconds": round(self.seconds, 4),
            "tokens_per_s": round(self.output_tokens / self.seconds, 2) if self.seconds else 0.0,
            "ttft_p50_s": round(percentile(done, 50), 5),
            "ttft_p99_s": round(percentile(done, 99), 5),
            "errors": self.errors, "first_error": self.first_error,
        }


class TrafficError(RuntimeError):
    """A request was refused or its stream ended without a token."""


async def _one(session: aiohttp.ClientSession, url: str, model: str, prompt: str,
               max_tokens: int) -> tuple[float, int]:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first: float | None = None
    tokens = 0
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise TrafficError(f"{model}: HTTP {resp.status}: {(await resp.text())[:300]}")
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise TrafficError(f"{model}: error in the stream: {chunk['error']}")
            choices = chunk.get("choices") or []
            # A chunk per token, its text possibly empty: the GPU base's random logits
            # pick ids beyond its small locally trained tokenizer, which decode to "".
            if first is None and choices:
                first = time.perf_counter() - start
            usage = chunk.get("usage")
            if usage:
                tokens = int(usage["completion_tokens"])
    if first is None:
        raise TrafficError(f"{model}: the stream ended without a token")
    return first, tokens


async def _closed_loop(url: str, target: str, models: Sequence[str], prompt: str, *,
                       requests: int, concurrency: int, max_tokens: int,
                       timeout_s: float) -> Traffic:
    order = [models[i % len(models)] for i in range(requests)]
    ttft: list[float] = []
    tokens = [0]
    errors: list[str] = []
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn,
                                     timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        start = time.perf_counter()

        async def client() -> None:
            while order:
                model = order.pop()
                try:
                    first, made = await _one(session, url, model, prompt, max_tokens)
                except (aiohttp.ClientError, TimeoutError, TrafficError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                ttft.append(first)
                tokens[0] += made

        await asyncio.gather(*(client() for _ in range(min(concurrency, requests))))
        seconds = time.perf_counter() - start
    return Traffic(target, tuple(models), requests, concurrency, max_tokens, tokens[0],
                   seconds, tuple(ttft), len(errors), errors[0] if errors else "")


def run(url: str, target: str, models: Sequence[str], prompt: str, *, requests: int,
        concurrency: int, max_tokens: int, timeout_s: float = 300.0) -> Traffic:
    """One measured run; a warm-up (one request per model, all at once) comes first so
    that adapter loads are not in the figures."""
    if not models:
        raise ValueError("a traffic run needs at least one model")
    warm = touch(url, models, prompt, timeout_s, target=target)
    if warm.errors:
        raise TrafficError(f"warm-up through the {target}: {warm.errors} of "
                           f"{warm.requests} failed; first: {warm.first_error}")
    return asyncio.run(_closed_loop(url, target, models, prompt, requests=requests,
                                    concurrency=concurrency, max_tokens=max_tokens,
                                    timeout_s=timeout_s))


def touch(url: str, models: Sequence[str], prompt: str, timeout_s: float = 300.0,
          target: str = "engine") -> Traffic:
    """One one-token request per model, all at once (fills GPU slots with them)."""
    return asyncio.run(_closed_loop(url, target, models, prompt, requests=len(models),
                                    concurrency=len(models), max_tokens=1,
                                    timeout_s=timeout_s))
