"""``model: "auto"``: ask the classifier expert which expert should answer.

The classifier is an expert like the others (a LoRA on the same base) asked with its
output constrained to the expert names (vLLM ``structured_outputs: {"choice": ...}``),
so its answer is always a valid name. Anything else (timeout, error, no ready
engine, a name that is not an expert) falls back to ``router.default``: a slow or
broken classifier costs at most its timeout, never a failed request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson

from mol_router.replicas import attempts
from mol_router.replicas.policy import RouteRequest
from mol_router.replicas.pool import UpstreamBroken
from mol_router.routing.rules import Routing
from mol_router.runtime import Runtime
from mol_router.serving.upstream import Upstreams
from mol_router.telemetry.spans import RequestSpans, end_engine_call

if TYPE_CHECKING:
    from mol_platform.clients.tracing import Span

log = logging.getLogger("mol.router.classifier")
_MAX_CHARS = 4000


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content
                        if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def request_text(body: dict[str, Any], chat: bool) -> str:
    """What the classifier reads: the last user message (or the prompt)."""
    if chat:
        for msg in reversed(body.get("messages") or ()):
            if isinstance(msg, dict) and msg.get("role") == "user":
                return _text(msg.get("content"))[-_MAX_CHARS:]
        return ""
    prompt = body.get("prompt")
    return (prompt if isinstance(prompt, str) else "")[-_MAX_CHARS:]


def instructions(routing: Routing) -> str:
    lines = ["Choose the expert best suited to answer the user's message. Experts:"]
    for name in routing.classifier_choices:
        desc = routing.experts[name].description
        lines.append(f"- {name}: {desc}" if desc else f"- {name}")
    lines.append("Answer with the expert's name only.")
    return "\n".join(lines)


async def classify(rt: Runtime, upstreams: Upstreams, body: dict[str, Any], chat: bool,
                   headers: dict[str, str], spans: RequestSpans | None = None,
                   parent: Span | None = None) -> str | None:
    """The expert the classifier names, or None (the caller falls back). With tracing
    on, its engine call is a span under ``parent`` (``mol.router.classify``)."""
    routing = rt.routing
    name = routing.config.classifier
    if name is None:
        return None
    call: Span | None = None
    status = 0
    try:
        async with asyncio.timeout(rt.config.timeouts.classifier):
            resolved = await rt.resolver.resolve(
                routing.experts[name].adapter,
                spans.traceparent(parent) if spans is not None else None)
            if not resolved.compatible:
                log.info("classifier adapter %s is incompatible; using the default expert",
                         resolved.name)
                return None
            payload = orjson.dumps({
                "model": resolved.name,
                "messages": [{"role": "system", "content": instructions(routing)},
                             {"role": "user", "content": request_text(body, chat)}],
                "structured_outputs": {"choice": list(routing.classifier_choices)},
                "max_tokens": 16, "temperature": 0, "stream": False})
            if spans is not None:
                call = spans.engine_call(resolved.name, parent)
            resp, endpoint, _cold = await upstreams.send(
                "/v1/chat/completions", payload, headers, RouteRequest(resolved.name),
                rt.limits.classifier, spans, call)
            ok = False
            outcome: attempts.Outcome = "cancelled"  # unless read: nobody's failure
            try:
                data = await resp.read()
                outcome = attempts.answered(resp.status)
                ok = resp.status == 200
                status = resp.status
            except (UpstreamBroken, TimeoutError) as exc:
                outcome = "broken" if isinstance(exc, UpstreamBroken) else "timeout"
                raise
            finally:
                upstreams.finish(resp, endpoint, resolved.name, outcome)
            end_engine_call(call, status, endpoint, None, 0, 0, _cold)
            call = None
    except asyncio.CancelledError:
        end_engine_call(call, 0, None, None, 0, 0, False)
        raise
    except Exception as exc:
        end_engine_call(call, status, None, None, 0, 0, False)
        log.info("classifier unavailable (%s); using the default expert", exc or type(exc))
        return None
    if not ok:
        log.info("classifier answered %d; using the default expert", resp.status)
        return None
    try:
        answer = orjson.loads(data)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    choice = answer.strip() if isinstance(answer, str) else ""
    return choice if choice in routing.experts else None
