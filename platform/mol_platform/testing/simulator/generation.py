"""What a replica answers (a plan of stream pieces) and when each piece is due."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from mol_platform.testing.simulator.config import SimConfig
from mol_platform.testing.simulator.metrics import SimMetrics
from mol_platform.testing.simulator.model import EngineError, SimRequest
from mol_platform.testing.simulator.scripting import ScriptRule
from mol_platform.testing.simulator.textgen import (
    pick_choice,
    reply_words,
    split_tokens,
)

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

    @property
    def is_tool_call(self) -> bool:
        return self.tool_name is not None

    @property
    def token_count(self) -> int:
        """Tokens generated: a tool call adds its name token and an end token."""
        return len(self.pieces) + 2 if self.is_tool_call else len(self.pieces)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def max_tokens_of(body: dict[str, Any]) -> int | None:
    """``max_completion_tokens`` or ``max_tokens``; 400 when not a positive integer."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise EngineError(
                f"{key} must be a positive integer, got {value!r}.",
                HTTPStatus.BAD_REQUEST,
                "BadRequestError",
                param=key,
            )
        return value
    return None


def make_plan(
    config: SimConfig, model: str, prompt: str, body: dict[str, Any], rule: ScriptRule | None
) -> Plan:
    """Decide the reply: scripted tool call or text, a constrained choice, or hashed words."""
    limit = max_tokens_of(body)
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
    if rule is not None and rule.text is not None:
        pieces = split_tokens(rule.text)
    else:
        choices = _choices(body)
        if choices:
            pieces = [pick_choice(model, prompt, choices)]
        else:
            count = min(config.output_tokens, limit or config.output_tokens)
            pieces = split_tokens(" ".join(reply_words(model, prompt, count)))
            finish = "length" if limit is not None and limit < config.output_tokens else "stop"
            return Plan(pieces=pieces, finish_reason=finish)
    if limit is not None and limit < len(pieces):
        return Plan(pieces=pieces[:limit], finish_reason="length")
    return Plan(pieces=pieces, finish_reason="stop")


def _choices(body: dict[str, Any]) -> list[str]:
    structured = body.get("structured_outputs")
    if not isinstance(structured, dict):
        return []
    choices = structured.get("choice")
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        return choices
    return []


class TokenClock:
    """Paces one request's tokens (TTFT, then ITL) and records vLLM's timing metrics."""

    def __init__(
        self, config: SimConfig, metrics: SimMetrics, request: SimRequest, prompt_tokens: int
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.request = request
        self.prompt_tokens = prompt_tokens
        self.first_due = 0.0
        self.last: float | None = None
        self.generated = 0

    async def start(self) -> None:
        """Wait until the request is scheduled and its adapter slot is ready."""
        ready = await self.request.admitted
        loop = asyncio.get_running_loop()
        self.metrics.queue_time.observe(max(0.0, loop.time() - self.request.arrival))
        self.first_due = ready + self.config.ttft_s

    async def tick(self) -> None:
        """Wait for the next token to be due."""
        loop = asyncio.get_running_loop()
        due = self.first_due + self.generated * self.config.itl_s
        await asyncio.sleep(max(0.0, due - loop.time()))
        now = loop.time()
        if self.last is None:
            self.metrics.ttft.observe(now - self.request.arrival)
            self.metrics.prompt_tokens.inc(self.prompt_tokens)
        else:
            self.metrics.itl.observe(now - self.last)
        self.last = now
        self.generated += 1
        self.metrics.generation_tokens.inc()

    def done(self, reason: str) -> None:
        loop = asyncio.get_running_loop()
        self.metrics.e2e.observe(loop.time() - self.request.arrival)
        self.metrics.success[reason].inc()
