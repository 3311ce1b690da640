"""``/v1/chat/completions`` and ``/v1/completions``: the request path.

Read the body (bounded in size and time), authenticate, pick the expert, resolve it
to an immutable adapter name, forward, and stream the answer back event by event.
With handoff on, a ``handoff`` tool call from the expert continues the same request
with the target expert (up to ``maxHops``); the client sees one response. A request
asking for the code interpreter gets its ``python`` calls run in the conversation's
sandbox session (:mod:`mol_router.harness`), in the same hop loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from mol_platform.clients.tracing import unsampled_traceparent
from mol_router.errors import RouterError
from mol_router.harness import loop as harness_loop
from mol_router.harness.tool import SESSION_HEADER
from mol_router.httpd.wire import Request, Response, error_response
from mol_router.replicas.policy import RouteRequest
from mol_router.replicas.policy.prefix import prefix_keys
from mol_router.routing import handoff
from mol_router.runtime import Runtime
from mol_router.serving.answers import StreamAnswer, WholeAnswer
from mol_router.serving.bodies import parse_body
from mol_router.serving.choose import Chooser
from mol_router.serving.relay import relay
from mol_router.serving.served import Served, request_id, trace_id_of
from mol_router.serving.upstream import Upstreams
from mol_router.telemetry.logs import access_line
from mol_router.telemetry.spans import (
    HANDOFF_FROM,
    HANDOFF_TO,
    RequestSpans,
)
from mol_router.tenants import Tenant

if TYPE_CHECKING:
    pass

log = logging.getLogger("mol.router")
_NO_TARGETS: frozenset[str] = frozenset()


class GenerationProxy:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.up = Upstreams(runtime)
        self.choose = Chooser(runtime, self.up)

    # --- the request ---------------------------------------------------------------

    async def handle(self, request: Request, path: str, *, chat: bool) -> Response | None:
        """The response, or None once it was streamed."""
        started = time.perf_counter()
        rid = request_id(request.headers.get("x-request-id"))
        rt = self.rt
        tracing = rt.tracing
        headers = {"Content-Type": "application/json", "X-Request-Id": rid}
        spans = None
        if tracing is not None:
            spans = RequestSpans.begin(tracing, request.headers, chat, rid)
            if spans is None:  # not traced: engines and the catalog follow that decision
                headers["traceparent"] = unsampled_traceparent()
        trace = (spans.trace_id if spans is not None else None) or trace_id_of(
            request.headers.get("traceparent"), rid)
        served: Served | None = None
        code = 200
        tenant_name = "none"
        try:
            tenant = self.choose.tenant(request)
            tenant_name = tenant.name
            body = parse_body(request.body, chat)
            if spans is not None:
                spans.requested(body)
            user = body.get("user") if isinstance(body.get("user"), str) else None
            user = user or request.headers.get("x-mol-user")
            routing = rt.routing
            choice = routing.select(body.get("router"), body.get("model"), user)
            if choice is None:
                choice = await self.choose.auto(routing, body, chat, user, headers, spans,
                                                rid, tenant)
            rt.metrics.decision(choice.mode, choice.signal, choice.expert)
            if choice.mode == "adapter" and not tenant.may_use(choice.ref.split("/", 1)[0]):
                rt.metrics.rejected("forbidden")
                raise RouterError(403, f"this API key may not use adapters of namespace "
                                  f"{choice.ref.split('/', 1)[0]!r}", "namespace_forbidden",
                                  param="model")
            harness = harness_loop.begin(rt, body, request.headers, choice, tenant, chat)
            if harness is not None:
                await harness.prepare()
            unsampled = headers.get("traceparent")
            choice, resolved = await self.choose.resolve(choice, spans, unsampled=unsampled,
                                                         tenant=tenant.name)
            rt.metrics.saw(resolved.adapter, started)
            served = Served(choice, resolved, [choice.expert], trace=trace, spans=spans,
                            unsampled=unsampled, harness=harness)
            body.pop("router", None)
            if body.get("stream") is True:
                resp, code = await relay(self, path, body, chat, served, tenant, user, headers,
                                         StreamAnswer(self, request, body, served, tenant, rid,
                                                      started), harness)
                return resp
            result = await relay(self, path, body, chat, served, tenant, user, headers,
                                 WholeAnswer(self, served, tenant, rid), harness)
            code = result.status
            return result
        except RouterError as exc:
            code = exc.status
            return error_response(exc, {"x-request-id": rid})
        except ConnectionResetError:
            code = 499  # the client went away mid-stream
            return None
        except asyncio.CancelledError:
            code = 499  # the client went away
            raise
        finally:
            elapsed = time.perf_counter() - started
            if served is not None:
                rt.metrics.request_done(served.choice.expert, served.resolved.adapter,
                                        served.version, tenant_name, code, elapsed, trace)
                if rt.usage is not None:
                    rt.usage.record(served.resolved.adapter, served.resolved.version,
                                    served.prompt, served.completion)
            else:
                rt.metrics.request_done("none", "", "", tenant_name, code, elapsed, trace)
            self._finish(request, path, code, elapsed, rid, tenant_name, served, spans)

    def _finish(self, request: Request, path: str, code: int, elapsed: float, rid: str,
                tenant: str, served: Served | None, spans: RequestSpans | None) -> None:
        """End the root span and write the access log line."""
        trace_id = spans.trace_id if spans is not None else None
        if spans is not None:
            if served is None:
                spans.end(code, None, None, 0, 0)
            else:
                spans.end(code, served.choice.expert, served.resolved.name, served.prompt,
                          served.completion)
        if served is None:
            access_line(request.method, path, code, elapsed, rid=rid, tenant=tenant,
                        expert=None, adapter=None, version=None, replica=None, ttft=None,
                        route=None, handoffs=None, prompt=0, completion=0,
                        trace_id=trace_id)
        else:
            access_line(request.method, path, code, elapsed, rid=rid, tenant=tenant,
                        expert=served.choice.expert, adapter=served.resolved.adapter,
                        version=served.resolved.version, replica=served.replica, ttft=served.ttft,
                        route=served.choice.route or served.choice.mode,
                        handoffs=served.path, prompt=served.prompt,
                        completion=served.completion, trace_id=trace_id)

    # --- handoff ----------------------------------------------------------------------

    def _offer(self, body: dict[str, Any], served: Served, hops: int,
               client_tools: list[Any] | None) -> frozenset[str]:
        """Offer the handoff tool for this hop; the experts it may name (none: not
        offered)."""
        routing = self.rt.routing
        offer = None
        if hops < routing.config.handoff_max_hops:
            offer = routing.handoff_tools.get(served.choice.expert)
        if offer is None:
            handoff.offer(body, None, client_tools)
            return frozenset()
        handoff.offer(body, offer[0], client_tools)
        return offer[1]

    async def hand_over(self, body: dict[str, Any], served: Served, call: handoff.Call,
                        user: str | None) -> None:
        routing = self.rt.routing
        source = served.choice.expert
        spans = served.spans
        span = spans.child("mol.router.handoff", None, {
            HANDOFF_FROM: source, HANDOFF_TO: call.expert,
            "mol.handoff.hop": len(served.path)}) if spans is not None else None
        try:
            served.choice = routing.expert_choice(call.expert, "handoff", user, "handoff")
            served.choice, served.resolved = await self.choose.resolve(
                served.choice, spans, span, unsampled=served.unsampled)
        finally:
            if span is not None:
                span.end()
        self.rt.metrics.saw(served.resolved.adapter, time.perf_counter())
        served.path.append(call.expert)
        body["model"] = served.resolved.name
        body["messages"] = handoff.continue_messages(body["messages"], source, call.summary)
        self.rt.metrics.handoff(source, call.expert)
        self.rt.metrics.decision("handoff", "handoff", call.expert)

    def count(self, tenant: Tenant, served: Served, prompt: int, completion: int) -> None:
        served.prompt += prompt
        served.completion += completion
        self.rt.metrics.count_tokens(tenant.name, served.choice.expert,
                                     served.resolved.adapter, prompt, completion)
        tenant.spend_tokens(prompt + completion)

    def headers_for(self, served: Served, rid: str,
                 content_type: str = "application/json") -> dict[str, str]:
        h = {"Content-Type": content_type, "x-request-id": rid,
             "x-mol-expert": served.choice.expert,
             "x-mol-adapter-version": served.resolved.name,
             "x-mol-route": served.choice.mode}
        if served.choice.canary:
            h["x-mol-canary"] = "true"
        if served.choice.route is not None:
            h["x-mol-route"] = served.choice.route
        if len(served.path) > 1:
            h["x-mol-handoffs"] = ">".join(served.path)
        if served.harness is not None and served.harness.session is not None:
            h[SESSION_HEADER] = served.harness.session
        return h

    def hop_body(self, body: dict[str, Any], served: Served, hops: int, handoff_on: bool,
             client_tools: list[Any] | None, user: str | None, tenant: Tenant
             ) -> tuple[bytes, RouteRequest, frozenset[str]]:
        """The body for the current expert, its route (with the prompt's prefix keys,
        seeded by adapter and cache salt), and the handoff targets offered (sent with
        :meth:`Upstreams.send`)."""
        offered = (self._offer(body, served, hops, client_tools) if handoff_on
                   else _NO_TARGETS)
        adapter = served.resolved.name
        body["model"] = adapter
        if self.rt.config.cache_isolation == "tenant":
            body["cache_salt"] = tenant.cache_salt  # the client's own salt never wins
        field = "messages" if "messages" in body else "prompt"
        prompt = body.get(field)
        keys: tuple[int, ...] = ()
        if prompt is None:
            payload = orjson.dumps(body)
        else:
            salt = body.get("cache_salt")
            seed = f"{adapter}\0{salt}" if isinstance(salt, str) else adapter
            text = orjson.dumps(prompt)
            keys = prefix_keys(text, seed)
            # the prompt serialised once: the same bytes as orjson.dumps(body)
            payload = orjson.dumps({**body, field: orjson.Fragment(text)})
        return payload, RouteRequest(adapter, user, len(payload) // 4, keys), offered
