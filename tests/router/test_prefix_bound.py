"""bench/_prefix_bound.py: the prefix hit rate a trace allows, on hand-made traces.

The ideal (one unbounded cache) and the placement bound (whole sessions on the fleet's
replicas, each an LRU cache of its KV blocks) are counted as the simulator counts
``vllm:prefix_cache_hits``: checked against the simulated engine itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _fleet import FleetShape, run_policy  # noqa: E402
from _prefix_bound import group, ideal, place, placement_bound  # noqa: E402
from _workload import Arrival  # noqa: E402

BLOCK = 16


def chat(session: str, adapter: str | None, start: float, turns: int, system: str,
         system_tokens: int = 64, gap: float = 1.0) -> list[Arrival]:  # fmt: skip
    """A session's turns: turn k repeats turn k-1's prompt and reply, then a message."""
    out, segments = [], [(system, system_tokens)]
    for k in range(turns):
        if k:
            segments.append((f"{session}-r{k - 1}", 30))
        segments.append((f"{session}-m{k}", 20))
        frozen = tuple(segments)
        out.append(Arrival(start + k * gap, adapter, "u", sum(n for _, n in frozen), 4,
                           frozen, session))  # fmt: skip
    return out


def test_a_trace_that_fits_reaches_the_ideal_exactly() -> None:
    # Sessions with prompts of their own: nothing is shared across sessions, so where
    # they go does not matter while they fit.
    trace = [a for s in range(3) for a in chat(f"s{s}", "ns/a@v1", s * 0.1, 3, f"sys-{s}")]
    best = ideal(trace, BLOCK)
    # per session: turn 1 finds turn 0's 5 full blocks, turn 2 turn 1's 8 (84, 134, 184 tokens)
    assert (best.hits, best.queries) == (3 * (80 + 128), 3 * (84 + 134 + 184))
    for replicas in (1, 2, 3):
        assert placement_bound(trace, replicas, 4096, BLOCK) == best


def test_sessions_that_overflow_a_replica_lose_hits_the_ideal_keeps() -> None:
    # Two sessions interleaved on one replica of 14 blocks (13 usable; each session's
    # longest prompt takes 12): each turn's blocks evict some of the other session's,
    # which the unbounded cache keeps.
    trace = sorted(chat("a", "ns/a@v1", 0.0, 3, "sys-a") + chat("b", "ns/a@v1", 0.5, 3, "sys-b"),
                   key=lambda x: x.t)  # fmt: skip
    best = ideal(trace, BLOCK)
    tight = placement_bound(trace, 1, 14, BLOCK)
    assert tight.queries == best.queries
    assert tight.hits < best.hits
    # Two replicas: each session has its own cache again, and fits.
    assert placement_bound(trace, 2, 14, BLOCK) == best
    # A session whose context alone outgrows its cache keeps less than the ideal too.
    long = chat("c", "ns/a@v1", 0.0, 6, "sys-c")
    assert placement_bound(long, 4, 14, BLOCK).hits < ideal(long, BLOCK).hits


def test_sessions_are_never_split_and_balanced_by_prompt_tokens() -> None:
    big = chat("big", "ns/a@v1", 0.0, 8, "sys-big", system_tokens=2000)
    small = [a for s in range(3) for a in chat(f"s{s}", "ns/a@v1", s + 0.5, 2, f"sys-{s}")]
    lone = [Arrival(9.0, "ns/b@v1", "u", 500, 4), Arrival(9.5, "ns/b@v1", "v", 700, 4)]
    trace = sorted(big + small + lone, key=lambda x: x.t)
    where = place(trace, 2)
    assert set(where) == {"session:big", "session:s0", "session:s1", "session:s2",
                          "adapter:ns/b@v1"}  # fmt: skip
    assert where["session:big"] == 0  # the largest first, and alone: it outweighs the rest
    assert {where[k] for k in where if k != "session:big"} == {1}
    three = place(trace, 3)
    assert three["session:big"] == 0
    assert three["adapter:ns/b@v1"] == 1  # the next largest: 1,200 tokens
    assert len({three[group(a)] for a in big}) == 1


def test_kv_is_never_shared_across_adapters() -> None:
    same_text = chat("x", "ns/a@v1", 0.0, 1, "sys") + chat("y", "ns/b@v1", 1.0, 1, "sys")
    assert ideal(same_text, BLOCK).hits == 0
    assert placement_bound(same_text, 1, 4096, BLOCK).hits == 0
    one_adapter = chat("x", "ns/a@v1", 0.0, 1, "sys") + chat("y", "ns/a@v1", 1.0, 1, "sys")
    assert ideal(one_adapter, BLOCK).hits == 64  # the system prompt's 4 blocks


def test_the_simulated_engine_counts_hits_as_the_bound_does() -> None:
    """One replica, requests one at a time: the simulator's prefix counters are the
    bound's; on a tight cache its decode blocks evict more, so it finds no more."""
    trace = sorted(chat("a", "ns/a@v1", 0.0, 4, "sys-a", gap=2.0)
                   + chat("b", "ns/a@v1", 1.0, 4, "sys-b", gap=2.0), key=lambda x: x.t)  # fmt: skip
    shape = FleetShape(replicas=1, max_loras=2, max_num_seqs=4, ttft_s=0.01, itl_s=0.01,
                       lora_load_s=0.0, scrape_interval=0.5, lora_disk_load_s=0.0,
                       prefill_s_per_token=0.0, kv_cache_blocks=4096)  # fmt: skip
    roomy = run_policy("rr", "round-robin", 1, trace, shape)
    bound = placement_bound(trace, 1, 4096, BLOCK)
    assert (roomy.prefix_hits, roomy.prefix_queries) == (bound.hits, bound.queries)
    assert bound == ideal(trace, BLOCK)
    tight = FleetShape(**{**shape.__dict__, "kv_cache_blocks": 20})
    sim = run_policy("rr", "round-robin", 1, trace, tight)
    small = placement_bound(trace, 1, 20, BLOCK)
    assert sim.prefix_queries == small.queries
    assert sim.prefix_hits <= small.hits < bound.hits


def test_the_routing_bench_sets_hit_rates_against_the_bound_at_both_capacities(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import routing
    from _workload import to_line

    trace = sorted((a for s in range(6) for a in chat(f"s{s}", "ns/a@v1", s * 0.3, 3, "sys")),
                   key=lambda x: x.t)  # fmt: skip
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(to_line(a)) + "\n" for a in trace))
    argv = ["--trace", str(path), "--no-http", "--replicas", "2", "--kv-cache-blocks", "40"]
    assert routing.main(argv) == 0
    out = capsys.readouterr().out
    best, full = ideal(trace, BLOCK), placement_bound(trace, 2, 40, BLOCK)
    half = placement_bound(trace, 2, 20, BLOCK)
    assert half.rate < full.rate <= best.rate  # 20 blocks: the sessions overflow
    assert f"**ideal** (one unbounded cache) {best.rate:.1%}" in out
    assert f"of 40 blocks) {full.rate:.1%}; at half the KV (20 blocks) {half.rate:.1%}" in out
    assert "- prefix hit rate >= 90% of the placement bound: " in out
    assert "At half the KV (20 blocks per replica):" in out
    assert out.count("| mol-affinity x4 |") == 2  # both tables, every policy
    assert "- at half the KV, prefix hit rate >= 90% of the placement bound: " in out
    assert routing.main([*argv, "--no-half-kv"]) == 0
    assert "At half the KV" not in capsys.readouterr().out
