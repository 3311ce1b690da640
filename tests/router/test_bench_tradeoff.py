"""bench/routing_tradeoff.py: where ours' loads-latency curve meets the floor goal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _fleet import FleetShape, RunResult  # noqa: E402
from _prefix_bound import HitRate  # noqa: E402
from _routing_goals import Floors  # noqa: E402
from _routing_rows import goodput  # noqa: E402
from _workload import Arrival  # noqa: E402
from routing_tradeoff import hit_judge, judge, parse, sweeps  # noqa: E402

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


def _hits(label: str, hit: int, fast: int) -> RunResult:
    """100 requests of 100 prompt tokens each, ``hit`` of them per 100 found cached and
    ``fast`` with their first token within 1 s."""
    r = _run(label, 0, fast)
    r.prefix_queries, r.prefix_hits = 100, hit
    return r


def test_the_hit_rate_curve_is_judged_against_the_precise_scorer_and_the_best_peer() -> None:
    sticky, spread, start = _hits("sticky", 91, 40), _hits("spread", 80, 97), _hits("start", 85, 95)
    precise, rr = _hits("llmd-precise-prefix", 90, 45), _hits("round-robin", 80, 96)
    best, bound = HitRate(91, 100), HitRate(89, 100)
    lines = hit_judge([sticky, spread, start], start, [precise, rr], best, bound, SHAPE)
    assert "ideal (one unbounded cache) 91.0%; placement bound" in lines[0]
    assert "89.0%" in lines[0]
    assert "(90.0% at 45.0% goodput, TTFT <= 1 s): met at 1 of 3 points" in lines[1]
    assert "sticky, 91.0% at 40.0%" in lines[1]
    # only spread keeps round-robin's 96%: its hit rate is the highest that does
    assert "(round-robin, 96.0%): 80.0% (spread, 97.0%)" in lines[2]
    assert lines[3].endswith("sticky: 91.0%, 40.0%; start: 85.0%, 95.0%; spread: 80.0%, 97.0%")
    lines = hit_judge([spread, start], start, [precise, _hits("round-robin", 80, 99)], best,
                      bound, SHAPE)  # fmt: skip
    assert "**nowhere**: ours' highest, 85.0% (start), at 95.0% goodput" in lines[1]
    assert "no point of ours reaches it" in lines[2]


def test_queue_tokens_is_swept_when_given_and_the_section_is_checked() -> None:
    own, routing = parse(["--slacks", "", "--load-factors", "", "--hot-shares", "",
                          "--queue-tokens", "500,2000", "--section", "routing-tradeoff-chat"])
    assert own.section == "routing-tradeoff-chat"
    assert sweeps(own, routing.ours_knobs) == {
        "queue_tokens": [(500.0, {"queue_tokens": 500.0}), (2000.0, {})],
    }
    for bad in ("Routing", "routing-", "routing\n", "../x"):
        with pytest.raises(SystemExit):
            parse(["--section", bad])
    with pytest.raises(SystemExit):  # queue_tokens' own range check
        parse(["--queue-tokens", "-1"])


def test_both_figures_are_drawn(tmp_path: Path) -> None:
    from _plot import hit_figure, tradeoff_figure

    lines = {"queue_tokens": [("500", _hits("a", 88, 93)), ("2000", _hits("b", 85, 97))]}
    peers = [_hits("round-robin", 80, 98)]
    hit_figure(lines, peers, [("ideal", 0.9, "-")], lambda r: goodput(r, 1.0),
               tmp_path / "hits.png", "t")  # fmt: skip
    tradeoff_figure(lines, peers, [("floor", 10.0, "-")], lambda r: goodput(r, 1.0),
                    lambda r: 100.0, tmp_path / "loads.png", "t")  # fmt: skip
    for name in ("hits.png", "loads.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
