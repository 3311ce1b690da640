"""One generation request inside a replica, from admission to its last byte."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from aiohttp import web

from mol_testkit.simulator import shapes
from mol_testkit.simulator.generation import Plan, TokenClock
from mol_testkit.simulator.metrics import SimMetrics
from mol_testkit.simulator.model import FinishReason, SlotEngine
from mol_testkit.simulator.validation import Checked


class Replica(Protocol):
    """What a job uses of the replica serving it (``SimServer`` is one)."""

    name: str
    engine: SlotEngine
    metrics: SimMetrics


class Job:
    """One generation request from admission to its last byte."""

    def __init__(
        self,
        server: Replica,
        request: web.Request,
        body: dict[str, Any],
        model: str,
        token_ids: list[int],
        plan: Plan,
        chat: bool,
        checked: Checked,
    ) -> None:
        self.server = server
        self.checked = checked
        self.request = request
        self.body = body
        self.model = model
        self.token_ids = token_ids
        self.prompt_tokens = len(token_ids)
        self.plan = plan
        self.chat = chat
        self.id = shapes.new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())

    async def run(
        self, adapter: str | None, *, stream: bool, cut_after: int | None
    ) -> web.StreamResponse:
        """Queue in the engine, produce the tokens, and always leave the engine."""
        server = self.server
        sim_request = server.engine.submit(
            self.model, adapter, planned_tokens=self.plan.token_count,
            token_ids=self.token_ids, cache_salt=self.checked.cache_salt,
        )  # fmt: skip
        clock = TokenClock(server.engine, server.metrics, sim_request, self.checked)
        reason: FinishReason = "abort"
        try:
            if stream:
                response = await self._stream(clock, cut_after)
            else:
                response = await self._whole(clock)
            reason = "length" if self.plan.finish_reason == "length" else "stop"
            return response
        finally:
            clock.done(reason)
            server.engine.finish(sim_request, reason)

    async def _whole(self, clock: TokenClock) -> web.Response:
        await clock.start()
        for _ in range(self.plan.token_count):
            await clock.tick()
        plan = self.plan
        usage = (self.prompt_tokens, plan.token_count)
        if self.chat:
            calls = []
            if plan.tool_name is not None:
                calls = [shapes.tool_call_obj(plan.tool_call_id, plan.tool_name,
                                              plan.tool_arguments)]  # fmt: skip
            body = shapes.chat_response(
                response_id=self.id, created=self.created, model=self.model,
                content=None if plan.is_tool_call else plan.text, tool_calls=calls,
                finish_reason=plan.finish_reason, prompt_tokens=usage[0],
                completion_tokens=usage[1], stop_reason=plan.stop_reason,
            )  # fmt: skip
        else:
            body = shapes.completion_response(
                response_id=self.id, created=self.created, model=self.model, text=plan.text,
                finish_reason=plan.finish_reason, prompt_tokens=usage[0],
                completion_tokens=usage[1], stop_reason=plan.stop_reason,
            )  # fmt: skip
        return web.json_response(body, headers={shapes.REPLICA_HEADER: self.server.name})

    async def _stream(self, clock: TokenClock, cut_after: int | None) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", shapes.REPLICA_HEADER: self.server.name}
        )
        await response.prepare(self.request)
        options = self.body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        await clock.start()
        for index, delta, finish in self._deltas():
            if cut_after is not None and index >= cut_after:
                drop_connection(self.request)
            await clock.tick()
            if self.chat:
                if index == 0:
                    role = {"role": "assistant", "content": ""}
                    await response.write(shapes.sse(self._chunk(role, None)))
                chunk = self._chunk(delta, finish)
            else:
                chunk = shapes.completion_chunk(
                    self.id, self.created, self.model, delta.get("text", ""), finish,
                    self.plan.stop_reason if finish else None,
                )  # fmt: skip
            if finish is not None and not include_usage:
                chunk["system_fingerprint"] = shapes.FINGERPRINT  # on the final chunk
            await response.write(shapes.sse(chunk))
        if include_usage:
            obj = "chat.completion.chunk" if self.chat else "text_completion"
            usage = shapes.usage_chunk(self.id, self.created, self.model, obj,
                                       self.prompt_tokens, self.plan.token_count)  # fmt: skip
            await response.write(shapes.sse(usage))
        await response.write(shapes.sse("[DONE]"))
        await response.write_eof()
        return response

    def _chunk(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        stop_reason = self.plan.stop_reason if finish else None
        return shapes.chat_chunk(self.id, self.created, self.model, delta, finish, stop_reason)

    def _deltas(self) -> list[tuple[int, dict[str, Any], str | None]]:
        """(token index, delta, finish_reason) per streamed token, as vLLM sends them."""
        plan = self.plan
        finish = plan.finish_reason
        if plan.is_tool_call:
            head = {"index": 0, "id": plan.tool_call_id, "type": "function",
                    "function": {"name": plan.tool_name}}  # fmt: skip
            # vLLM sets content (None) explicitly on tool-call deltas, so it is sent.
            deltas: list[dict[str, Any]] = [{"content": None, "tool_calls": [head]}]
            deltas += [
                {"content": None, "tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                for piece in plan.pieces
            ]
            deltas.append({})
        else:
            key = "content" if self.chat else "text"
            deltas = [{key: piece} for piece in plan.pieces] or [{key: ""}]
        last = len(deltas) - 1
        return [(i, d, finish if i == last else None) for i, d in enumerate(deltas)]


def drop_connection(request: web.Request) -> None:
    """Close the client's connection without an answer (a crashed engine)."""
    if request.transport is not None:
        request.transport.close()
    raise asyncio.CancelledError
