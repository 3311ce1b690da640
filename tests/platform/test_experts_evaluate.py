"""The evaluation runner against a scripted OpenAI-compatible server on loopback: each
case is asked greedily with its tools and budget, judged, and reported in the set's order
whatever the concurrency."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from mol_platform.apps.experts import evaluate
from mol_testkit.net import http_server


@contextmanager
def scripted(answer: Any) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Answers each chat request with ``answer(body)`` (a message); keeps the bodies."""
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            out = json.dumps({"choices": [{"message": answer(body)}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        yield url, bodies


def test_code_answers_are_judged_and_reported_in_order() -> None:
    cases = evaluate.cases("coding")
    good = {c.id for c in cases[::2]}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        case = next(c for c in cases if c.messages[-1]["content"] == prompt)
        code = "def f(x):\n    return x" if case.id in good else "def f(x)\n    return x"
        return {"role": "assistant", "content": f"```python\n{code}\n```"}

    with scripted(answer) as (url, bodies):
        report = evaluate.run("coding", url, "coding", concurrency=4)
    assert [o.id for o in report.outcomes] == [c.id for c in cases]
    assert {o.id for o in report.outcomes if o.ok} == good
    assert report.metrics()["pass_rate"] == round(len(good) / len(cases), 4)
    assert report.text().count("\n- ") == len(cases) - len(good)
    assert {b["temperature"] for b in bodies} == {0}
    assert {b["max_tokens"] for b in bodies} == {evaluate.MAX_TOKENS["coding"]}
    assert all("tools" not in b for b in bodies)


def test_chat_cases_are_offered_the_handoff_tool_and_calls_are_judged() -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        assert [t["function"]["name"] for t in body["tools"]] == ["handoff"]
        call = {"type": "function", "function": {"name": "handoff", "arguments": json.dumps(
            {"expert": "coding", "summary": "code"})}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    with scripted(answer) as (url, _bodies):
        report = evaluate.run("chat", url, "chat", limit=40)
    expected = [c.expect.get("expert") == "coding" for c in evaluate.cases("chat")]
    assert [o.ok for o in report.outcomes] == expected
