"""``/v1/chat/completions`` and ``/v1/completions``: the request path.

Read the body (bounded in size and time), authenticate, pick the expert, resolve it
to an immutable adapter name, forward, and stream the answer back event by event.
With handoff on, a ``handoff`` tool call from the expert continues the same request
with the target expert (up to ``maxHops``); the client sees one response.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from mol_platform.clients.tracing import unsampled_traceparent
from mol_router.errors import RouterError, error_body
from mol_router.httpd.wire import Request, Response, Stream, error_response
from mol_router.replicas.policy import RouteRequest
from mol_router.replicas.policy.prefix import prefix_keys
from mol_router.replicas.pool import UpstreamBroken
from mol_router.routing import handoff
from mol_router.runtime import Runtime
from mol_router.serving.bodies import nonneg, parse_body
from mol_router.serving.choose import Chooser
from mol_router.serving.served import Served, request_id, trace_id_of
from mol_router.serving.sse import DONE_EVENT, StreamHop
from mol_router.serving.upstream import Upstreams
from mol_router.telemetry.logs import access_line
from mol_router.telemetry.spans import (
    HANDOFF_FROM,
    HANDOFF_TO,
    RequestSpans,
    end_engine_call,
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
            unsampled = headers.get("traceparent")
            choice, resolved = await self.choose.resolve(choice, spans, unsampled=unsampled)
            rt.metrics.saw(resolved.adapter, started)
            served = Served(choice, resolved, [choice.expert], trace=trace, spans=spans,
                            unsampled=unsampled)
            body.pop("router", None)
            if body.get("stream") is True:
                resp, code = await self._stream(request, path, body, chat, served, tenant,
                                                user, headers, started)
                return resp
            result = await self._whole(path, body, chat, served, tenant, user, headers)
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

    async def _hand_over(self, body: dict[str, Any], served: Served, call: handoff.Call,
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


    def _count(self, tenant: Tenant, served: Served, prompt: int, completion: int) -> None:
        served.prompt += prompt
        served.completion += completion
        self.rt.metrics.count_tokens(tenant.name, served.choice.expert,
                                     served.resolved.adapter, prompt, completion)
        tenant.spend_tokens(prompt + completion)

    def _headers(self, served: Served, rid: str,
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
        return h

    def _hop(self, body: dict[str, Any], served: Served, hops: int, handoff_on: bool,
             client_tools: list[Any] | None, user: str | None, tenant: Tenant
             ) -> tuple[bytes, RouteRequest, frozenset[str]]:
        """The body for the current expert, its route (with the prompt's prefix keys,
        seeded by adapter and cache salt), and the handoff targets offered (sent with
        ``self.up.send``)."""
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

    # --- whole responses -----------------------------------------------------------------

    async def _whole(self, path: str, body: dict[str, Any], chat: bool, served: Served,
                     tenant: Tenant, user: str | None, headers: dict[str, str]
                     ) -> Response:
        handoff_on = chat and self.rt.config.handoff_enabled and handoff.may_offer(body)
        client_tools = body.get("tools")
        hops = 0
        tried: set[str] = set()
        retry = True  # one retry elsewhere for an answer that broke while being read
        while True:
            adapter = served.resolved.name
            payload, route, offered = self._hop(body, served, hops, handoff_on,
                                                client_tools, user, tenant)
            spans = served.spans
            engine = spans.engine_call(adapter) if spans is not None else None
            try:
                resp, endpoint, cold = await self.up.send(path, payload, headers, route,
                                                          self.rt.limits.upstream, spans, engine,
                                                          tried)
            except RouterError as exc:
                end_engine_call(engine, exc.status, None, None, 0, 0, False)
                raise
            served.replica = endpoint
            if cold:
                self.rt.metrics.cold_request(served.resolved.adapter)
            before = (served.prompt, served.completion)
            complete = False
            try:
                data = await resp.read()
                complete = True
            except (UpstreamBroken, TimeoutError) as exc:
                self.rt.metrics.upstream_error("stream")
                end_engine_call(engine, 0, endpoint, None, 0, 0, cold)
                if retry and isinstance(exc, UpstreamBroken) and self.up.another(tried):
                    retry = False  # nothing reached the client: once more, elsewhere
                    self.rt.metrics.retried("broken")
                    continue
                raise RouterError(502, f"the engine failed while answering: "
                                  f"{exc.__class__.__name__}", "upstream_error") from None
            finally:
                self.up.done(resp, endpoint, adapter, ok=complete and resp.status < 500,
                             complete=complete)
            status = resp.status
            if status != 200:
                end_engine_call(engine, status, endpoint, None, 0, 0, cold)
            if status >= 500:
                raise RouterError(502, f"the engine answered {status}: "
                                  f"{data[:300].decode('utf-8', 'replace')}", "upstream_error")
            if status != 200:  # the engine's own 4xx (vLLM bodies are OpenAI-style)
                return Response(status, data, self._headers(served, headers["X-Request-Id"]))
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                obj = None
            usage = obj.get("usage") if isinstance(obj, dict) else None
            if isinstance(usage, dict):
                self._count(tenant, served, nonneg(usage.get("prompt_tokens")),
                            nonneg(usage.get("completion_tokens")))
            end_engine_call(engine, status, endpoint, obj if isinstance(obj, dict) else None,
                            served.prompt - before[0], served.completion - before[1], cold)
            call = handoff.from_message(obj) if offered and isinstance(obj, dict) else None
            if call is not None and call.expert in offered:
                hops += 1
                tried = set()
                await self._hand_over(body, served, call, user)
                continue
            if hops and isinstance(obj, dict):
                obj["usage"] = {"prompt_tokens": served.prompt,
                                "completion_tokens": served.completion,
                                "total_tokens": served.prompt + served.completion}
                data = orjson.dumps(obj)
            return Response(200, data, self._headers(served, headers["X-Request-Id"]))

    # --- streams ----------------------------------------------------------------------

    async def _stream(self, request: Request, path: str, body: dict[str, Any],
                      chat: bool, served: Served, tenant: Tenant, user: str | None,
                      headers: dict[str, str], started: float
                      ) -> tuple[Response | None, int]:
        """The response (None: streamed) and the status to count (502 when the engine
        failed mid-stream)."""
        rt = self.rt
        options = body.get("stream_options")
        keep_usage = isinstance(options, dict) and options.get("include_usage") is True
        if not keep_usage:
            body["stream_options"] = {**(options or {}), "include_usage": True}
        handoff_on = chat and rt.config.handoff_enabled and handoff.may_offer(body)
        client_tools = body.get("tools")
        out: Stream | None = None
        first_id: bytes | None = None
        first_sent = False
        hops = 0
        tried: set[str] = set()
        retry = True  # one retry elsewhere for an answer that broke before its first byte
        while True:
            adapter = served.resolved.name
            try:
                payload, route, offered = self._hop(body, served, hops, handoff_on,
                                                    client_tools, user, tenant)
                sent_at = time.perf_counter()
                engine = served.spans.engine_call(adapter) if served.spans is not None \
                    else None
                try:
                    resp, endpoint, cold = await self.up.send(
                        path, payload, headers, route, rt.limits.upstream, served.spans, engine,
                        tried)
                except RouterError as exc:
                    end_engine_call(engine, exc.status, None, None, 0, 0, False)
                    raise
                served.replica = endpoint
                was_cold = cold
                if cold:
                    rt.metrics.cold_request(served.resolved.adapter)
            except RouterError as exc:
                if out is None:
                    raise
                self._stream_error(out, exc.status, exc.message, exc.code)
                return None, exc.status
            if resp.status != 200:
                data, complete = b"", False
                try:
                    data = await resp.read()
                    complete = True
                except (UpstreamBroken, TimeoutError):
                    rt.metrics.upstream_error("stream")
                finally:
                    self.up.done(resp, endpoint, adapter, ok=complete and resp.status < 500,
                                 complete=complete)
                end_engine_call(engine, resp.status, endpoint, None, 0, 0, cold)
                status = 502 if resp.status >= 500 or not complete else resp.status
                if out is None:
                    message = data if status == resp.status else error_body(
                        502, f"the engine answered {resp.status}", "upstream_error")
                    return Response(status, message,
                                    self._headers(served, headers["X-Request-Id"])), status
                self._stream_error(out, status, f"the engine answered {resp.status}",
                                   "upstream_error")
                return None, status
            if out is None:
                out = request.stream(200, {
                    **self._headers(served, headers["X-Request-Id"], "text/event-stream"),
                    "Cache-Control": "no-cache"})
            hop = StreamHop(keep_usage=keep_usage and not handoff_on, handoff_on=bool(offered),
                            continuation=hops > 0, rewrite_id=first_id, targets=offered,
                            want_id=handoff_on)
            complete = False
            wrote = False  # whether this hop sent the client anything
            try:
                while chunk := await resp.next_chunk():
                    if cold:  # the engine's first event: the load is behind us
                        cold = False
                        rt.metrics.cold_started(served.resolved.adapter,
                                                time.perf_counter() - sent_at, served.trace)
                    data = hop.feed(chunk)
                    if data:
                        if not first_sent:
                            first_sent = True
                            served.ttft = time.perf_counter() - started
                            rt.metrics.first_token(served.choice.expert, served.version,
                                                   served.resolved.adapter, tenant.name,
                                                   served.ttft, served.trace)
                        if resp.done:  # the last piece: leaves with what follows it
                            out.hold(data)
                        else:
                            wrote = True
                            await out.write(data)
                rest = hop.finish()
                if rest:
                    out.hold(rest)
                complete = True
            except (UpstreamBroken, TimeoutError) as exc:
                rt.metrics.upstream_error("stream")
                if retry and not wrote and isinstance(exc, UpstreamBroken) \
                        and self.up.another(tried):
                    retry = False  # this hop sent nothing yet: once more, elsewhere
                    rt.metrics.retried("broken")
                    continue
                self._stream_error(out, 502, "the engine failed mid-stream: "
                                   f"{exc.__class__.__name__}", "upstream_error")
                return None, 502
            finally:
                self.up.done(resp, endpoint, adapter, ok=complete, complete=complete)
                end_engine_call(engine, 200 if complete else 0, endpoint, None, hop.prompt,
                                hop.completion, was_cold)
            first_id = first_id or hop.first_id()
            self._count(tenant, served, hop.prompt, hop.completion)
            if hop.call is not None:
                source = served.choice.expert
                hops += 1
                tried = set()
                try:
                    await self._hand_over(body, served, hop.call, user)
                except RouterError as exc:  # e.g. the target's adapter is incompatible
                    self._stream_error(out, exc.status, exc.message, exc.code)
                    return None, exc.status
                await out.write(f": mol-handoff {source}>{hop.call.expert} "
                                f"{served.resolved.name}\n\n".encode())
                continue
            tail = b""
            if handoff_on and keep_usage:
                tail += b"data: " + orjson.dumps({
                    "id": (first_id or b"").decode(), "object": "chat.completion.chunk",
                    "model": served.resolved.name, "choices": [],
                    "usage": {"prompt_tokens": served.prompt,
                              "completion_tokens": served.completion,
                              "total_tokens": served.prompt + served.completion}}) + b"\n\n"
            if hop.done:
                tail += DONE_EVENT
            out.end(tail)  # one write for the tail and the end of the body
            return None, 200

    def _stream_error(self, out: Stream, status: int, message: str, code: str) -> None:
        """Headers are gone: the error travels as an SSE event, as vLLM sends them."""
        with contextlib.suppress(ConnectionResetError):
            out.end(b"data: " + error_body(status, message, code) + b"\n\n" + DONE_EVENT)
