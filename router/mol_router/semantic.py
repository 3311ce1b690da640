"""The semantic signal's I/O: embeddings from an OpenAI-compatible ``/v1/embeddings``.

The experts' examples are embedded once per config (in one call, retried on the next
request after a failure) and the latest user turns are cached (LRU), so a repeated
turn costs no call. Every call is bounded by ``timeouts.embedding``; a failure raises
:class:`EmbeddingError` with a short reason (the metric label) and the caller falls
back. The decision itself is pure: :mod:`mol_router.signals`.
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


class SemanticSignal:
    """One config's semantic signal: its example index and a cache of recent turns."""

    def __init__(self, cfg: RouterSemantic, timeout: float) -> None:
        self.cfg = cfg
        self.timeout = timeout
        self.url = cfg.embeddings_url.rstrip("/").removesuffix("/v1") + "/v1/embeddings"
        self._index: tuple[signals.ExpertIndex, ...] | None = None
        self._lock = asyncio.Lock()
        self._cache: OrderedDict[str, signals.Vector] = OrderedDict()

    async def embed(self, session: aiohttp.ClientSession,
                    texts: Sequence[str]) -> list[signals.Vector]:
        """Unit vectors for ``texts``, in order."""
        payload = orjson.dumps({"model": self.cfg.model, "input": list(texts)})
        try:
            async with asyncio.timeout(self.timeout):
                async with session.post(self.url, data=payload,
                                        headers={"Content-Type": "application/json"}) as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        raise EmbeddingError("status", f"{self.url} answered {resp.status}")
        except TimeoutError:
            raise EmbeddingError("timeout", f"{self.url} took over {self.timeout} s") from None
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

    async def index(self, session: aiohttp.ClientSession) -> tuple[signals.ExpertIndex, ...]:
        """The experts' example vectors, embedded on first use."""
        if self._index is not None:
            return self._index
        async with self._lock:
            if self._index is None:
                experts = self.cfg.experts
                texts = [x for e in experts for x in e.examples]
                vectors = await self.embed(session, texts) if texts else []
                out, at = [], 0
                for e in experts:
                    out.append(signals.expert_index(
                        e.name, vectors[at:at + len(e.examples)], e.keywords))
                    at += len(e.examples)
                self._index = tuple(out)
            return self._index

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
        try:
            index = await self.index(session)
            query = await self.query(session, text) if text.strip() else None
        except EmbeddingError as exc:
            keywords_only = tuple(signals.expert_index(e.name, [], e.keywords)
                                  for e in cfg.experts)
            ranked = signals.scores(keywords_only, text, None)
            return signals.decide(ranked, cfg.threshold, cfg.margin, embedded=False), exc
        ranked = signals.scores(index, text, query)
        return signals.decide(ranked, cfg.threshold, cfg.margin,
                              embedded=query is not None), None
