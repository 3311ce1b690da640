"""The semantic signal's I/O: embeddings from an OpenAI-compatible ``/v1/embeddings``.

The experts' examples are embedded once per config, in one call made in the background
(started by the first request, retried by the next after a failure) and bounded by
``EXAMPLES_TIMEOUT`` rather than the per-turn timeout: tens of examples take longer
than one turn, most of all on a CPU embedding engine, and a request never waits for
them longer than the per-turn bound (it falls back meanwhile). The latest user turns are
cached (LRU), so a repeated turn costs no call. A turn's call is bounded by
``timeouts.embedding``; a failure raises :class:`EmbeddingError` with a short reason
(the metric label) and the caller falls back. The decision itself is pure:
:mod:`mol_router.signals`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

import aiohttp
import orjson

from mol_platform.contract.router_config import RouterSemantic
from mol_router import signals


class EmbeddingError(Exception):
    """The embedding engine did not answer usefully; ``reason`` is the metric label
    (timeout, connect, status, invalid)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


EXAMPLES_TIMEOUT = 60.0
"""Seconds the experts' examples may take to embed (one call, in the background)."""


class SemanticSignal:
    """One config's semantic signal: its example index and a cache of recent turns."""

    def __init__(self, cfg: RouterSemantic, timeout: float) -> None:
        self.cfg = cfg
        self.timeout = timeout
        self.url = cfg.embeddings_url.rstrip("/").removesuffix("/v1") + "/v1/embeddings"
        self._index: tuple[signals.ExpertIndex, ...] | None = None
        self._building: asyncio.Task[tuple[signals.ExpertIndex, ...]] | None = None
        self._cache: OrderedDict[str, signals.Vector] = OrderedDict()
        # The keywords alone (no vectors): for keywords first and for an engine failure.
        self._keywords = tuple(signals.expert_index(e.name, [], e.keywords)
                               for e in cfg.experts)

    async def embed(self, session: aiohttp.ClientSession, texts: Sequence[str],
                    bound: float | None = None) -> list[signals.Vector]:
        """Unit vectors for ``texts``, in order (within ``bound`` seconds, else the
        per-turn timeout)."""
        payload = orjson.dumps({"model": self.cfg.model, "input": list(texts)})
        timeout = self.timeout if bound is None else bound
        try:
            async with asyncio.timeout(timeout):
                async with session.post(self.url, data=payload,
                                        headers={"Content-Type": "application/json"}) as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        raise EmbeddingError("status", f"{self.url} answered {resp.status}")
        except TimeoutError:
            raise EmbeddingError("timeout", f"{self.url} took over {timeout} s") from None
        except aiohttp.ClientError as exc:
            raise EmbeddingError("connect", f"{self.url}: {exc}") from None
        try:
            data = sorted(orjson.loads(body)["data"], key=lambda d: d["index"])
            vectors = [signals.unit(d["embedding"]) for d in data]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError("invalid", f"{self.url}: {exc}") from None
        if len(vectors) != len(texts):
            raise EmbeddingError("invalid", f"{self.url}: {len(vectors)} embeddings for "
                                 f"{len(texts)} inputs")
        return vectors

    async def _build(self, session: aiohttp.ClientSession) -> tuple[signals.ExpertIndex, ...]:
        experts = self.cfg.experts
        texts = [x for e in experts for x in e.examples]
        vectors = await self.embed(session, texts, EXAMPLES_TIMEOUT) if texts else []
        out, at = [], 0
        for e in experts:
            out.append(signals.expert_index(e.name, vectors[at:at + len(e.examples)],
                                            e.keywords))
            at += len(e.examples)
        self._index = tuple(out)
        return self._index

    def _task(self, session: aiohttp.ClientSession
              ) -> asyncio.Task[tuple[signals.ExpertIndex, ...]]:
        task = self._building
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            task = self._building = asyncio.create_task(self._build(session))
            task.add_done_callback(_retrieve)
        return task

    async def ready(self, session: aiohttp.ClientSession) -> tuple[signals.ExpertIndex, ...]:
        """The experts' example vectors, waiting for the whole build (``EXAMPLES_TIMEOUT``):
        for callers that time turns apart from the examples (explain, the benchmark)."""
        if self._index is not None:
            return self._index
        return await asyncio.shield(self._task(session))

    async def index(self, session: aiohttp.ClientSession) -> tuple[signals.ExpertIndex, ...]:
        """The experts' example vectors: built in the background on first use; a caller
        waits for them at most the per-turn timeout."""
        if self._index is not None:
            return self._index
        task = self._task(session)
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.shield(task)
        except TimeoutError:
            raise EmbeddingError("timeout", f"{self.url}: the experts' examples are still "
                                 "being embedded") from None

    def close(self) -> None:
        """Stop a build still running (the config was replaced or the router stops)."""
        if self._building is not None and not self._building.done():
            self._building.cancel()

    async def query(self, session: aiohttp.ClientSession, text: str) -> signals.Vector:
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            return hit
        (vector,) = await self.embed(session, [text])
        if self.cfg.cache_size:
            self._cache[text] = vector
            if len(self._cache) > self.cfg.cache_size:
                self._cache.popitem(last=False)
        return vector

    async def verdict(self, session: aiohttp.ClientSession, text: str
                      ) -> tuple[signals.Verdict, EmbeddingError | None]:
        """The decision for a user turn, and the embedding failure it fell back from
        (then only keywords could decide)."""
        text = text[-self.cfg.max_chars:]
        cfg = self.cfg
        if cfg.keywords_decide:
            settled = signals.keyword_verdict(self._keywords, text)
            if settled is not None:
                return settled, None
        try:
            index = await self.index(session)
            query = await self.query(session, text) if text.strip() else None
        except EmbeddingError as exc:
            ranked = signals.scores(self._keywords, text, None)
            return signals.decide(ranked, cfg.threshold, cfg.margin, embedded=False), exc
        width = next((e.examples.shape[1] for e in index if e.centroid is not None), None)
        if query is not None and width is not None and query.shape != (width,):
            # the engine's model changed under the config: its examples are re-embedded
            self._index = self._building = None
            mismatch = EmbeddingError("invalid", f"{self.url}: {query.shape[0]} dimensions, "
                                      f"the examples have {width}")
            return signals.decide(signals.scores(self._keywords, text, None), cfg.threshold,
                                  cfg.margin, embedded=False), mismatch
        ranked = signals.scores(index, text, query)
        return signals.decide(ranked, cfg.threshold, cfg.margin,
                              embedded=query is not None), None


def _retrieve(task: asyncio.Task[tuple[signals.ExpertIndex, ...]]) -> None:
    """Mark a failed build's exception seen: the next request retries it."""
    if not task.cancelled():
        task.exception()
