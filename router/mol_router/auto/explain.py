"""``mol router explain``: the semantic signal's scores for one turn, as the router
would compute them, without calling an LLM engine."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from pathlib import Path

import aiohttp

from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract.router_config import RouterConfig
from mol_platform.contract.spec_router import CLASSIFIER_MODES
from mol_router.auto.heads.source import HeadSource
from mol_router.auto.semantic import EmbeddingError, SemanticSignal


async def _heads(cfg: RouterConfig) -> HeadSource | None:
    """The heads a config names (a catalog head fetched once), else None."""
    sem = cfg.semantic
    if sem is None or sem.head is None or cfg.catalog_url is None:
        return HeadSource.of(sem, [e.name for e in cfg.experts], None)
    token = None
    if cfg.catalog_token_file:
        raw = await asyncio.to_thread(Path(cfg.catalog_token_file).read_text, "utf-8")
        token = raw.strip() or None
    client = AsyncCatalogClient(cfg.catalog_url, token)
    try:
        source = HeadSource.of(sem, [e.name for e in cfg.experts], client)
        if source is not None:
            await source.refresh()
    finally:
        await client.aclose()
    return source


async def explain(cfg: RouterConfig, prompt: str) -> dict[str, object]:
    """The scores best first, the deciding signal, and the ``x-mol-route`` value the
    router would send (the classifier's answer is not asked for: ``classifier?``).
    With a trained head: ``head`` names it (``ns/name@v3``, or the file) and each
    score is the head's probability with its keyword hits (a head has no examples, so
    no nearest or centroid similarity)."""
    assert cfg.semantic is not None
    heads = await _heads(cfg)
    signal = SemanticSignal(cfg.semantic, cfg.timeouts.embedding, heads)
    if heads is not None and heads.stable is None:
        raise ValueError(heads.errors.get("stable", "the trained head is missing"))
    async with aiohttp.ClientSession() as session:
        with contextlib.suppress(EmbeddingError):  # verdict() reports it
            await signal.ready(session)  # the examples: not part of one turn's cost
        started = time.perf_counter()
        decided = await signal.decide(session, prompt)
        seconds = time.perf_counter() - started
    verdict, error = decided.verdict, decided.error
    loaded = heads.stable if heads is not None else None
    label = loaded.label if loaded is not None else None
    why = [f"embedding={error.reason}"] if error is not None else []
    if verdict.expert is not None:
        expert = verdict.expert
        first = [verdict.signal] + ([f"head={label}"] if decided.head is not None else [])
        first += [f"score={verdict.score:.3f}", f"margin={verdict.margin:.3f}"]
    else:
        why.append(f"semantic={verdict.reason}")
        classifier = cfg.mode in CLASSIFIER_MODES and cfg.classifier is not None
        expert = "classifier?" if classifier else cfg.default
        first = ["classifier" if classifier else "default"]
    rows = [dataclasses.asdict(s) for s in verdict.scores]
    if label is not None:
        rows = [{"expert": r["expert"], "probability": r["score"], "keywords": r["keywords"]}
                for r in rows]
    return {"expert": expert, "signal": verdict.signal, "route": "; ".join([*first, *why]),
            "head": label, "seconds": round(seconds, 6), "scores": rows}
