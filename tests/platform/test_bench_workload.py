"""bench/_workload.py: the synthetic Zipf workload and trace parsing (loaded by path)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_workload", ROOT / "bench/_workload.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_workload"] = mod
    spec.loader.exec_module(mod)
    return mod


W = _load()


def test_synthetic_rate_and_popularity() -> None:
    arrivals = W.synthetic(adapters=50, zipf=1.1, rate=200.0, duration=20.0, seed=3,
                           prompt_tokens=10, max_tokens=4)  # fmt: skip
    assert 3600 < len(arrivals) < 4400
    assert all(a.t < b.t for a, b in itertools.pairwise(arrivals))
    counts = Counter(a.adapter for a in arrivals)
    weights = W.zipf_weights(50, 1.1)
    top = counts["bench/a0001@v1"] / len(arrivals)
    assert top == pytest.approx(weights[0], abs=0.03)
    assert counts["bench/a0001@v1"] > counts["bench/a0010@v1"] > 0
    assert arrivals == W.synthetic(adapters=50, zipf=1.1, rate=200.0, duration=20.0, seed=3,
                                   prompt_tokens=10, max_tokens=4)  # fmt: skip


def test_trace_is_sorted_and_sped_up(tmp_path: Path) -> None:
    rows = [
        {"t": 4.0, "adapter": "ns/b@v1", "user": "u", "prompt_tokens": 5, "max_tokens": 3},
        {"t": 2.0, "adapter": None, "user": "v", "prompt_tokens": 0, "max_tokens": 1},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    out = W.load_trace(path, speed=2.0)
    assert [(a.t, a.adapter) for a in out] == [(1.0, None), (2.0, "ns/b@v1")]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1]", "expected an object"),
        ("{", "not JSON"),
        ('{"t": -1, "adapter": "a", "prompt_tokens": 1, "max_tokens": 1}', "'t'"),
        ('{"t": 1, "adapter": 3, "prompt_tokens": 1, "max_tokens": 1}', "'adapter'"),
        ('{"t": 1, "adapter": "a", "prompt_tokens": "x", "max_tokens": 1}', "prompt_tokens"),
        ('{"t": 1, "adapter": "a", "prompt_tokens": 1, "max_tokens": 0}', "max_tokens >= 1"),
    ],
)
def test_trace_errors_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"t": 0, "adapter": "a", "prompt_tokens": 1, "max_tokens": 1}\n' + line)
    with pytest.raises(ValueError, match="line 2") as info:
        W.load_trace(path)
    assert message in str(info.value)
    with pytest.raises(ValueError, match="speed"):
        W.load_trace(path, speed=0)


def _load_traces() -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_traces", ROOT / "bench/traces.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_trace_segments_round_trip(tmp_path: Path) -> None:
    row = {"t": 1.0, "adapter": "ns/a@v1", "user": "u", "session": "s1",
           "segments": [["sys-a", 100], ["s1-m0", 7]], "prompt_tokens": 107,
           "max_tokens": 9}  # fmt: skip
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (a,) = W.load_trace(path)
    assert a.segments == (("sys-a", 100), ("s1-m0", 7))
    assert a.session == "s1"
    assert W.to_line(a) == row


@pytest.mark.parametrize(
    ("segments", "prompt", "message"),
    [
        ([], 0, "non-empty list"),
        ([["a", 3]], 4, "must equal the segments' sum (3)"),
        ([["a", 0]], 0, "tokens must be an integer 1..10^7"),
        ([["a b", 3]], 3, "segments[0] must be [id, tokens]"),
        ([["a", 3, 1]], 3, "segments[0] must be [id, tokens]"),
        ([["a", True]], 1, "tokens must be an integer"),
        ("a", 1, "non-empty list"),
    ],
)
def test_trace_segments_are_validated(
    tmp_path: Path, segments: object, prompt: int, message: str
) -> None:
    row = {"t": 0, "adapter": None, "segments": segments, "prompt_tokens": prompt,
           "max_tokens": 1}  # fmt: skip
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="line 1") as info:
        W.load_trace(path)
    assert message in str(info.value)


def test_chat_turns_carry_the_previous_turn_and_its_reply() -> None:
    T = _load_traces()
    arrivals = T.multi_turn_chat(duration=30.0, seed=2)
    assert arrivals == T.multi_turn_chat(duration=30.0, seed=2)
    assert len({a.adapter for a in arrivals}) <= 4
    by_session: dict[str, list[Any]] = {}
    for a in arrivals:
        assert a.prompt_tokens == sum(n for _, n in a.segments)
        assert a.segments[0] == (f"sys-{a.adapter}", 2000)
        by_session.setdefault(a.session, []).append(a)
    multi = [turns for turns in by_session.values() if len(turns) > 1]
    assert multi
    for turns in multi:
        for prev, nxt in itertools.pairwise(turns):
            k = len(prev.segments)
            assert nxt.segments[:k] == prev.segments
            assert nxt.segments[k][0].endswith(f"-r{(k - 1) // 2}")  # the reply, then a message
            assert len(nxt.segments) == k + 2


def test_agent_contexts_grow_to_tens_of_thousands_and_tenants_have_own_prompts() -> None:
    T = _load_traces()
    runs = T.agents(duration=60.0, seed=1)
    assert 20_000 < max(a.prompt_tokens for a in runs) <= 60_000
    many = T.tenants(duration=20.0, seed=1)
    systems = {a.adapter: a.segments[0] for a in many}
    assert len(systems) > 100
    assert all(sid == f"sys-{adapter}" for adapter, (sid, _) in systems.items())
    assert all(a.segments[0] == systems[a.adapter] for a in many)
