"""The code interpreter's pure part: the request asking for it, the ``python`` function
the expert is offered instead, the model's calls of it, and what each step tells the
model and the client.

A client asks with ``{"type": "code_interpreter"}`` in ``tools`` (OpenAI's name for the
same thing). Engines know only functions, so that entry is replaced by ``python``; the
model's calls of it never reach the client as calls to answer: the router runs them
(:mod:`mol_router.harness.loop`) and shows each as a step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

TOOL_NAME = "python"
SESSION_HEADER = "x-mol-session"
# The sandbox's ids are secrets.token_urlsafe(24); a little room either side, nothing else.
SESSION_RE = re.compile(r"[A-Za-z0-9_-]{16,64}")
_DESCRIPTION = ("Run Python code in a persistent session and get its output. Variables, "
                "functions and imports persist between calls (it is a REPL). Print what "
                "you need to see; the last expression's value is returned too. There is "
                "no network access.")
TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL_NAME,
    "description": _DESCRIPTION,
    "parameters": {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source to run"}},
        "required": ["code"]}}}

Outcome = Literal["ok", "error", "timeout", "limit", "sandbox_unavailable"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "error", "timeout", "limit", "sandbox_unavailable")
_TIMEOUT_PREFIX = "TimeoutError: the call ran past"  # the sandbox's own words


def requested(tools: object) -> bool:
    """Whether the request's ``tools`` ask for the code interpreter."""
    return isinstance(tools, list) and any(_is_interpreter(t) for t in tools)


def offered_tools(tools: list[Any]) -> list[Any]:
    """The client's tools with the code interpreter entry replaced by ``python``."""
    out = [t for t in tools if not _is_interpreter(t)]
    return [*out, TOOL]


def _is_interpreter(tool: object) -> bool:
    return isinstance(tool, dict) and tool.get("type") == "code_interpreter"


def valid_session(value: str) -> bool:
    return SESSION_RE.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Call:
    """One ``python`` call of the model."""

    id: str
    arguments: str  # as the model wrote them (echoed in the assistant message)
    code: str | None  # None: the arguments are not ``{"code": "<str>"}``


@dataclass(frozen=True, slots=True)
class Turn:
    """An answer whose tool calls are all ``python``: the router runs them and asks on."""

    calls: tuple[Call, ...]
    content: str | None = None  # what the model said beside the calls


def parse_code(arguments: str) -> str | None:
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    code = args.get("code") if isinstance(args, dict) else None
    return code if isinstance(code, str) else None


def make_call(call_id: str, arguments: str) -> Call:
    return Call(call_id, arguments, parse_code(arguments))


def from_calls(calls: Sequence[tuple[str, str, str]], content: str | None = None
               ) -> Turn | None:
    """A turn from ``(name, arguments, id)`` triples, when every one is ``python``."""
    if not calls or any(name != TOOL_NAME for name, _, _ in calls):
        return None
    return Turn(tuple(make_call(cid, args) for _, args, cid in calls), content)


def from_message(response: dict[str, Any]) -> Turn | None:
    """The ``python`` turn of a whole chat response, when all its tool calls are
    ``python``."""
    try:
        message = response["choices"][0]["message"]
        calls = message.get("tool_calls") or []
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    triples: list[tuple[str, str, str]] = []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            return None
        args = fn.get("arguments")
        args = args if isinstance(args, str) else orjson.dumps(args).decode()
        triples.append((str(fn.get("name")), args, str(c.get("id") or "")))
    content = message.get("content")
    return from_calls(triples, content if isinstance(content, str) else None)


@dataclass(frozen=True, slots=True)
class Step:
    """One run (or refusal) of a ``python`` call, as the client sees it."""

    index: int  # 1-based, over the request
    call_id: str
    code: str
    outcome: Outcome
    stdout: str = ""
    stderr: str = ""
    result: str | None = None
    error: str | None = None
    notice: str | None = None
    duration_ms: float = 0.0
    truncated: bool = False
    session: str | None = None

    def public(self) -> dict[str, Any]:
        return {"index": self.index, "tool_call_id": self.call_id, "code": self.code,
                "outcome": self.outcome, "stdout": self.stdout, "stderr": self.stderr,
                "result": self.result, "error": self.error, "notice": self.notice,
                "duration_ms": self.duration_ms, "truncated": self.truncated,
                "session": self.session}


def outcome_of(error: str | None) -> Outcome:
    """A sandbox answer's outcome: its own time limit, another error, or ok."""
    if error is None:
        return "ok"
    return "timeout" if error.startswith(_TIMEOUT_PREFIX) else "error"


def tool_text(step: Step, limit: int) -> str:
    """The tool message's content for the model: the output, labelled, cut to ``limit``
    characters (head and tail kept: a traceback's end says the most)."""
    parts: list[str] = []
    if step.notice:
        parts.append(f"[notice] {step.notice}")
    if step.stdout:
        parts.append(step.stdout.rstrip("\n"))
    if step.stderr:
        parts.append("[stderr]\n" + step.stderr.rstrip("\n"))
    if step.result is not None:
        parts.append(f"[result] {step.result}")
    if step.error:
        parts.append("[error]\n" + step.error.rstrip("\n"))
    if step.truncated:
        parts.append("[output truncated at the sandbox's limit]")
    text = "\n".join(parts) or "(no output)"
    if len(text) <= limit:
        return text
    note = f"\n[... {len(text) - limit} characters cut ...]\n"
    keep = max(0, limit - len(note))
    head = keep * 3 // 4
    return text[:head] + note + text[len(text) - (keep - head):]


def messages_for(turn: Turn, steps: Sequence[Step], limit: int) -> list[dict[str, Any]]:
    """What the conversation gains from a turn: the assistant's calls, then one ``tool``
    message per call (the engine's chat template expects that order)."""
    calls = [{"id": c.id, "type": "function",
              "function": {"name": TOOL_NAME, "arguments": c.arguments}} for c in turn.calls]
    out: list[dict[str, Any]] = [{"role": "assistant", "content": turn.content,
                                  "tool_calls": calls}]
    out += [{"role": "tool", "tool_call_id": s.call_id, "content": tool_text(s, limit)}
            for s in steps]
    return out


def stop_note(reason: Literal["step_limit", "time_budget"], max_steps: int,
              budget: float) -> str:
    """The final message when a limit stops the steps."""
    if reason == "step_limit":
        return (f"[The code interpreter stopped: the limit of {max_steps} steps per request "
                "was reached before a final answer.]")
    return (f"[The code interpreter stopped: the {budget:g} s time budget of this request "
            "was spent before a final answer.]")
