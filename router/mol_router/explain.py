"""``mol router explain``: the semantic signal's scores for one turn, as the router
would compute them, without calling an LLM engine."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import aiohttp

from mol_platform.contract.router_config import RouterConfig
from mol_platform.contract.spec_router import CLASSIFIER_MODES
from mol_router.semantic import EmbeddingError, SemanticSignal


async def explain(cfg: RouterConfig, prompt: str) -> dict[str, object]:
    """The scores best first, the deciding signal, and the ``x-mol-route`` value the
    router would send (the classifier's answer is not asked for: ``classifier?``)."""
    assert cfg.semantic is not None
    signal = SemanticSignal(cfg.semantic, cfg.timeouts.embedding)
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
