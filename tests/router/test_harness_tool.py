"""The code interpreter's pure part: the request, the offered ``python`` function, its
calls in whole answers and streamed deltas, and the bounded tool message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mol_platform.contract.router_config import RouterConfig, router_config_from_spec
from mol_platform.contract.spec import MoLDeployment
from mol_router.harness import tool
from mol_router.serving.sse import StreamHop

BASE: dict[str, Any] = {"deployment": "d", "profile": "p", "default": "chat",
                        "endpoints": ["http://e"]}


def test_requested_only_by_a_code_interpreter_entry() -> None:
    assert tool.requested([{"type": "code_interpreter"}])
    assert tool.requested([{"type": "function", "function": {"name": "f"}},
                           {"type": "code_interpreter"}])
    assert not tool.requested([{"type": "function", "function": {"name": "python"}}])
    assert not tool.requested(None)
    assert not tool.requested({"type": "code_interpreter"})


def test_python_replaces_the_code_interpreter_entry() -> None:
    mine = {"type": "function", "function": {"name": "lookup"}}
    tools = tool.offered_tools([{"type": "code_interpreter"}, mine])
    assert tools == [mine, tool.TOOL]
    fn = tool.TOOL["function"]
    assert fn["name"] == "python"
    assert fn["parameters"]["required"] == ["code"]
    assert list(fn["parameters"]["properties"]) == ["code"]
    assert "persist" in fn["description"]


@pytest.mark.parametrize(("value", "ok"), [("a" * 32, True), ("Ab_-" * 8, True),
                                           ("short", False), ("a" * 65, False),
                                           ("a" * 31 + "!", False), ("a" * 32 + "\n", False),
                                           ("../" + "a" * 30, False)])
def test_session_ids_must_match_whole(value: str, ok: bool) -> None:
    assert tool.valid_session(value) is ok


def _answer(*calls: tuple[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": content, "tool_calls": [
            {"id": f"call-{i}", "type": "function",
             "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)]}}]}


def test_python_turn_in_a_whole_answer() -> None:
    turn = tool.from_message(_answer(("python", json.dumps({"code": "x = 1"})),
                                     ("python", '{"code": "x"}'), content="let me see"))
    assert turn is not None
    assert [c.code for c in turn.calls] == ["x = 1", "x"]
    assert [c.id for c in turn.calls] == ["call-0", "call-1"]
    assert turn.content == "let me see"
    # a client tool beside it: the whole answer is the client's
    assert tool.from_message(_answer(("python", "{}"), ("lookup", "{}"))) is None
    assert tool.from_message({"choices": [{"message": {"content": "hi"}}]}) is None
    assert tool.from_message({"choices": []}) is None
    bad = tool.from_message(_answer(("python", "not json")))
    assert bad is not None
    assert bad.calls[0].code is None  # run as an error step, not a crash


def test_tool_text_labels_and_bounds_the_output() -> None:
    step = tool.Step(1, "c", "print(1)", "error", stdout="1\n", stderr="warn\n",
                     result="2", error="Traceback ...\nValueError: no", truncated=True,
                     notice="fresh session")
    text = tool.tool_text(step, 10_000)
    assert text.splitlines()[0] == "[notice] fresh session"
    assert "1\n[stderr]\nwarn\n[result] 2\n[error]\nTraceback" in text
    assert text.endswith("[output truncated at the sandbox's limit]")
    assert tool.tool_text(tool.Step(1, "c", "", "ok"), 1000) == "(no output)"
    big = tool.Step(1, "c", "", "ok", stdout="a" * 5000 + "THE END")
    cut = tool.tool_text(big, 1000)
    assert len(cut) <= 1000
    assert cut.endswith("THE END")
    assert "characters cut" in cut


def test_messages_follow_the_chat_template_order() -> None:
    turn = tool.Turn((tool.Call("c1", '{"code": "1"}', "1"),))
    step = tool.Step(1, "c1", "1", "ok", result="1")
    assistant, result = tool.messages_for(turn, [step], 1000)
    assert assistant == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "python", "arguments": '{"code": "1"}'}}]}
    assert result == {"role": "tool", "tool_call_id": "c1", "content": "[result] 1"}


def test_outcomes() -> None:
    assert tool.outcome_of(None) == "ok"
    assert tool.outcome_of("Traceback\nZeroDivisionError") == "error"
    assert tool.outcome_of("TimeoutError: the call ran past the 30 s limit") == "timeout"
    assert "8 steps" in tool.stop_note("step_limit", 8, 120)
    assert "120 s" in tool.stop_note("time_budget", 8, 120)


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _sse({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish}]})


def test_streamed_python_calls_are_shown_and_the_end_is_dropped() -> None:
    hop = StreamHop(keep_usage=True, handoff_on=False, continuation=True, harness_on=True,
                    index_base=2, want_id=False)
    out = hop.feed(_delta({"content": None, "tool_calls": [
        {"index": 0, "id": "call-9", "type": "function", "function": {"name": "python"}}]}))
    out += hop.feed(_delta({"tool_calls": [{"index": 0, "function": {
        "arguments": '{"code": "print(6*7)"}'}}]}))
    out += hop.feed(_delta({}, "tool_calls"))
    out += hop.feed(b"data: [DONE]\n\n")
    out += hop.finish()
    shown = [json.loads(e[6:]) for e in out.split(b"\n\n") if e]
    assert len(shown) == 2  # the two call deltas; the tool_calls ending is dropped
    assert [s["choices"][0]["delta"]["tool_calls"][0]["index"] for s in shown] == [2, 2]
    assert hop.turn is not None
    assert hop.turn.calls[0].code == "print(6*7)"
    assert hop.turn.calls[0].id == "call-9"
    assert hop.done


def test_streamed_client_tools_stay_the_clients() -> None:
    hop = StreamHop(keep_usage=True, handoff_on=False, continuation=False,
                    harness_on=True, want_id=False)
    out = hop.feed(_delta({"tool_calls": [{"index": 0, "id": "a", "function": {
        "name": "python", "arguments": "{}"}}, {"index": 1, "id": "b", "function": {
            "name": "lookup", "arguments": "{}"}}]}))
    out += hop.feed(_delta({}, "tool_calls"))
    out += hop.finish()
    assert hop.turn is None
    assert b'"finish_reason": "tool_calls"' in out


def test_config_needs_the_sandbox_for_harness_experts() -> None:
    experts = [{"name": "chat", "adapter": "a/chat@v1", "harness": True}]
    with pytest.raises(ValueError, match="set harness"):
        RouterConfig.model_validate({**BASE, "experts": experts})
    cfg = RouterConfig.model_validate({**BASE, "experts": experts,
                                       "harness": {"sandboxUrl": "http://sb"}})
    assert cfg.harness is not None
    assert (cfg.harness.max_steps, cfg.harness.budget_seconds) == (8, 120.0)


def test_the_spec_maps_to_the_harness_section() -> None:
    obj = MoLDeployment.from_yaml(Path("deploy/examples/harness.yaml").read_text())
    cfg = router_config_from_spec(obj, endpoints=["http://e"], sandbox_url="http://sb")
    assert cfg.harness is not None
    assert cfg.harness.sandbox_url == "http://sb"
    limit = obj.spec.harness_settings.limits.timeout_seconds
    assert cfg.harness.call_timeout_seconds == limit + 10
    assert [e.name for e in cfg.experts if e.harness] == obj.spec.harness_experts
    experts = [e.model_copy(update={"harness": False}) for e in obj.spec.experts]
    plain = obj.model_copy(update={"spec": obj.spec.model_copy(update={"experts": experts})})
    assert router_config_from_spec(plain, endpoints=["http://e"]).harness is None
