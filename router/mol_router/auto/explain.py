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


async def _catalog_heads(cfg: RouterConfig) -> HeadSource | None:
    """The serving head a config names in the catalog (fetched once), else None."""
    sem = cfg.semantic
    if sem is None or sem.head is None or cfg.catalog_url is None:
        return None
    token = None
    if cfg.catalog_token_file:
        raw = await asyncio.to_thread(Path(cfg.catalog_token_file).read_text, "utf-8")
        token = raw.strip() or None
    client = AsyncCatalogClient(cfg.catalog_url, token)
    try:
        source = HeadSource(client, {"stable": sem.head}, [e.name for e in cfg.experts],
                            sem.model)
        await source.refresh()
    finally:
        await client.aclose()
    return source


async def explain(cfg: RouterConfig, prompt: str) -> dict[str, object]:
    """The scores best first, the deciding signal, and the ``x-mol-route`` value the
    router would send (the classifier's answer is not asked for: ``classifier?``)."""
    assert cfg.semantic is not None
    heads = await _catalog_heads(cfg)
    signal = SemanticSignal(cfg.semantic, cfg.timeouts.embedding, heads)
    if heads is not None and heads.stable is None:
        raise ValueError(heads.errors.get("stable", "the trained head is missing"))
    async with aiohttp.ClientSession() as session:
        with contextlib.suppress(EmbeddingError):  # verdict() reports it
            await signal.ready(session)  # the examples: not part of one turn's cost
        started = time.perf_counter()
        verdict, error = await signal.verdict(session, prompt)
        seconds = time.perf_counter() - started
    why = [f"embedding={error.reason}"] if error is not None else []
    if verdict.expert is not None:
        expert, head = verdict.expert, verdict.signal
        head += f"; score={verdict.score:.3f}; margin={verdict.margin:.3f}"
    else:
        why.append(f"semantic={verdict.reason}")
        classifier = cfg.mode in CLASSIFIER_MODES and cfg.classifier is not None
        expert = "classifier?" if classifier else cfg.default
        head = "classifier" if classifier else "default"
    return {"expert": expert, "signal": verdict.signal, "route": "; ".join([head, *why]),
            "seconds": round(seconds, 6),
            "scores": [dataclasses.asdict(s) for s in verdict.scores]}
