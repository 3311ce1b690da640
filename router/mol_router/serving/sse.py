"""Server-sent events passed through one event at a time.

Chunks from the engine are split on the blank line that ends an SSE event and
forwarded as they come, never buffered whole. Only events that can matter are
parsed: the usage event (token counting; dropped when the client did not ask for
usage, since the router asks for it on the client's behalf) and, with handoff on,
events carrying tool calls. A ``handoff`` call is held back, never shown to the
client; :attr:`StreamHop.call` holds it when the stream ends. With the code interpreter
on, ``python`` calls are shown as the model writes them (their indexes moved past the
request's earlier calls, so a client's accumulator keeps steps apart), and only the
event that ends the answer with them is dropped: :attr:`StreamHop.turn` holds them for
the router to run. ``data: [DONE]`` is never forwarded here: the caller ends the
client's stream once the last hop is over.
"""

from __future__ import annotations

from typing import Any

import orjson

from mol_router.harness import tool
from mol_router.routing import handoff

DONE = b"data: [DONE]"
DONE_EVENT = DONE + b"\n\n"
_DATA = b"data: "


class StreamHop:
    """One upstream stream. ``feed`` returns the bytes to send on now."""

    __slots__ = ("_buf", "_calls", "_first", "_held", "_id", "_skip_role", "_tools",
                 "call", "completion", "done", "handoff", "harness", "index_base",
                 "keep_usage", "other_tools", "prompt", "rewrite_id", "targets", "turn")

    def __init__(self, *, keep_usage: bool, handoff_on: bool, continuation: bool,
                 rewrite_id: bytes | None = None,
                 targets: frozenset[str] = frozenset(), want_id: bool = True,
                 harness_on: bool = False, index_base: int = 0) -> None:
        self._buf = b""
        self.targets = targets  # experts a handoff may name; any other call is shown
        self.keep_usage = keep_usage
        self.handoff = handoff_on
        self.harness = harness_on
        self._tools = handoff_on or harness_on  # tool-call events need a look
        self.index_base = index_base  # python calls shown earlier in this request
        self._skip_role = continuation
        self._first = want_id  # read the first event's id (a handoff may follow)
        self.rewrite_id = rewrite_id
        self._id: bytes | None = None
        self._calls: dict[int, list[str]] = {}  # index -> [name, arguments, id]
        self._held: list[bytes] = []
        self.other_tools = False
        self.call: handoff.Call | None = None
        self.turn: tool.Turn | None = None
        self.prompt = 0
        self.completion = 0
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        if (not self._buf and not self._first and not self._held
                and chunk.endswith(b"\n\n") and b"prompt_tokens" not in chunk
                and DONE not in chunk and not (self._tools and b"tool_calls" in chunk)):
            # Whole events that need nothing from us: the usual token chunk, sent as is.
            if self.rewrite_id is not None and self._id is not None:
                return chunk.replace(self._id, self.rewrite_id)
            return chunk
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return b""
        whole, self._buf = buf[:end + 2], buf[end + 2:]
        out: list[bytes] = []
        while whole:
            rest = self._plain(whole)
            if rest is not None:  # nothing left that needs a look: passed on as is
                out.append(rest)
                break
            event, _, whole = whole.partition(b"\n\n")
            sent = self._event(event)
            if sent:
                out.append(sent)
        return b"".join(out)

    def _plain(self, events: bytes) -> bytes | None:
        """``events`` (whole events) to send on unread, when none of them needs a look
        except a final ``data: [DONE]`` (noted and dropped); None otherwise."""
        if (self._first or self._held or b"prompt_tokens" in events
                or (self._tools and b"tool_calls" in events)):
            return None
        at = events.find(DONE)
        if at >= 0:
            if events[at:] != DONE_EVENT or (at and events[at - 2:at] != b"\n\n"):
                return None
            self.done = True
            events = events[:at]
        if self.rewrite_id is not None and self._id is not None:
            return events.replace(self._id, self.rewrite_id)
        return events

    def finish(self) -> bytes:
        """Whatever is left once the upstream stream ended."""
        rest = self._event(self._buf) if self._buf.strip() else b""
        self._buf = b""
        if self._calls and self.call is None and self.turn is None:
            self._decide()
        if self.call is None and self._held:  # not a usable handoff: show it as it was
            rest = b"".join(self._held) + rest
            self._held = []
        return rest

    def first_id(self) -> bytes | None:
        return self._id

    def _event(self, event: bytes) -> bytes:
        if event.startswith(DONE):  # the caller ends the client's stream itself
            self.done = True
            return b""
        if self._first and event.startswith(_DATA):
            self._first = False
            try:
                obj = orjson.loads(event[6:])
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                ident = obj.get("id")
                if isinstance(ident, str):
                    self._id = ident.encode()
                if self._skip_role and _role_only(obj):
                    return b""
        if self.rewrite_id is not None and self._id is not None:
            event = event.replace(self._id, self.rewrite_id, 1)
        if b"prompt_tokens" in event and self._usage(event) and not self.keep_usage:
            return b""
        if self._tools and b"tool_calls" in event:
            kept, shown = self._tool_event(event)
            if kept:
                self._held.append(event + b"\n\n")
                return b""
            if shown is not None:
                event = shown
                if not event:
                    return b""
        if self._held:
            self._held.append(event + b"\n\n")
            return b""
        return event + b"\n\n"

    def _usage(self, event: bytes) -> bool:
        """Record usage; True when this is the usage-only event (no choices)."""
        try:
            obj = orjson.loads(event[6:])
        except orjson.JSONDecodeError:
            return False
        usage = obj.get("usage") if isinstance(obj, dict) else None
        if not isinstance(usage, dict):
            return False
        self.prompt = _int(usage.get("prompt_tokens"))
        self.completion = _int(usage.get("completion_tokens"))
        return not obj.get("choices")

    def _tool_event(self, event: bytes) -> tuple[bool, bytes | None]:
        """Track tool-call deltas: (held, shown). Held: the event belongs to a handoff
        call. Shown: the event as the client gets it when it carries ``python`` calls
        (indexes moved; empty when it only ends the answer with them), else None."""
        try:
            obj = orjson.loads(event[6:])
            choice = obj["choices"][0]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return False, None
        delta = choice.get("delta") or {}
        mine = python = False
        for tc in delta.get("tool_calls") or ():
            if not isinstance(tc, dict):
                continue
            index = _int(tc.get("index"))
            fn = tc.get("function") or {}
            entry = self._calls.setdefault(index, ["", "", ""])
            if isinstance(fn.get("name"), str):
                entry[0] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                entry[1] += fn["arguments"]
            if isinstance(tc.get("id"), str):
                entry[2] = tc["id"]
            if self.handoff and entry[0] == handoff.TOOL_NAME:
                mine = True
            elif self.harness and entry[0] == tool.TOOL_NAME:
                python = True
                tc["index"] = index + self.index_base
            else:
                self.other_tools = True
        names = {c[0] for c in self._calls.values()}
        finishing = choice.get("finish_reason") == "tool_calls"
        if self.handoff and (mine or (finishing and handoff.TOOL_NAME in names)):
            return True, None
        if self.harness and finishing and tool.TOOL_NAME in names:
            self._decide()
            if self.turn is not None:  # the router goes on: this answer does not end here
                choice["finish_reason"] = None
                if not python and not delta.get("content"):
                    return False, b""
                python = True
        if python:
            return False, b"data: " + orjson.dumps(obj)
        return False, None

    def _decide(self) -> None:
        if self.handoff:
            calls = [c for c in self._calls.values() if c[0] == handoff.TOOL_NAME]
            if len(calls) == 1 and not self.other_tools:
                call = handoff.parse_arguments(calls[0][1])
                if call is not None and call.expert in self.targets:
                    self.call = call
                    return
        if self.harness and not self.other_tools:
            self.turn = tool.from_calls([(c[0], c[1], c[2]) for _, c in
                                         sorted(self._calls.items())])


def _role_only(obj: dict[str, Any]) -> bool:
    try:
        delta = obj["choices"][0]["delta"]
    except (KeyError, IndexError, TypeError):
        return False
    return isinstance(delta, dict) and not delta.get("content") and not delta.get("tool_calls")


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
