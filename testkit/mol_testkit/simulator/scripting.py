"""Scripted behaviour: make a model answer with a tool call, a fixed text, or fail.

Rules are matched newest first. A rule applies to one model name (or every model when
``model`` is None), optionally only when the prompt contains a substring, and for a
number of requests (``times``; None = until cleared). A tool-call rule fires only when
the request offers a tool of that name (``require_offered``), as a real model can only
call offered tools. The book is thread-safe: tests script it from their own thread
while the replica serves in another.
"""

from __future__ import annotations

import json
import threading
import uuid
from http import HTTPStatus
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ToolCallSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """A JSON object (encoded for the reply) or an already encoded string."""
    id: str | None = None
    """Tool call id; vLLM-style ``chatcmpl-tool-<hex>`` when omitted."""
    require_offered: bool = True

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)

    def call_id(self) -> str:
        return self.id or f"chatcmpl-tool-{uuid.uuid4().hex}"


class FailureSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: int = Field(default=500, ge=400, le=599)
    """HTTP status of the error answer (vLLM's error JSON), unless ``disconnect``."""
    disconnect: bool = False
    """Close the connection instead of answering."""
    after_tokens: int = Field(default=0, ge=0)
    """With ``disconnect`` on a streamed request: close after this many tokens."""
    message: str | None = Field(default=None, min_length=1, max_length=2000)
    """The error's message (default: "scripted failure for model `<model>`"), e.g.
    vLLM's own words for an adapter that failed to load on this replica."""

    @field_validator("status")
    @classmethod
    def _known_status(cls, status: int) -> int:
        try:
            HTTPStatus(status)
        except ValueError:
            raise ValueError(f"status {status} is not a standard HTTP status code") from None
        return status


class ScriptRule(BaseModel):
    """One rule; also the body of ``POST /sim/script``."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    when_prompt_contains: str | None = None
    times: int | None = Field(default=None, ge=1)
    tool_call: ToolCallSpec | None = None
    text: str | None = None
    failure: FailureSpec | None = None

    @model_validator(mode="after")
    def _one_action(self) -> ScriptRule:
        given = [k for k in ("tool_call", "text", "failure") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "a script rule needs exactly one of 'tool_call', 'text' or 'failure', "
                f"got {given or 'none'}"
            )
        return self

    @property
    def kind(self) -> Literal["tool_call", "text", "failure"]:
        if self.tool_call is not None:
            return "tool_call"
        return "text" if self.text is not None else "failure"


def offered_tools(body: dict[str, Any]) -> set[str]:
    """Function names a chat request offers in ``tools``."""
    names: set[str] = set()
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                names.add(function["name"])
    return names


class ScriptBook:
    """The rules of one replica."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[tuple[int, ScriptRule, list[int]]] = []
        self._next_id = 1

    def add(self, rule: ScriptRule) -> int:
        with self._lock:
            rule_id = self._next_id
            self._next_id += 1
            self._rules.append((rule_id, rule, [rule.times or 0]))
            return rule_id

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[ScriptRule]:
        with self._lock:
            return [rule for _, rule, _ in self._rules]

    def take(
        self, model: str, prompt: str, tools: set[str], *, chat: bool = True
    ) -> ScriptRule | None:
        """The newest rule matching this request, using up one of its ``times``.

        Tool-call rules never match ``/v1/completions`` requests (``chat=False``).
        """
        with self._lock:
            for index in range(len(self._rules) - 1, -1, -1):
                _, rule, left = self._rules[index]
                if rule.model is not None and rule.model != model:
                    continue
                if rule.when_prompt_contains and rule.when_prompt_contains not in prompt:
                    continue
                spec = rule.tool_call
                if spec is not None and (
                    not chat or (spec.require_offered and spec.name not in tools)
                ):
                    continue
                if rule.times is not None:
                    left[0] -= 1
                    if left[0] <= 0:
                        del self._rules[index]
                return rule
            return None
