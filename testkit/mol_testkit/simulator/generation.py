"""What a replica answers (a plan of stream pieces) and when each piece is due."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.metrics import SimMetrics
from mol_testkit.simulator.model import SimRequest, SlotEngine
from mol_testkit.simulator.scripting import ScriptRule
from mol_testkit.simulator.textgen import (
    pick_choice,
    reply_words,
    split_tokens,
)
from mol_testkit.simulator.validation import Checked

ARGUMENT_PIECE = 8  # characters of tool-call arguments per streamed delta


@dataclass
class Plan:
    """The reply of one request, token by token."""

    pieces: list[str]
    """Content pieces; for a tool call, the argument fragments."""
    finish_reason: str
    tool_name: str | None = None
    tool_call_id: str = ""
    tool_arguments: str = ""
    stop_reason: str | None = None
    end_token: bool = False
    """The reply ends with a generated end-of-sequence token (a constrained choice)."""

    @property
    def is_tool_call(self) -> bool:
        return self.tool_name is not None

    @property
    def token_count(self) -> int:
        """Tokens generated: a tool call adds its name token and an end token."""
        if self.is_tool_call:
            return len(self.pieces) + 2
        return len(self.pieces) + int(self.end_token)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def make_plan(
    config: SimConfig,
    model: str,
    prompt: str,
    body: dict[str, Any],
    rule: ScriptRule | None,
    checked: Checked,
) -> Plan:
    """Decide the reply: scripted tool call or text, a constrained choice, or hashed words.

    Hashed words are ``output_tokens`` long (exactly ``max_tokens`` with
    ``ignore_eos``); ``max_tokens`` cuts any reply (``finish_reason: "length"``) and a
    ``stop`` string ends it before the string (``"stop"``, ``stop_reason`` = the string).
    """
    limit = checked.max_tokens
    if rule is not None and rule.tool_call is not None:
        spec = rule.tool_call
        arguments = spec.arguments_json()
        pieces = [
            arguments[i : i + ARGUMENT_PIECE] for i in range(0, len(arguments), ARGUMENT_PIECE)
        ]
        return Plan(
            pieces=pieces,
            finish_reason="tool_calls",
            tool_name=spec.name,
            tool_call_id=spec.call_id(),
            tool_arguments=arguments,
        )
    finish = "stop"
    if rule is not None and rule.text is not None:
        pieces = split_tokens(rule.text)
    else:
        choices = _choices(body)
        if choices:
            pieces = [pick_choice(model, prompt, choices)]
            if limit is None or limit > 1:  # the grammar then forces end-of-sequence
                return Plan(pieces=pieces, finish_reason="stop", end_token=True)
        else:
            count = config.output_tokens
            if limit is not None and (checked.ignore_eos or limit < count):
                count, finish = limit, "length"
            pieces = split_tokens(" ".join(reply_words(model, prompt, count)))
    if limit is not None and limit < len(pieces):
        pieces, finish = pieces[:limit], "length"
    return _apply_stop(pieces, finish, checked.stop)


def _apply_stop(pieces: list[str], finish: str, stop: tuple[str, ...]) -> Plan:
    """Cut at the first stop string, as vLLM does (the string itself is not sent)."""
    text = "".join(pieces)
    hits = [(text.find(s), s) for s in stop if s in text]
    if not hits:
        return Plan(pieces=pieces, finish_reason=finish)
    at, which = min(hits)
    kept: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) > at:
            kept.append(piece[: at - used])  # the token that held the stop string
            break
        kept.append(piece)
        used += len(piece)
    return Plan(pieces=kept, finish_reason="stop", stop_reason=which)


def _choices(body: dict[str, Any]) -> list[str]:
    structured = body.get("structured_outputs")
    if not isinstance(structured, dict):
        return []
    choices = structured.get("choice")
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        return choices
    return []


class TokenClock:
    """Paces one request's tokens (TTFT, then ITL), tells the engine about each one and
    records vLLM's token and timing metrics."""

    def __init__(
        self, engine: SlotEngine, metrics: SimMetrics, request: SimRequest, checked: Checked
    ) -> None:
        self.engine = engine
        self.config = engine.config
        self.metrics = metrics
        self.request = request
        self.checked = checked
        self.first_due = 0.0
        self.scheduled: float | None = None
        self.first: float | None = None
        self.last: float | None = None

    async def start(self) -> None:
        """Wait until the request is scheduled and its adapter slot is ready."""
        ready = await self.request.admitted
        loop = asyncio.get_running_loop()
        self.scheduled = loop.time()
        self.metrics.queue_time.observe(max(0.0, self.scheduled - self.request.arrival))
        self.first_due = ready + self.config.ttft_s

    async def tick(self) -> None:
        """Wait for the next token to be due (after stalls and any preemption)."""
        loop = asyncio.get_running_loop()
        request = self.request
        await self.engine.wait_due(request)
        now = loop.time()
        metrics = self.metrics
        if self.last is None:
            self.first = now
            metrics.ttft.observe(now - request.arrival)
            computed = request.prompt_tokens - request.cached_tokens
            metrics.prompt_tokens.inc(request.prompt_tokens)
            metrics.prompt_tokens_computed.inc(computed)
            metrics.prompt_tokens_local_hit.inc(request.cached_tokens)
            metrics.prompt_tokens_cached.inc(request.cached_tokens)
            metrics.iteration_tokens.observe(computed + 1)
        else:
            metrics.itl.observe(now - self.last)
        self.last = now
        self.engine.token(request)
        metrics.generation_tokens.inc()

    def done(self, reason: str) -> None:
        """Per-request histograms, as vLLM records them for every finished request."""
        now = asyncio.get_running_loop().time()
        metrics, request = self.metrics, self.request
        metrics.e2e.observe(now - request.arrival)
        metrics.success[reason].inc()
        scheduled = self.scheduled if self.scheduled is not None else now
        first = self.first if self.first is not None else scheduled
        last = self.last if self.last is not None else first
        if self.scheduled is None:
            metrics.queue_time.observe(now - request.arrival)
        metrics.prefill_time.observe(first - scheduled)
        metrics.decode_time.observe(last - first)
        metrics.inference_time.observe(last - scheduled)
        generated = request.generated
        metrics.time_per_output_token.observe(
            (last - first) / (generated - 1) if generated > 1 else 0
        )
        metrics.request_preemptions.observe(request.preemptions)
        metrics.request_prompt_tokens.observe(request.prompt_tokens)
        metrics.prefill_kv_computed.observe(request.prompt_tokens - request.cached_tokens)
        metrics.request_generation_tokens.observe(generated)
        metrics.params_n.observe(1)
        limit = self.checked.max_tokens
        if limit is not None:
            metrics.params_max_tokens.observe(limit)
        metrics.max_generation_tokens.observe(
            limit if limit is not None else self.config.max_model_len - request.prompt_tokens
        )
