"""bench/_workload.py: the synthetic Zipf workload and trace parsing (loaded by path)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

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
