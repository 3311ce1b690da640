"""bench/_prompts.py and bench/wrk_post.lua: the long-prompt requests of the router
benchmarks, as built here and as wrk sends them."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from mol_testkit.net import http_server

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _load import run_wrk_script  # noqa: E402
from _prompts import (  # noqa: E402
    ACTIVE,
    CHARS_PER_TOKEN,
    TURNS,
    chat_template,
    parse_tokens,
    session_of,
)

LUA = ROOT / "bench" / "wrk_post.lua"


def test_bodies_share_the_system_prompt_and_a_session_its_context() -> None:
    template = chat_template(4000, stream=False)
    start = 3 * ACTIVE * TURNS
    bodies = [json.loads(template.fill(i, start)) for i in range(2 * ACTIVE * TURNS)]
    chars = sum(len(m["content"]) for m in bodies[0]["messages"])
    assert 0.9 * 4000 * CHARS_PER_TOKEN <= chars <= 1.1 * 4000 * CHARS_PER_TOKEN
    assert bodies[0]["stream"] is False
    assert bodies[0]["model"] == "chat"
    assert len({b["messages"][0]["content"] for b in bodies}) == 1  # one system prompt
    context = [b["messages"][1]["content"] for b in bodies]
    assert context[0].startswith(f"Session {3 * ACTIVE}. ")
    assert len(set(context)) == 2 * ACTIVE  # every session has TURNS turns
    assert all(context[i] == context[i + ACTIVE] for i in range(ACTIVE))  # interleaved
    assert context[0] != context[1]  # consecutive requests: other sessions
    questions = [b["messages"][3]["content"] for b in bodies]
    assert questions[0].startswith(f"Question {start}: ")
    assert len(set(questions)) == len(bodies)
    turns = [session_of(n) for n in range(2 * ACTIVE * TURNS)]
    assert turns[: ACTIVE * TURNS] == list(range(ACTIVE)) * TURNS
    assert set(turns[ACTIVE * TURNS :]) == set(range(ACTIVE, 2 * ACTIVE))
    assert json.loads(chat_template(1000, stream=True).fill(0))["stream"] is True
    assert chat_template(1000, stream=False).fill(3) == chat_template(1000, False).fill(3)


def test_token_counts_are_parsed_and_bounded() -> None:
    assert parse_tokens("1000,4000") == (1000, 4000)
    assert parse_tokens("0") == ()
    assert parse_tokens("") == ()
    with pytest.raises(ValueError, match=r"within 20\.\.200000"):
        parse_tokens("5")
    with pytest.raises(ValueError, match="at least 20 tokens"):
        chat_template(10, stream=False)


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server that keeps every body POSTed to it."""
    seen: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            seen.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        yield f"{url}/v1/chat/completions", seen


def test_wrk_sends_the_template_bodies_in_order(
    recorder: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    url, seen = recorder
    template = chat_template(1000, stream=True)
    path = template.write(tmp_path / "template.txt", start=5000)
    load = run_wrk_script(url, LUA, [str(path), "50", "Authorization: Bearer k"],
                          connections=1, seconds=1)  # fmt: skip
    assert load.errors == 0
    assert load.requests >= 5
    numbers = [json.loads(b)["messages"][3]["content"].split(":")[0] for b in seen]
    first = int(numbers[0].split()[1])
    assert first >= 5000
    assert seen == [template.fill(k, start=first) for k in range(len(seen))]


def test_wrk_sends_a_plain_body_file_as_is(
    recorder: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    url, seen = recorder
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
    (tmp_path / "body.json").write_text(body)
    run_wrk_script(url, LUA, [str(tmp_path / "body.json"), "50"], connections=1, seconds=1)
    assert seen
    assert set(seen) == {body.encode()}
