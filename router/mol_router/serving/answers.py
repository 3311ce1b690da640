"""The two ways an engine's answer reaches the client: whole, or streamed event by
event. Strategies of the hop loop (:mod:`mol_router.serving.relay`), which owns the
tries, the booking, the handoffs and the code interpreter's steps; these own only the
bytes. Steps reach the client in the answer itself: a whole answer lists them in
``mol_steps``; a stream shows each as a chunk whose delta is the ``tool`` message, the
step itself in ``mol_step`` (docs/router.md)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import orjson

from mol_router.errors import RouterError, error_body
from mol_router.harness import tool
from mol_router.httpd.wire import Request, Response, Stream
from mol_router.replicas.pool import UpstreamResponse
from mol_router.routing import handoff
from mol_router.serving.bodies import nonneg
from mol_router.serving.relay import Host, Try
from mol_router.serving.served import Served
from mol_router.serving.sse import DONE_EVENT, StreamHop
from mol_router.telemetry.spans import end_engine_call
from mol_router.tenants import Tenant


def _failed(exc: Exception, what: str) -> RouterError:
    return RouterError(502, f"the engine failed {what}: {exc.__class__.__name__}",
                       "upstream_error")


class WholeAnswer:
    """Read each hop's answer whole; the last one is the response."""

    wrote = False  # nothing reaches the client before the end

    def __init__(self, proxy: Host, served: Served, tenant: Tenant, rid: str
                 ) -> None:
        self.proxy, self.served, self.tenant, self.rid = proxy, served, tenant, rid
        self._final: Response | None = None
        self._error: RouterError | None = None
        self._last: dict[str, Any] | None = None  # the last answer read (a python turn's)
        self._steps: list[dict[str, Any]] = []

    async def take(self, resp: UpstreamResponse, t: Try) -> handoff.Call | tool.Turn | None:
        served = self.served
        before = (served.prompt, served.completion)
        try:
            data = await resp.read()
        except BaseException:
            end_engine_call(t.engine, 0, t.endpoint, None, 0, 0, t.cold)
            raise
        status = resp.status
        if status != 200:
            end_engine_call(t.engine, status, t.endpoint, None, 0, 0, t.cold)
            if status >= 500:
                self._error = RouterError(502, f"the engine answered {status}: "
                                          f"{data[:300].decode('utf-8', 'replace')}",
                                          "upstream_error")
            else:  # the engine's own 4xx (vLLM bodies are OpenAI-style)
                self._final = Response(status, data, self.proxy.headers_for(served, self.rid))
            return None
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        usage = obj.get("usage") if isinstance(obj, dict) else None
        if isinstance(usage, dict):
            self.proxy.count(self.tenant, served, nonneg(usage.get("prompt_tokens")),
                             nonneg(usage.get("completion_tokens")))
        end_engine_call(t.engine, status, t.endpoint, obj if isinstance(obj, dict) else None,
                        served.prompt - before[0], served.completion - before[1], t.cold)
        call = handoff.from_message(obj) if t.offered and isinstance(obj, dict) else None
        if call is not None and call.expert in t.offered:
            return call
        turn = tool.from_message(obj) if t.harness_on and isinstance(obj, dict) else None
        if turn is not None:
            self._last = obj
            return turn
        if (t.turn or self._steps) and isinstance(obj, dict):
            data = self._merged(obj)
        self._final = Response(200, data, self.proxy.headers_for(served, self.rid))
        return None

    def _merged(self, obj: dict[str, Any]) -> bytes:
        """The last answer with the usage of every hop, and the steps that ran."""
        served = self.served
        obj["usage"] = {"prompt_tokens": served.prompt,
                        "completion_tokens": served.completion,
                        "total_tokens": served.prompt + served.completion}
        if self._steps:
            obj["mol_steps"] = self._steps
        return orjson.dumps(obj)

    async def stepped(self, step: tool.Step) -> None:
        self._steps.append(step.public())

    def stopped(self, reason: str, note: str) -> Response:
        obj = self._last or {}
        obj["choices"] = [{"index": 0, "message": {"role": "assistant", "content": note},
                           "finish_reason": "stop"}]
        obj["mol_stop"] = reason
        return Response(200, self._merged(obj), self.proxy.headers_for(self.served, self.rid))

    def result(self) -> Response:
        if self._error is not None:
            raise self._error
        assert self._final is not None
        return self._final

    def refused(self, exc: RouterError) -> Response:
        raise exc

    def broke(self, exc: Exception) -> Response:
        raise _failed(exc, "while answering") from None

    async def handed_over(self, source: str, served: Served) -> None:
        return None


class StreamAnswer:
    """Relay each hop's events as they come; the response is streamed (None) with the
    status to count (502 when the engine failed mid-stream)."""

    def __init__(self, proxy: Host, request: Request, body: dict[str, Any],
                 served: Served, tenant: Tenant, rid: str, started: float) -> None:
        self.proxy, self.request, self.served, self.tenant = proxy, request, served, tenant
        self.rid, self.started = rid, started
        options = body.get("stream_options")
        self.keep_usage = isinstance(options, dict) and options.get("include_usage") is True
        if not self.keep_usage:
            body["stream_options"] = {**(options or {}), "include_usage": True}
        self.out: Stream | None = None
        self.wrote = False  # whether this hop sent the client anything
        self._first_id: bytes | None = None
        self._first_sent = False
        self._final: tuple[Response | None, int] | None = None
        self._hop: StreamHop | None = None
        self._continues = False
        self._calls_shown = 0  # python calls shown so far (the next ones' index base)

    async def take(self, resp: UpstreamResponse, t: Try) -> handoff.Call | tool.Turn | None:
        self.wrote = False
        self._continues = t.continues
        if resp.status != 200:
            await self._refusal(resp, t)
            return None
        served, rt = self.served, self.proxy.rt
        out = self.out
        if out is None:
            out = self.out = self.request.stream(200, {
                **self.proxy.headers_for(served, self.rid, "text/event-stream"),
                "Cache-Control": "no-cache"})
        hop = StreamHop(keep_usage=self.keep_usage and not t.continues,
                        handoff_on=bool(t.offered), continuation=t.turn > 0,
                        rewrite_id=self._first_id, targets=t.offered, want_id=t.continues,
                        harness_on=t.harness_on, index_base=self._calls_shown)
        cold, complete = t.cold, False
        try:
            while chunk := await resp.next_chunk():
                if cold:  # the engine's first event: the load is behind us
                    cold = False
                    rt.metrics.cold_started(served.resolved.adapter,
                                            time.perf_counter() - t.sent_at, served.trace)
                data = hop.feed(chunk)
                if data:
                    self._first_token()
                    if resp.done:  # the last piece: leaves with what follows it
                        out.hold(data)
                    else:
                        self.wrote = True
                        await out.write(data)
            rest = hop.finish()
            if rest:
                out.hold(rest)
            complete = True
        finally:
            end_engine_call(t.engine, 200 if complete else 0, t.endpoint, None, hop.prompt,
                            hop.completion, t.cold)
        self._first_id = self._first_id or hop.first_id()
        self.proxy.count(self.tenant, served, hop.prompt, hop.completion)
        self._hop = hop
        return hop.call or hop.turn

    def _first_token(self) -> None:
        if self._first_sent:
            return
        served = self.served
        self._first_sent = True
        served.ttft = time.perf_counter() - self.started
        self.proxy.rt.metrics.first_token(served.choice.expert, served.version,
                                          served.resolved.adapter, self.tenant.name,
                                          served.ttft, served.trace)

    async def _refusal(self, resp: UpstreamResponse, t: Try) -> None:
        """An answer other than 200: passed on before the stream began, else an error
        event."""
        try:
            data = await resp.read()
        except BaseException:
            end_engine_call(t.engine, 0, t.endpoint, None, 0, 0, t.cold)
            raise
        end_engine_call(t.engine, resp.status, t.endpoint, None, 0, 0, t.cold)
        status = 502 if resp.status >= 500 else resp.status
        if self.out is None:
            message = data if status == resp.status else error_body(
                502, f"the engine answered {resp.status}", "upstream_error")
            self._final = (Response(status, message,
                                    self.proxy.headers_for(self.served, self.rid)), status)
        else:
            self._error_event(status, f"the engine answered {resp.status}", "upstream_error")
            self._final = (None, status)

    def result(self) -> tuple[Response | None, int]:
        if self._final is not None:
            return self._final
        served, hop, out = self.served, self._hop, self.out
        assert hop is not None
        assert out is not None
        tail = b""
        if self._continues and self.keep_usage:
            tail += b"data: " + orjson.dumps({
                "id": (self._first_id or b"").decode(), "object": "chat.completion.chunk",
                "model": served.resolved.name, "choices": [],
                "usage": {"prompt_tokens": served.prompt,
                          "completion_tokens": served.completion,
                          "total_tokens": served.prompt + served.completion}}) + b"\n\n"
        if hop.done:
            tail += DONE_EVENT
        out.end(tail)  # one write for the tail and the end of the body
        return None, 200

    def refused(self, exc: RouterError) -> tuple[Response | None, int]:
        if self.out is None:
            raise exc
        self._error_event(exc.status, exc.message, exc.code)
        return None, exc.status

    def broke(self, exc: Exception) -> tuple[Response | None, int]:
        if self.out is None:
            raise _failed(exc, "while answering") from None
        self._error_event(502, f"the engine failed mid-stream: {exc.__class__.__name__}",
                          "upstream_error")
        return None, 502

    async def handed_over(self, source: str, served: Served) -> None:
        assert self.out is not None
        assert self._hop is not None
        assert self._hop.call is not None
        await self.out.write(f": mol-handoff {source}>{self._hop.call.expert} "
                             f"{served.resolved.name}\n\n".encode())

    async def stepped(self, step: tool.Step) -> None:
        """The step as a chunk: the ``tool`` message the model gets, and the step."""
        assert self.out is not None
        self._calls_shown += 1
        limit = self.proxy.rt.config.harness
        text = tool.tool_text(step, limit.result_chars if limit is not None else 16_384)
        await self.out.write(self._chunk(
            {"role": "tool", "tool_call_id": step.call_id, "content": text}, None,
            mol_step=step.public()))

    def stopped(self, reason: str, note: str) -> tuple[Response | None, int]:
        assert self.out is not None
        self.out.hold(self._chunk({"content": note}, "stop", mol_stop=reason))
        return self.result()

    def _chunk(self, delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
        return b"data: " + orjson.dumps({
            "id": (self._first_id or b"").decode(), "object": "chat.completion.chunk",
            "created": int(time.time()), "model": self.served.resolved.name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra}) + b"\n\n"

    def _error_event(self, status: int, message: str, code: str) -> None:
        """Headers are gone: the error travels as an SSE event, as vLLM sends them."""
        assert self.out is not None
        with contextlib.suppress(ConnectionResetError):
            self.out.end(b"data: " + error_body(status, message, code) + b"\n\n" + DONE_EVENT)
