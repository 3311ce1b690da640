"""Server-sent events passed through one event at a time.

Chunks from the engine are split on the blank line that ends an SSE event and
forwarded as they come, never buffered whole. Only events that can matter are
parsed: the usage event (token counting; dropped when the client did not ask for
usage, since the router asks for it on the client's behalf) and, with handoff on,
events carrying tool calls. A ``handoff`` call is held back, never shown to the
client; :attr:`StreamHop.call` holds it when the stream ends. ``data: [DONE]`` is
never forwarded here: the caller ends the client's stream once the last hop is over.
"""

from __future__ import annotations

from typing import Any

import orjson

from mol_router.routing import handoff

DONE = b"data: [DONE]"
DONE_EVENT = DONE + b"\n\n"
_DATA = b"data: "


class StreamHop:
    """One upstream stream. ``feed`` returns the bytes to send on now."""

    __slots__ = ("_buf", "_calls", "_first", "_held", "_id", "_skip_role", "call",
                 "completion", "done", "handoff", "keep_usage", "other_tools", "prompt",
                 "rewrite_id", "targets")

    def __init__(self, *, keep_usage: bool, handoff_on: bool, continuation: bool,
                 rewrite_id: bytes | None = None,
                 targets: frozenset[str] = frozenset(), want_id: bool = True) -> None:
        self._buf = b""
        self.targets = targets  # experts a handoff may name; any other call is shown
        self.keep_usage = keep_usage
        self.handoff = handoff_on
        self._skip_role = continuation
        self._first = want_id  # read the first event's id (a handoff may follow)
        self.rewrite_id = rewrite_id
        self._id: bytes | None = None
        self._calls: dict[int, list[str]] = {}  # index -> [name, arguments]
        self._held: list[bytes] = []
        self.other_tools = False
        self.call: handoff.Call | None = None
        self.prompt = 0
        self.completion = 0
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        if (not self._buf and not self._first and not self._held
                and chunk.endswith(b"\n\n") and b"prompt_tokens" not in chunk
                and DONE not in chunk and not (self.handoff and b"tool_calls" in chunk)):
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
                or (self.handoff and b"tool_calls" in events)):
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
        if self._calls and self.call is None:
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
        if self.handoff and b"tool_calls" in event and self._tool_event(event):
            self._held.append(event + b"\n\n")
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

    def _tool_event(self, event: bytes) -> bool:
        """Track tool-call deltas; True when the event belongs to a handoff call."""
        try:
            obj = orjson.loads(event[6:])
            choice = obj["choices"][0]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return False
        delta = choice.get("delta") or {}
        mine = False
        for tc in delta.get("tool_calls") or ():
            if not isinstance(tc, dict):
                continue
            index = _int(tc.get("index"))
            fn = tc.get("function") or {}
            entry = self._calls.setdefault(index, ["", ""])
            if isinstance(fn.get("name"), str):
                entry[0] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                entry[1] += fn["arguments"]
            if entry[0] == handoff.TOOL_NAME:
                mine = True
            else:
                self.other_tools = True
        finishing = choice.get("finish_reason") == "tool_calls"
        return mine or (finishing and any(c[0] == handoff.TOOL_NAME
                                          for c in self._calls.values()))

    def _decide(self) -> None:
        calls = [c for c in self._calls.values() if c[0] == handoff.TOOL_NAME]
        if len(calls) == 1 and not self.other_tools:
            call = handoff.parse_arguments(calls[0][1])
            if call is not None and call.expert in self.targets:
                self.call = call


def _role_only(obj: dict[str, Any]) -> bool:
    try:
        delta = obj["choices"][0]["delta"]
    except (KeyError, IndexError, TypeError):
        return False
    return isinstance(delta, dict) and not delta.get("content") and not delta.get("tool_calls")


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
