"""The experts' training and evaluation data, and the judge that scores answers.

Every training answer must pass the same ``judge`` the evaluation uses: that is what
makes an evaluation score mean "the expert learned the format the data teaches".
Evaluation prompts must stay apart from training prompts and from the router's
held-out sets, or the scores would measure memory instead of skill.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mol_platform.apps.experts.formats import check_html, code_block, judge

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "platform" / "mol_platform" / "apps" / "experts" / "data"
EXPERTS = ("chat", "agent", "coding", "ui")
HELD_OUT = ("auto_routing_heldout.jsonl", "auto_routing_stress.jsonl")
MIN_COUNTS = {("chat", "train"): 150, ("chat", "eval"): 40,
              ("agent", "train"): 90, ("agent", "eval"): 30,
              ("coding", "train"): 90, ("coding", "eval"): 30,
              ("ui", "train"): 70, ("ui", "eval"): 25}
EXPECT_KINDS = {"chat": {"handoff", "no_handoff"}, "agent": {"tool_call", "none_fits"},
                "coding": {"code"}, "ui": {"html"}}


def _read(path: Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        row = json.loads(line)
        assert isinstance(row, dict), f"{path.name}:{n} is not an object"
        rows.append(row)
    return rows


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _prompt(row: dict[str, Any]) -> str:
    if "prompt" in row:
        return str(row["prompt"])
    return str(row["messages"][0]["content"])


def _train_expect(expert: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The expect a training answer has to meet, derived from its expert and shape."""
    calls = answer.get("tool_calls") or []
    if expert == "coding":
        match = re.match(r"```(\w+)", answer["content"])
        return {"kind": "code", "language": match.group(1) if match else "python"}
    if expert == "ui":
        return {"kind": "html"}
    if expert == "agent":
        return ({"kind": "tool_call", "name": calls[0]["function"]["name"]} if calls
                else {"kind": "none_fits"})
    return ({"kind": "handoff", "expert": calls[0]["function"]["arguments"]["expert"]} if calls
            else {"kind": "no_handoff"})


TRAIN = {e: _read(DATA / e / "train.jsonl") for e in EXPERTS}
EVAL = {e: _read(DATA / e / "eval.jsonl") for e in EXPERTS}
MIXED = _read(DATA / "handoff_mixed.jsonl")


def _train_ids() -> list[str]:
    return [r["id"] for e in EXPERTS for r in TRAIN[e]]


# -- shape ------------------------------------------------------------------------------

@pytest.mark.parametrize("expert", EXPERTS)
def test_train_lines_have_the_chat_shape(expert):
    for row in TRAIN[expert]:
        assert set(row) <= {"id", "messages", "tools"}, row["id"]
        assert re.fullmatch(rf"{expert}-t\d{{3}}", row["id"])
        user, answer = row["messages"]
        assert user["role"] == "user"
        assert user["content"].strip()
        assert answer["role"] == "assistant"
        assert isinstance(answer["content"], str)
        for call in answer.get("tool_calls") or []:
            assert call["type"] == "function"
            assert isinstance(call["function"]["arguments"], dict)
        # The recipe adds the deployment's handoff tool to chat lines itself.
        assert ("tools" in row) == (expert == "agent"), row["id"]


@pytest.mark.parametrize("expert", EXPERTS)
def test_eval_lines_have_a_prompt_and_an_expect(expert):
    for row in EVAL[expert]:
        assert set(row) <= {"id", "messages", "tools", "expect"}, row["id"]
        assert re.fullmatch(rf"{expert}-e\d{{3}}", row["id"])
        [user] = row["messages"]
        assert user["role"] == "user"
        assert user["content"].strip()
        assert row["expect"]["kind"] in EXPECT_KINDS[expert], row["id"]
        assert ("tools" in row) == (expert == "agent"), row["id"]


def test_mixed_lines_name_a_prompt_and_the_expert_that_should_answer():
    assert len(MIXED) == 40
    for row in MIXED:
        assert set(row) == {"id", "prompt", "expert"}
        assert re.fullmatch(r"mix-\d{3}", row["id"])
        assert row["expert"] in EXPERTS
        assert row["prompt"].strip()
    counts = Counter(r["expert"] for r in MIXED)
    assert counts["coding"] >= 10
    assert counts["ui"] >= 10
    assert counts["agent"] >= 6
    assert counts["chat"] >= 6


def test_ids_are_unique_across_every_file():
    ids = _train_ids() + [r["id"] for e in EXPERTS for r in EVAL[e]] + [r["id"] for r in MIXED]
    assert [i for i, n in Counter(ids).items() if n > 1] == []


@pytest.mark.parametrize(("expert", "split"), sorted(MIN_COUNTS))
def test_counts_are_at_least_those_planned(expert, split):
    rows = TRAIN[expert] if split == "train" else EVAL[expert]
    assert len(rows) >= MIN_COUNTS[(expert, split)]


def test_the_mix_of_answers_within_each_expert():
    chat_train = Counter(_train_expect("chat", r["messages"][1])["kind"] for r in TRAIN["chat"])
    assert chat_train["no_handoff"] >= 60
    assert chat_train["handoff"] >= 70
    targets = Counter(_train_expect("chat", r["messages"][1]).get("expert")
                      for r in TRAIN["chat"])
    assert min(targets["coding"], targets["ui"], targets["agent"]) >= 20
    chat_eval = Counter((r["expect"]["kind"], r["expect"].get("expert")) for r in EVAL["chat"])
    assert chat_eval[("no_handoff", None)] >= 16
    assert all(chat_eval[("handoff", e)] >= 8 for e in ("coding", "ui", "agent"))
    none_fits = sum(1 for r in TRAIN["agent"] if not r["messages"][1].get("tool_calls"))
    assert 0.1 <= none_fits / len(TRAIN["agent"]) <= 0.2
    agent_eval = Counter(r["expect"]["kind"] for r in EVAL["agent"])
    assert agent_eval["tool_call"] >= 25
    assert agent_eval["none_fits"] >= 5
    assert all(r["expect"] == {"kind": "code", "language": "python"} for r in EVAL["coding"])


# -- the data teaches what the evaluation checks --------------------------------------

@pytest.mark.parametrize("expert", EXPERTS)
def test_every_training_answer_passes_the_judge(expert):
    for row in TRAIN[expert]:
        answer = row["messages"][1]
        expect = _train_expect(expert, answer)
        ok, reason = judge(expect, answer["content"], answer.get("tool_calls"),
                           row.get("tools", ()))
        assert ok, f"{row['id']}: {reason}"


def test_coding_answers_are_one_short_block_and_at_most_a_sentence():
    for row in TRAIN["coding"]:
        text = row["messages"][1]["content"]
        assert text.startswith("```"), row["id"]
        assert text.count("```") == 2, row["id"]
        code = code_block(text)
        assert code is not None, row["id"]
        assert len(code.splitlines()) <= 12, row["id"]
        tail = text.rsplit("```", 1)[1].strip()
        assert "\n" not in tail, row["id"]
        assert len(tail) <= 80, row["id"]


def test_ui_answers_are_small_self_contained_documents():
    for row in TRAIN["ui"]:
        text = row["messages"][1]["content"]
        assert text.startswith("<!DOCTYPE html>\n<html>"), row["id"]
        assert text.endswith("</html>"), row["id"]
        assert len(text.splitlines()) <= 25, row["id"]
        assert "http://" not in text, row["id"]
        assert "https://" not in text, row["id"]
        assert "<style>" in text, row["id"]


def test_agent_lines_offer_two_to_four_tools_including_the_expected_one():
    for row in TRAIN["agent"] + EVAL["agent"]:
        names = [t["function"]["name"] for t in row["tools"]]
        assert 2 <= len(names) <= 4, row["id"]
        assert len(set(names)) == len(names), row["id"]
        for tool in row["tools"]:
            params = tool["function"]["parameters"]
            assert params["type"] == "object"
            assert set(params["required"]) <= set(params["properties"]), row["id"]
        calls = (row["messages"][1].get("tool_calls") or [] if len(row["messages"]) > 1
                 else [])
        wanted = ([c["function"]["name"] for c in calls]
                  or ([row["expect"]["name"]] if row.get("expect", {}).get("name") else []))
        assert set(wanted) <= set(names), row["id"]


def test_chat_handoffs_carry_a_one_sentence_summary():
    for row in TRAIN["chat"]:
        for call in row["messages"][1].get("tool_calls") or []:
            args = call["function"]["arguments"]
            assert set(args) == {"expert", "summary"}, row["id"]
            assert args["summary"].strip(), row["id"]
            assert "\n" not in args["summary"], row["id"]


# -- evaluation stays apart ---------------------------------------------------------------

def _held_out_prompts() -> set[str]:
    out = set()
    for name in HELD_OUT:
        for line in (ROOT / "bench" / name).read_text(encoding="utf-8").splitlines():
            out.add(_norm(json.loads(line)["prompt"]))
    return out


def test_no_eval_prompt_is_a_training_prompt():
    train = {_norm(_prompt(r)) for e in EXPERTS for r in TRAIN[e]}
    for row in [r for e in EXPERTS for r in EVAL[e]] + MIXED:
        assert _norm(_prompt(row)) not in train, row["id"]


def test_the_mixed_set_is_apart_from_the_expert_eval_sets():
    evals = {_norm(_prompt(r)) for e in EXPERTS for r in EVAL[e]}
    assert not evals & {_norm(r["prompt"]) for r in MIXED}


def test_no_prompt_comes_from_the_routing_held_out_sets():
    held_out = _held_out_prompts()
    rows = [r for e in EXPERTS for r in TRAIN[e] + EVAL[e]] + MIXED
    assert [r["id"] for r in rows if _norm(_prompt(r)) in held_out] == []


def test_the_readme_states_license_and_the_eval_rule():
    text = (DATA / "README.md").read_text(encoding="utf-8")
    assert "Apache-2.0" in text
    assert "never" in text.lower()
    assert "eval" in text.lower()


# -- judge ----------------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}},
    "required": ["city"]}}}


def _call(name: str, arguments: object) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": name, "arguments": arguments}}]


def test_code_block_finds_the_first_block_in_the_language():
    text = "Here:\n```bash\nls\n```\n```py\nx = 1\n```\n"
    assert code_block(text) == "ls\n"
    assert code_block(text, "python") == "x = 1\n"
    assert code_block(text, "sql") is None
    assert code_block("```python\nx = 1\n") is None  # unclosed: truncated answer


@pytest.mark.parametrize(("content", "ok"), [
    ("```python\ndef f(x):\n    return x\n```\nDone.", True),
    ("```py\nprint(1)\n```", True),
    ("```python\ndef f(x)\n    return x\n```", False),     # missing colon
    ("```javascript\nconst x = 1;\n```", False),            # wrong language
    ("def f(x):\n    return x", False),                     # no fence
    ("```python\n\n```", False),                            # empty
])
def test_judge_code(content, ok):
    assert judge({"kind": "code", "language": "python"}, content, [])[0] is ok


def test_judge_code_other_languages_need_only_the_block():
    assert judge({"kind": "code", "language": "sql"}, "```sql\nSELECT 1;\n```", [])[0]
    assert not judge({"kind": "code", "language": "python"}, "```python\nx = 1\n```",
                     _call("run", {}))[0]


GOOD_HTML = ("<!DOCTYPE html>\n<html>\n<head><title>T</title><style>p { color: red; }</style>"
             "</head>\n<body><p>Hi<br>there</p><img src=\"a.png\"></body>\n</html>\n")


@pytest.mark.parametrize(("content", "ok"), [
    (GOOD_HTML, True),
    ("<html><body><p>x</p></body></html>", True),
    ("<html><body><p>x</body></html>", False),               # unclosed <p>
    ("<html><body><div><p>x</div></p></body></html>", False),  # crossed
    ("<!DOCTYPE html><html><body><p>x</p></body>", False),   # unclosed html
    ("Sure! " + GOOD_HTML, False),                           # text before
    (GOOD_HTML + "Enjoy!", False),                           # text after
    (GOOD_HTML + GOOD_HTML, False),                          # two documents
    ("<div>x</div>", False),                                 # no document
    ("<html><body><br></br></body></html>", False),          # void end tag
    ("<html><body><p>x</p></body></html><p", False),         # cut off mid-tag
])
def test_judge_html(content, ok):
    assert judge({"kind": "html"}, content, [])[0] is ok


def test_check_html_reports_why():
    ok, reason = check_html("<html><body><ul><li>a</ul></body></html>")
    assert not ok
    assert "li" in reason


@pytest.mark.parametrize(("calls", "ok"), [
    (_call("get_weather", {"city": "Paris"}), True),
    (_call("get_weather", '{"city": "Paris", "unit": "celsius"}'), True),
    (_call("get_weather", {"city": "Paris", "days": 3}), True),
    (_call("get_weather", {"unit": "celsius"}), False),                  # missing required
    (_call("get_weather", {"city": "Paris", "unit": "kelvin"}), False),  # enum
    (_call("get_weather", {"city": 42}), False),                         # type
    (_call("get_weather", {"city": "Paris", "days": True}), False),      # bool is no integer
    (_call("get_weather", {"city": "Paris", "mood": "sunny"}), False),   # invented key
    (_call("get_weather", "{not json"), False),
    (_call("send_email", {"to": "a@b.c"}), False),                       # wrong tool
    (_call("get_weather", {"city": "A"}) + _call("get_weather", {"city": "B"}), False),
    ([], False),
])
def test_judge_tool_call(calls, ok):
    expect = {"kind": "tool_call", "name": "get_weather"}
    assert judge(expect, "", calls, [WEATHER])[0] is ok


def test_judge_tool_call_needs_the_tool_offered():
    ok, reason = judge({"kind": "tool_call", "name": "get_weather"}, "",
                       _call("get_weather", {"city": "Paris"}), [])
    assert not ok
    assert "offered" in reason


@pytest.mark.parametrize(("calls", "ok"), [
    (_call("handoff", {"expert": "coding", "summary": "Write a sort function."}), True),
    (_call("handoff", '{"expert": "coding", "summary": "Write it."}'), True),
    (_call("handoff", {"expert": "ui", "summary": "Write a sort function."}), False),
    (_call("handoff", {"expert": "coding", "summary": "  "}), False),
    (_call("handoff", {"expert": "coding"}), False),
    (_call("transfer", {"expert": "coding", "summary": "x"}), False),
    ([], False),
])
def test_judge_handoff(calls, ok):
    assert judge({"kind": "handoff", "expert": "coding"}, "", calls)[0] is ok


def test_judge_handoff_checks_the_offered_schema():
    offered = [{"type": "function", "function": {"name": "handoff", "parameters": {
        "type": "object",
        "properties": {"expert": {"type": "string", "enum": ["ui", "agent"]},
                       "summary": {"type": "string"}},
        "required": ["expert", "summary"]}}}]
    calls = _call("handoff", {"expert": "coding", "summary": "x"})
    assert not judge({"kind": "handoff", "expert": "coding"}, "", calls, offered)[0]


@pytest.mark.parametrize("kind", ["no_handoff", "none_fits"])
def test_judge_plain_answers(kind):
    assert judge({"kind": kind}, "Paris is the capital of France.", [])[0]
    assert not judge({"kind": kind}, "   ", [])[0]
    assert not judge({"kind": kind}, None, None)[0]
    assert not judge({"kind": kind}, "Sure.", _call("handoff", {"expert": "ui",
                                                              "summary": "x"}))[0]


def test_judge_rejects_unknown_kinds():
    assert judge({"kind": "poem"}, "roses", []) == (False, "unknown expect kind 'poem'")

