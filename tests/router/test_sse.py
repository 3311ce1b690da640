"""Server-sent events through ``StreamHop``: however the engine's bytes are cut into
chunks, the client gets the same events; usage is read (and dropped unless asked
for), ``[DONE]`` noted and held back, the first hop's id kept across a handoff."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mol_router.serving.sse import StreamHop


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _delta(text: str, ident: str = "cmpl-2") -> bytes:
    return _event({"id": ident, "choices": [{"index": 0, "delta": {"content": text}}]})


ROLE = _event({"id": "cmpl-2", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
USAGE = _event({"id": "cmpl-2", "choices": [],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
DONE = b"data: [DONE]\n\n"
TRICKY = _delta("a line that says data: [DONE] is only text")
STREAM = ROLE + _delta("Hel") + b": keep-alive comment\n\n" + _delta("lo") + TRICKY + USAGE + DONE


def _run(chunks: list[bytes], **options: Any) -> tuple[bytes, StreamHop]:
    hop = StreamHop(**{"keep_usage": False, "handoff_on": False, "continuation": False,
                       **options})
    out = b"".join(hop.feed(c) for c in chunks) + hop.finish()
    return out, hop


def _cuts(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 7, 20, 64, 1000, 100_000])
@pytest.mark.parametrize("want_id", [True, False])
def test_the_same_events_however_the_stream_is_cut(size: int, want_id: bool) -> None:
    out, hop = _run(_cuts(STREAM, size), want_id=want_id)
    assert out == ROLE + _delta("Hel") + b": keep-alive comment\n\n" + _delta("lo") + TRICKY
    assert hop.done
    assert (hop.prompt, hop.completion) == (7, 3)
    assert hop.first_id() == (b"cmpl-2" if want_id else None)


@pytest.mark.parametrize("size", [3, 50, 100_000])
def test_usage_kept_when_asked_and_crlf_events(size: int) -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    out, hop = _run(_cuts(crlf, size), keep_usage=True)
    assert out.endswith(USAGE)
    assert DONE not in out.replace(TRICKY, b"")
    assert hop.done


@pytest.mark.parametrize("size", [5, 100_000])
def test_a_continuation_keeps_the_first_id_and_drops_the_role_event(size: int) -> None:
    out, _ = _run(_cuts(STREAM, size), continuation=True, rewrite_id=b"cmpl-1")
    assert not out.startswith(ROLE.replace(b"cmpl-2", b"cmpl-1"))
    assert out.startswith(_delta("Hel", "cmpl-1"))
    assert b"cmpl-2" not in out


def test_an_unfinished_stream_is_not_done() -> None:
    out, hop = _run([ROLE + _delta("Hel")[:-3]])
    assert out == ROLE + _delta("Hel")[:-3] + b"\n\n"  # the cut event, passed on at the end
    assert not hop.done
