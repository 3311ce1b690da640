"""Steady traffic through the router and what each request got (bench/faults.py).

``concurrency`` clients each send one request after another (streamed and whole chat
requests in turn, over several adapters) until the run's time is up, and every request
is classified from the client's side alone:

- ``answered``: 200 and the whole answer (a stream ends with ``data: [DONE]`` and no
  error event), from the adapter version the reference resolved to;
- ``wrong``: a whole answer from another version than the one resolved;
- ``clean``: an error a client can act on: a JSON error body with a code, or a stream
  whose last events are ``data: {"error": ...}`` and ``data: [DONE]``;
- ``cut``: the connection closed without either (only the death of the process that
  held the connection, a router, can leave nothing better);
- ``hung``: no byte for ``hung_s`` seconds;
- ``bad``: anything else (a malformed answer).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

KINDS = ("answered", "clean", "cut", "hung", "wrong", "bad")


@dataclass(frozen=True)
class Outcome:
    sent: float  # monotonic
    done: float
    kind: str
    stream: bool
    ref: str
    detail: str = ""

    @property
    def ms(self) -> float:
        return (self.done - self.sent) * 1000


@dataclass
class Traffic:
    """Requests to ``url`` for the references in ``expect`` ({ref: immutable name})."""

    url: str
    expect: Mapping[str, str]
    concurrency: int = 16
    hung_s: float = 30.0
    max_tokens: int = 16
    outcomes: list[Outcome] = field(default_factory=list)
    _started: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _count: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def inflight(self) -> int:
        """Requests sent and not ended yet."""
        return self._started - len(self.outcomes)

    async def run(self, seconds: float) -> None:
        """Send until ``seconds`` pass or :meth:`stop`; returns once all have ended."""
        self._stop.clear()
        deadline = time.monotonic() + seconds
        connector = aiohttp.TCPConnector(limit=self.concurrency, force_close=False)
        async with aiohttp.ClientSession(connector=connector) as http:
            await asyncio.gather(*(self._client(http, deadline)
                                   for _ in range(self.concurrency)))

    def stop(self) -> None:
        self._stop.set()

    async def _client(self, http: aiohttp.ClientSession, deadline: float) -> None:
        refs = list(self.expect)
        while time.monotonic() < deadline and not self._stop.is_set():
            i = next(self._count)
            self._started += 1
            self.outcomes.append(await self.one(http, refs[i % len(refs)], i % 2 == 0, i))

    async def one(self, http: aiohttp.ClientSession, ref: str, stream: bool,
                  i: int = 0) -> Outcome:
        body = {"model": ref, "stream": stream, "max_tokens": self.max_tokens,
                "messages": [{"role": "user", "content": f"request {i}: say something"}]}
        sent = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.hung_s,
                                        sock_read=self.hung_s)
        try:
            async with http.post(self.url + "/v1/chat/completions", json=body,
                                 timeout=timeout) as resp:
                data = await resp.read()
                kind, detail = classify(resp.status, data, stream, self.expect.get(ref))
        except TimeoutError:
            kind, detail = "hung", f"no byte for {self.hung_s:g} s"
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            kind, detail = "cut", type(exc).__name__
        return Outcome(sent, time.monotonic(), kind, stream, ref, detail)


def classify(status: int, data: bytes, stream: bool, want: str | None) -> tuple[str, str]:
    """(kind, detail) of one answer (see the module docstring)."""
    if status != 200 or not stream:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return "bad", f"{status}: not JSON: {data[:120]!r}"
        if status != 200:
            error = obj.get("error") if isinstance(obj, dict) else None
            if isinstance(error, dict) and error.get("code"):
                return "clean", f"{status} {error['code']}"
            return "bad", f"{status}: {data[:120]!r}"
        model = obj.get("model") if isinstance(obj, dict) else None
        choices = obj.get("choices") if isinstance(obj, dict) else None
        if not choices:
            return "bad", "200 without choices"
        return ("answered", "") if want is None or model == want else ("wrong", str(model))
    events = [line[6:] for line in data.decode("utf-8", "replace").split("\n\n")
              if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return "bad", "stream without data: [DONE] at its end"
    chunks = []
    for raw in events[:-1]:
        try:
            chunks.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            return "bad", f"event not JSON: {raw[:80]}"
    if chunks and "error" in chunks[-1]:
        code = chunks[-1]["error"].get("code") if isinstance(chunks[-1]["error"], dict) else None
        return ("clean", f"stream error {code}") if code else ("bad", "error without code")
    models = {c.get("model") for c in chunks}
    if want is not None and models != {want}:
        return "wrong", str(sorted(map(str, models)))
    return "answered", ""


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    return {k: sum(1 for o in outcomes if o.kind == k) for k in KINDS}
