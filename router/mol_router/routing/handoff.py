"""Same-request switching between experts through a ``handoff`` tool.

With handoff on, the router offers the expert a ``handoff`` function whose
``expert`` argument is limited to the other experts. When the expert calls it, the
router does not pass the call to the client: it continues the same request with the
target expert, the summary added as system context, and the client sees one answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from mol_platform.contract.handoff import TOOL_NAME, tool

__all__ = ["TOOL_NAME", "Call", "from_message", "may_offer", "offer", "parse_arguments",
           "tool"]


def offer(body: dict[str, Any], tool_def: dict[str, Any] | None,
          client_tools: list[Any] | None) -> None:
    """Set ``body["tools"]`` to the client's tools plus ``handoff`` (None: theirs)."""
    if tool_def is not None:
        body["tools"] = [*(client_tools or ()), tool_def]
    elif client_tools is None:
        body.pop("tools", None)
    else:
        body["tools"] = client_tools


def may_offer(body: dict[str, Any]) -> bool:
    """Not when the client turned tools off or forces one of its own."""
    choice = body.get("tool_choice")
    return choice is None or choice == "auto"


@dataclass(frozen=True, slots=True)
class Call:
    expert: str
    summary: str


def parse_arguments(arguments: object) -> Call | None:
    try:
        args = orjson.loads(arguments) if isinstance(arguments, (str, bytes)) else arguments
    except orjson.JSONDecodeError:
        return None
    if not isinstance(args, dict):
        return None
    expert, summary = args.get("expert"), args.get("summary", "")
    if not isinstance(expert, str) or not isinstance(summary, str):
        return None
    return Call(expert, summary)


def from_message(response: dict[str, Any]) -> Call | None:
    """The handoff call in a whole chat response, when it is the only tool call."""
    try:
        calls = response["choices"][0]["message"].get("tool_calls") or []
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    if len(calls) != 1 or not isinstance(calls[0], dict):
        return None
    fn = calls[0].get("function") or {}
    if fn.get("name") != TOOL_NAME:
        return None
    return parse_arguments(fn.get("arguments"))


def continue_messages(messages: list[Any], source: str, summary: str) -> list[Any]:
    """The conversation for the next expert: the summary as system context, first
    (chat templates expect the system message at the start)."""
    note = (f"The {source} expert handed this conversation to you. "
            f"Its summary of what is needed: {summary}")
    out = list(messages)
    first = out[0] if out else None
    if isinstance(first, dict) and first.get("role") == "system" and isinstance(
            first.get("content"), str):
        out[0] = {**first, "content": f"{first['content']}\n\n{note}"}
    else:
        out.insert(0, {"role": "system", "content": note})
    return out
