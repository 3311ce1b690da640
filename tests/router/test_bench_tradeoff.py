"""bench/routing_tradeoff.py: where ours' loads-latency curve meets the floor goal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _fleet import FleetShape, RunResult  # noqa: E402
from _workload import Arrival  # noqa: E402
from routing import Floors  # noqa: E402
from routing_tradeoff import judge, parse, sweeps  # noqa: E402

SHAPE = FleetShape(replicas=2, max_loras=1, max_num_seqs=4, ttft_s=0.05, itl_s=0.01,
                   lora_load_s=0.01, scrape_interval=0.1)  # fmt: skip
# Two adapters taking turns on two one-slot replicas: the floor is one load each.
ARRIVALS = [Arrival(i * 0.5, f"ns/a{i % 2}@v1", "u", 16, 4) for i in range(100)]


def _run(label: str, loads: int, fast: int) -> RunResult:
    """100 requests, ``fast`` of them with their first token within 1 s."""
    return RunResult(label, 100, ttft=[0.1] * fast + [5.0] * (100 - fast), adapter_loads=loads)


def test_the_curve_meets_the_goal_where_loads_are_close_enough_to_the_floor() -> None:
    model = Floors(SHAPE, ARRIVALS)
    floor = model.online(0.0).per_1000
    assert floor == 20.0  # 2 loads in 100 requests
    spread, packed, start = _run("spread", 10, 99), _run("packed", 2, 40), _run("start", 5, 90)
    peers = [_run("peer", 50, 10)]
    lines = judge([spread, packed, start], start, peers, model, SHAPE, 1.10)
    assert "met at 1 of 3 points" in lines[1]
    assert "packed, 20 per 1,000 at 40.0% goodput" in lines[1]
    assert "keep goodput at TTFT <= 1 s at 90% or more: 50 per 1,000 (start, 2.50x" in lines[2]
    frontier = lines[-1]
    assert "packed: 20, 40.0%" in frontier
    assert "start: 50, 90.0%" in frontier
    assert "spread: 100, 99.0%" in frontier
    lines = judge([spread, start], start, peers, model, SHAPE, 1.10)
    assert "**nowhere**: the fewest loads, 50 per 1,000 (start), are 2.50x it" in lines[1]


def test_each_knob_moves_alone_from_the_starting_point() -> None:
    own, routing = parse(["--slacks", "0,1,4", "--load-factors", "2", "--hot-shares", "",
                          "--ours-knobs", '{"queue_tokens": 900}', "--duration", "5"])  # fmt: skip
    assert routing.duration == 5
    assert routing.http is False
    assert sweeps(own, routing.ours_knobs) == {
        "slack": [(0.0, {"queue_tokens": 900, "slack": 0.0}),
                  (1.0, {"queue_tokens": 900}),  # its own value: the starting point
                  (4.0, {"queue_tokens": 900, "slack": 4.0})],
        "load_factor": [(2.0, {"queue_tokens": 900, "load_factor": 2.0})],
    }
    with pytest.raises(SystemExit):  # the policy's own range check, before any run
        parse(["--load-factors", "0.5"])
