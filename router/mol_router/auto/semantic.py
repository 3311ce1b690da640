"""The semantic signal's I/O: embeddings from an OpenAI-compatible ``/v1/embeddings``.

The experts' examples are embedded once per config, in one call made in the background
(started by the first request, retried by the next after a failure) and bounded by
``EXAMPLES_TIMEOUT`` rather than the per-turn timeout: tens of examples take longer
than one turn, most of all on a CPU embedding engine, and a request never waits for
them longer than the per-turn bound (it falls back meanwhile). The latest user turns are
cached (LRU), so a repeated turn costs no call. A turn's call is bounded by
``timeouts.embedding``; a failure raises :class:`EmbeddingError` with a short reason
(the metric label) and the caller falls back. The decision itself is pure:
:mod:`mol_router.auto.scores` (examples and keywords) or
:mod:`mol_router.auto.heads.model` (a trained head,
``semantic.head`` in the catalog or ``semantic.headFile``, kept current by
:mod:`mol_router.auto.heads.source`: then no examples are embedded at all, and only the
keywords the head's training data found unambiguous come first).

With a candidate head on trial (``semantic.canary``), :meth:`SemanticSignal.decide`
lets it route its share of users, and names the other head so the caller can compare
the two picks off the request path (:meth:`SemanticSignal.shadow`): the turn's
embedding is cached, so the comparison costs no second call for an embedded turn.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
import numpy as np
import orjson

from mol_platform.contract.router_config import RouterConfig, RouterSemantic
from mol_router.auto import scores
from mol_router.auto.heads.model import check_for
from mol_router.auto.heads.model import load as load_head
from mol_router.auto.heads.source import HeadSource, LoadedHead
from mol_router.routing.rules import in_canary

log = logging.getLogger("mol.router.semantic")


class EmbeddingError(Exception):
    """The embedding engine did not answer usefully; ``reason`` is the metric label
    (timeout, connect, status, invalid)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


EXAMPLES_TIMEOUT = 60.0
"""Seconds the experts' examples may take to embed (one call, in the background)."""


def check(cfg: RouterConfig) -> None:
    """Refuse a config whose trained head cannot be used (unreadable, malformed, an
    expert the deployment lacks, another embedding model): called before a config is
    applied, so a bad head keeps the running config."""
    if cfg.semantic is not None and cfg.semantic.head_file is not None:
        check_for(load_head(cfg.semantic.head_file), [e.name for e in cfg.experts],
                  cfg.semantic.model)


def embeddings_url(base: str) -> str:
    """``/v1/embeddings`` under a server's base URL (given with or without ``/v1``)."""
    return base.rstrip("/").removesuffix("/v1") + "/v1/embeddings"


async def post_embeddings(session: aiohttp.ClientSession, url: str, model: str,
                          texts: Sequence[str], bound: float) -> list[scores.Vector]:
    """Unit vectors for ``texts`` from one ``/v1/embeddings`` call, in order.

    Asked as base64 (OpenAI's ``encoding_format``): little-endian float32 bytes, which the
    engine writes and the router reads without formatting or parsing a decimal number per
    dimension (about 1 ms of a 13 ms routing step on the CPU engine, docs/benchmarks.md).
    A server that ignores the field and answers lists of floats is read as well."""
    payload = orjson.dumps({"model": model, "input": list(texts),
                            "encoding_format": "base64"})
    try:
        async with asyncio.timeout(bound):
            async with session.post(url, data=payload,
                                    headers={"Content-Type": "application/json"}) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise EmbeddingError("status", f"{url} answered {resp.status}")
    except TimeoutError:
        raise EmbeddingError("timeout", f"{url} took over {bound} s") from None
    except aiohttp.ClientError as exc:
        raise EmbeddingError("connect", f"{url}: {exc}") from None
    try:
        data = sorted(orjson.loads(body)["data"], key=lambda d: d["index"])
        vectors = [scores.unit(decoded(d["embedding"])) for d in data]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise EmbeddingError("invalid", f"{url}: {exc}") from None
    if len(vectors) != len(texts):
        raise EmbeddingError("invalid", f"{url}: {len(vectors)} embeddings for "
                             f"{len(texts)} inputs")
    return vectors


def decoded(embedding: object) -> scores.Vector | list[float]:
    """One answer's vector: base64 float32 (little-endian) or a list of floats."""
    if isinstance(embedding, str):
        raw = base64.b64decode(embedding, validate=True)
        if not raw or len(raw) % 4:
            raise ValueError(f"a base64 embedding of {len(raw)} bytes is not float32")
        return np.frombuffer(raw, dtype="<f4")
    if not isinstance(embedding, list):
        raise TypeError(f"an embedding is a list or base64, not {type(embedding).__name__}")
    return embedding


async def embed_many(url: str, model: str, texts: Sequence[str], *, batch: int = 64,
                     bound: float = 120.0) -> scores.Vector:
    """Unit embeddings of many texts (one row each), ``batch`` per call: for training
    and the benchmark, not the request path."""
    out: list[scores.Vector] = []
    async with aiohttp.ClientSession() as session:
        for at in range(0, len(texts), batch):
            out += await post_embeddings(session, embeddings_url(url), model,
                                         texts[at:at + batch], bound)
    return np.stack(out) if out else np.zeros((0, 0))


CANARY_KEY = "router-head"
"""What the sticky per-user canary split hashes beside the user (as an expert's name)."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A turn's decision: the verdict, the embedding failure it fell back from, the head
    whose pick it is (keywords of that head included; None for examples or no pick), its
    role (``stable``, ``candidate``; empty without heads), and ``other``: the head to
    compare the pick with while a canary runs."""

    verdict: scores.Verdict
    error: EmbeddingError | None = None
    head: LoadedHead | None = None
    role: str = ""
    other: LoadedHead | None = None


class SemanticSignal:
    """One config's semantic signal: its example index (or trained heads) and a cache of
    recent turns."""

    def __init__(self, cfg: RouterSemantic, timeout: float,
                 heads: HeadSource | None = None) -> None:
        self.cfg = cfg
        self.timeout = timeout
        self.url = embeddings_url(cfg.embeddings_url)
        self._index: tuple[scores.ExpertIndex, ...] | None = None
        self._building: asyncio.Task[tuple[scores.ExpertIndex, ...]] | None = None
        self._cache: OrderedDict[str, scores.Vector] = OrderedDict()
        # The runtime hands its source in; alone (explain, the benchmark) the signal
        # builds the one its config names, a file's head at once.
        self.heads = heads if heads is not None else HeadSource.of(cfg, (), None)
        self._shadows: set[asyncio.Task[None]] = set()
        # The config's keywords alone (no vectors): keywords first and an engine failure
        # without a head (a head brings its own measured keywords).
        self._keywords = tuple(scores.expert_index(e.name, [], e.keywords)
                               for e in cfg.experts)

    async def embed(self, session: aiohttp.ClientSession, texts: Sequence[str],
                    bound: float | None = None) -> list[scores.Vector]:
        """Unit vectors for ``texts``, in order (within ``bound`` seconds, else the
        per-turn timeout)."""
        return await post_embeddings(session, self.url, self.cfg.model, texts,
                                     self.timeout if bound is None else bound)

    async def _build(self, session: aiohttp.ClientSession) -> tuple[scores.ExpertIndex, ...]:
        experts = self.cfg.experts
        texts = [x for e in experts for x in e.examples]
        vectors = await self.embed(session, texts, EXAMPLES_TIMEOUT) if texts else []
        out, at = [], 0
        for e in experts:
            out.append(scores.expert_index(e.name, vectors[at:at + len(e.examples)],
                                            e.keywords))
            at += len(e.examples)
        self._index = tuple(out)
        return self._index

    def _task(self, session: aiohttp.ClientSession
              ) -> asyncio.Task[tuple[scores.ExpertIndex, ...]]:
        task = self._building
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            task = self._building = asyncio.create_task(self._build(session))
            task.add_done_callback(_retrieve)
        return task

    def _needs_examples(self) -> bool:
        return not (self.heads is not None and self.heads.wanted) and any(
            e.examples for e in self.cfg.experts)

    def warm(self, session: aiohttp.ClientSession) -> None:
        """Start embedding the experts' examples now, when the config applies: else the
        first requests after a start fall back (to keywords, the classifier) while a CPU
        engine embeds tens of examples, and a user's first example request is not the
        semantic decision the banner promised."""
        if self._needs_examples():
            self._task(session)

    @property
    def state(self) -> str:
        """``ready``, ``building``, ``failed`` (the next request retries) or ``unused``
        (a trained head decides, or no examples): what ``/readyz`` reports."""
        if not self._needs_examples():
            return "unused"
        if self._index is not None:
            return "ready"
        task = self._building
        if task is not None and task.done():
            return "failed"
        return "building"

    async def ready(self, session: aiohttp.ClientSession) -> tuple[scores.ExpertIndex, ...]:
        """The experts' example vectors, waiting for the whole build (``EXAMPLES_TIMEOUT``):
        for callers that time turns apart from the examples (explain, the benchmark)."""
        if self._index is not None:
            return self._index
        return await asyncio.shield(self._task(session))

    async def index(self, session: aiohttp.ClientSession) -> tuple[scores.ExpertIndex, ...]:
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
        """Stop a build and comparisons still running (the config was replaced or the
        router stops)."""
        if self._building is not None and not self._building.done():
            self._building.cancel()
        for task in list(self._shadows):
            task.cancel()

    async def query(self, session: aiohttp.ClientSession, text: str) -> scores.Vector:
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

    def turn(self, text: str) -> str:
        """What the signal reads of a user turn (its last ``maxChars``): what is embedded,
        and what a recorded decision holds."""
        return text[-self.cfg.max_chars:]

    async def verdict(self, session: aiohttp.ClientSession, text: str
                      ) -> tuple[scores.Verdict, EmbeddingError | None]:
        """The serving decision for a user turn (no canary), and the embedding failure it
        fell back from (then only keywords could decide)."""
        decided = await self.decide(session, text)
        return decided.verdict, decided.error

    async def decide(self, session: aiohttp.ClientSession, text: str,
                     user: str | None = None) -> Decided:
        """The decision for a user turn. With heads: the candidate's for its share of
        users (``semantic.canary.weight``, sticky per ``user``), else the serving head's;
        ``other`` names the head to compare with. Without: examples and keywords."""
        text = self.turn(text)
        heads = self.heads
        if heads is not None and heads.wanted:
            stable, candidate = heads.stable, heads.candidate
            routed, other, role = stable, candidate, "stable"
            canary = self.cfg.canary
            if stable is not None and candidate is not None and canary is not None \
                    and canary.weight > 0 and in_canary(CANARY_KEY, user, canary.weight):
                routed, other, role = candidate, stable, "candidate"
            verdict, error = await self._head_verdict(session, text, routed)
            decided = routed if verdict.expert is not None else None
            return Decided(verdict, error, decided, role if decided else "",
                           other if stable is not None else None)
        verdict, error = await self._examples_verdict(session, text)
        return Decided(verdict, error)

    async def _examples_verdict(self, session: aiohttp.ClientSession, text: str
                                ) -> tuple[scores.Verdict, EmbeddingError | None]:
        cfg = self.cfg
        if cfg.keywords_decide:
            settled = scores.keyword_verdict(self._keywords, text)
            if settled is not None:
                return settled, None
        try:
            index = await self.index(session)
            query = await self.query(session, text) if text.strip() else None
        except EmbeddingError as exc:
            ranked = scores.scores(self._keywords, text, None)
            return scores.decide(ranked, cfg.threshold, cfg.margin, embedded=False), exc
        width = next((e.examples.shape[1] for e in index if e.centroid is not None), None)
        if query is not None and width is not None and query.shape != (width,):
            # the engine's model changed under the config: its examples are re-embedded
            self._index = self._building = None
            mismatch = EmbeddingError("invalid", f"{self.url}: {query.shape[0]} dimensions, "
                                      f"the examples have {width}")
            return scores.decide(scores.scores(self._keywords, text, None), cfg.threshold,
                                  cfg.margin, embedded=False), mismatch
        ranked = scores.scores(index, text, query)
        return scores.decide(ranked, cfg.threshold, cfg.margin,
                              embedded=query is not None), None

    async def _head_verdict(self, session: aiohttp.ClientSession, text: str,
                            loaded: LoadedHead | None
                            ) -> tuple[scores.Verdict, EmbeddingError | None]:
        """A trained head's decision: its measured keywords first (``keywordsDecide``),
        then the turn's embedding through the head; keywords alone when the engine
        fails, as with examples. No head (not fetched yet, refused): undecided."""
        keywords = loaded.keywords if loaded is not None else self._keywords
        if self.cfg.keywords_decide:
            settled = scores.keyword_verdict(keywords, text)
            if settled is not None:
                return settled, None
        if loaded is None:
            return scores.Verdict(None, "none", 0.0, 0.0, (), "no-head"), None
        head = loaded.head
        if not text.strip():
            return scores.decide(scores.scores(keywords, text, None),
                                  self.cfg.threshold, 0.0, embedded=False), None
        try:
            query = await self.query(session, text)
        except EmbeddingError as exc:
            return scores.decide(scores.scores(keywords, text, None),
                                  self.cfg.threshold, 0.0, embedded=False), exc
        if query.shape != (head.dims,):
            mismatch = EmbeddingError("invalid", f"{self.url}: {query.shape[0]} dimensions, "
                                      f"the head was trained on {head.dims}")
            return scores.decide(scores.scores(keywords, text, None),
                                  self.cfg.threshold, 0.0, embedded=False), mismatch
        return head.verdict(query, text, keywords), None

    def shadow(self, session: aiohttp.ClientSession, text: str, other: LoadedHead,
               done: Callable[[scores.Verdict], None], limit: int = 256) -> bool:
        """Compute ``other``'s verdict for the turn in the background and hand it to
        ``done`` (the request does not wait: a turn that keywords settled may need an
        embedding call for the other head). False, doing nothing, when ``limit``
        comparisons are already running: a slow engine must not pile them up."""
        if len(self._shadows) >= limit:
            return False

        async def run() -> None:
            verdict, error = await self._head_verdict(session, self.turn(text), other)
            if error is None:
                done(verdict)

        task = asyncio.create_task(run())
        self._shadows.add(task)
        task.add_done_callback(self._shadow_done)
        return True

    def _shadow_done(self, task: asyncio.Task[None]) -> None:
        self._shadows.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("head comparison failed: %r", task.exception())


def _retrieve(task: asyncio.Task[tuple[scores.ExpertIndex, ...]]) -> None:
    """Mark a failed build's exception seen: the next request retries it."""
    if not task.cancelled():
        task.exception()
