"""bench/routing_seeds.py: seeds parsed, paired intervals right, goals judged as said."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _routing_goals import OURS, OURS_KV  # noqa: E402
from _workload import load_trace  # noqa: E402
from routing_seeds import (  # noqa: E402
    PEERS,
    Outcome,
    by_label,
    main,
    paired,
    parse_args,
    seed_list,
    shape_report,
    t95,
    write_trace,
)
from traces import SHAPES  # noqa: E402


def test_seeds_are_ranges_and_lists_each_once() -> None:
    assert seed_list("6-9") == [6, 7, 8, 9]
    assert seed_list("1,3, 5") == [1, 3, 5]
    assert seed_list("1-3,2,9") == [1, 2, 3, 9]
    for bad in ("", "3-1", "a", "1-", "-2", "1;2", "1234567"):
        with pytest.raises(argparse.ArgumentTypeError):
            seed_list(bad)
    with pytest.raises(SystemExit):
        parse_args(["--seeds", "4"])  # one seed has no spread
    with pytest.raises(SystemExit):
        parse_args(["--shapes", "chat,nope"])


def test_the_paired_interval_is_students_t_over_the_differences() -> None:
    ours, theirs = [0.9, 0.8, 0.95, 0.85], [0.88, 0.81, 0.9, 0.8]
    diffs = [a - b for a, b in zip(ours, theirs, strict=True)]
    d = paired(ours, theirs)
    assert d.mean == pytest.approx(statistics.fmean(diffs))
    assert d.half_width == pytest.approx(3.182 * statistics.stdev(diffs) / 2)
    assert (d.wins, d.ties, d.losses) == (3, 0, 1)
    assert paired([0.5, 0.5], [0.5, 0.5]).ties == 2
    # Between table rows the interval takes the smaller df's (wider) value.
    assert t95(35) == t95(30) > t95(40) > t95(1000) == 1.96
    assert math.isinf(t95(0))
    with pytest.raises(ValueError, match="two seeds"):
        paired([1.0], [0.0])


def _outcomes(shape: str, ours_g1: list[float], rr_g1: list[float],
              many_loads: list[float]) -> list[Outcome]:  # fmt: skip
    """Ours, ours x4 and every peer on len(ours_g1) seeds: the peers other than
    round-robin far behind; ours x4 with ``many_loads`` loads against ours' 100."""
    out = []
    for seed, (g, rr, many) in enumerate(zip(ours_g1, rr_g1, many_loads, strict=True), 1):
        out.append(Outcome(shape, seed, OURS, 100, (g, 1.0), 0.8, 100.0))
        out.append(Outcome(shape, seed, f"{OURS} x4", 100, (g, 1.0), 0.79, many))
        for peer in PEERS:
            good = rr if peer == "round-robin" else 0.1
            out.append(Outcome(shape, seed, peer, 100, (good, 1.0), 0.7, 200.0))
    return out


def test_goodput_is_judged_against_the_closest_peer_with_its_noise() -> None:
    ahead = _outcomes("chat", [0.95, 0.96, 0.97], [0.90, 0.92, 0.91], [100, 110, 114])
    lines = shape_report("chat", by_label(ahead, "chat"), [1, 2, 3], 4)
    verdict = next(x for x in lines if "TTFT <= 1 s: the closest" in x)
    assert "round-robin, +5.00 points" in verdict
    assert "ahead on 3 of 3 seeds and behind on 0: met, and above it beyond" in verdict
    assert any("both on 3 of 3 seeds: met" in x for x in lines)
    tied = _outcomes("chat", [0.95, 0.90, 0.97], [0.94, 0.92, 0.95], [100, 120, 100])
    lines = shape_report("chat", by_label(tied, "chat"), [1, 2, 3], 4)
    verdict = next(x for x in lines if "TTFT <= 1 s: the closest" in x)
    assert "ahead on 2 of 3 seeds and behind on 1: met on average, within" in verdict
    assert any("both on 2 of 3 seeds: **not met**" in x for x in lines)
    behind = _outcomes("chat", [0.90, 0.90, 0.90], [0.91, 0.92, 0.90], [100, 100, 100])
    lines = shape_report("chat", by_label(behind, "chat"), [1, 2, 3], 4)
    assert any("TTFT <= 1 s" in x and x.endswith("**not met**") for x in lines)
    # The TTFT <= 2 s column is a tie everywhere: met on average, no seed won or lost.
    assert any("TTFT <= 2 s" in x and "+0.00 points" in x and "behind on 0" in x
               for x in lines)  # fmt: skip


def test_a_seed_written_replays_as_the_trace_tool_writes_it(tmp_path: Path) -> None:
    path = write_trace("chat", 7, 5.0, tmp_path)
    lines = path.read_text().splitlines()
    arrivals = SHAPES["chat"](duration=5.0, seed=7)
    assert len(lines) == len(arrivals) > 0
    replayed = load_trace(path)
    assert [a.prompt_tokens for a in replayed] == [a.prompt_tokens for a in arrivals]
    assert json.loads(lines[0])["segments"]


def test_a_short_run_reports_every_policy_on_every_seed(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:  # fmt: skip
    assert main(["--shapes", "chat", "--seeds", "1-2", "--duration", "4", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "[14/14]" in out  # 2 seeds x (ours, ours x4 and 5 peers)
    assert "### `chat`, 2 seeds" in out
    for label in (OURS, f"{OURS} x4", *PEERS):
        assert f"| {label} | " in out
    assert "- highest goodput at TTFT <= 1 s: the closest peer" in out


def test_kv_events_runs_are_judged_against_their_own_lone_router() -> None:
    outcomes = _outcomes("tenants", [0.95, 0.96, 0.97], [0.2, 0.2, 0.2], [130, 125, 120])
    for seed, many in enumerate((110, 114, 120), 1):  # x4 against one router's 100
        outcomes.append(Outcome("tenants", seed, OURS_KV, 100, (0.97, 1.0), 0.8, 100.0))
        outcomes.append(Outcome("tenants", seed, f"{OURS_KV} x4", 100, (0.96, 1.0), 0.78,
                                float(many)))  # fmt: skip
    lines = shape_report("tenants", by_label(outcomes, "tenants"), [1, 2, 3], 4)
    assert f"| {OURS_KV} x4 | 96.0% | 100.0% | 78.0% | 115 |" in lines
    plain, kv = (x for x in lines if "independent routers" in x)
    assert "loads median 1.25x" in plain
    assert plain.endswith("both on 0 of 3 seeds: **not met**")
    assert f"routers ({OURS_KV}) <=" in kv
    assert "loads median 1.14x (1.10-1.20x), hit rate median 0.97x" in kv
    assert kv.endswith("both on 2 of 3 seeds: **not met**")


def test_a_short_run_with_kv_events_adds_both_of_its_runs(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:  # fmt: skip
    assert main(["--shapes", "agents", "--seeds", "1-2", "--duration", "4", "--jobs", "1",
                 "--ours-kv-events"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "[18/18]" in out  # 2 seeds x (ours and the KV variant, one and x4, 5 peers)
    for label in (OURS_KV, f"{OURS_KV} x4"):
        assert f"| {label} | " in out
    assert f"- 4 independent routers ({OURS_KV}) <= 1.15x the loads" in out
