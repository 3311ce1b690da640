"""bench/routing.py's goal lines: the loads goal is judged on stationary traffic only."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _fleet import RunResult  # noqa: E402
from _floor import Floor  # noqa: E402
from _prefix_bound import HitRate  # noqa: E402
from _routing_goals import BASELINE, OURS, PRECISE, goals  # noqa: E402


def _results(loads: int) -> dict[str, RunResult]:
    names = [OURS, f"{OURS} x4", PRECISE, BASELINE, "round-robin"]
    return {n: RunResult(n, 100, ttft=[0.1] * 100, adapter_loads=loads) for n in names}


def _loads_line(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("- adapter loads"))


def test_loads_far_above_the_floor_fail_on_stationary_traffic_only() -> None:
    floor = Floor(loads=2, requests=100, wait_s=0.0)
    hit = HitRate(0, 0)
    stationary = _loads_line(goals(_results(10), 4, floor, floor, hit))
    assert "5.00x: **not met**" in stationary
    trace = _loads_line(goals(_results(10), 4, floor, floor, hit, stationary=False))
    assert "5.00x: not judged" in trace
    assert "**not met**" not in trace
    close = _loads_line(goals(_results(2), 4, floor, floor, hit))
    assert "1.00x: met" in close


def test_the_routers_load_estimate_is_judged_against_the_engines_count() -> None:
    floor = Floor(loads=2, requests=100, wait_s=0.0)
    results = _results(20)
    results[OURS].estimated_loads = 21  # +5%
    results[f"{OURS} x4"].estimated_loads = 22  # +10%: still within
    line = goals(results, 4, floor, floor, HitRate(0, 0))[-1]
    assert line.endswith("one router +5% (21 / 20), 4 routers +10% (22 / 20): met"), line
    results[f"{OURS} x4"].estimated_loads = 23
    line = goals(results, 4, floor, floor, HitRate(0, 0))[-1]
    assert line.endswith("4 routers +15% (23 / 20): **not met**"), line
    results = _results(0)
    line = goals(results, 4, floor, floor, HitRate(0, 0))[-1]
    assert "one router 0 against none" in line
    assert line.endswith(": met")
