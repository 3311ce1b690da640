"""The router's prefix index (policy/prefix.py) and how mol-affinity and the tracker use it."""

from __future__ import annotations

import bisect
import json
import random
import subprocess
import sys

import aiohttp
import pytest
import xxhash

from mol_router.replicas.engine_metrics import EngineMetrics
from mol_router.replicas.policy import make_policy
from mol_router.replicas.policy.interface import Demand, EngineStats, FleetStats, RouteRequest
from mol_router.replicas.policy.prefix import PrefixIndex, prefix_ends, prefix_keys
from mol_router.replicas.tracker import EngineTracker

SYSTEM = b"You are a careful coding assistant. " * 40  # ~1.4 KB, shared by every turn
A, B = "ns/coder@v3", "ns/coder@v4"


def test_keys_chain_over_the_prefix_and_never_cross_adapters() -> None:
    turn1 = prefix_keys(SYSTEM + b"user: write a parser", A)
    turn2 = prefix_keys(SYSTEM + b"user: write a parser" + b" reply " * 200, A)
    assert len(turn1) == len(SYSTEM + b"user: write a parser") // 256
    assert turn2[: len(turn1)] == turn1  # the same prefix, the same leading keys
    assert not set(prefix_keys(SYSTEM, B)) & set(turn1)  # another version: no match
    assert prefix_keys(b"short", A) == ()  # under one block: nothing cached
    other = prefix_keys(b"X" + SYSTEM[1:], A)
    assert not set(other) & set(turn1)  # a change in block 1 changes every key after it


def test_long_prompts_cost_few_keys() -> None:
    """Prefix lengths double after the first blocks: a 100 KB context has ~25 keys."""
    keys = prefix_keys(b"a" * 100_000, A)
    assert 16 < len(keys) <= 16 + 10
    assert len(set(keys)) == len(keys)


def _by_definition(data: bytes, seed: str) -> tuple[int, ...]:
    """Each key XXH3-64 of its block, seeded with the key before (the first with the
    hash of seed and NUL)."""
    ends = [*range(256, 16 * 256 + 1, 256)]
    step = 512
    while ends[-1] + step <= len(data):
        ends.append(ends[-1] + step)
        step *= 2
    key, keys, start = xxhash.xxh3_64_intdigest(seed.encode() + b"\0"), [], 0
    for end in (e for e in ends if e <= len(data)):
        key = xxhash.xxh3_64_intdigest(data[start:end], seed=key)
        keys.append(key)
        start = end
    return tuple(keys)


def test_keys_are_xxh3_chained_over_each_prefix() -> None:
    rng = random.Random(3)
    for size in (0, 255, 256, 4095, 4096, 4607, 4608, 5631, 5632, 100_000):
        data = rng.randbytes(size)
        assert prefix_keys(data, A) == _by_definition(data, A), size
    assert prefix_ends(256, 16)[15:19] == (4096, 4608, 5632, 7680)


def test_a_key_stands_for_its_whole_prefix() -> None:
    """Change one byte anywhere: the keys of the prefixes that hold it all change, the
    ones before stay; prompts that agree up to an end agree on every key to it."""
    rng = random.Random(5)
    data = rng.randbytes(40_000)
    keys = prefix_keys(data, A)
    ends = prefix_ends(256, 16)
    for _ in range(200):
        at = rng.randrange(len(data))
        changed = prefix_keys(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :], A)
        first = bisect.bisect_right(ends, at)  # the first prefix that holds byte `at`
        assert changed[:first] == keys[:first]
        assert all(c != k for c, k in zip(changed[first:], keys[first:], strict=True))
        grown = prefix_keys(data[:at] + rng.randbytes(rng.randrange(9000)), A)
        assert grown[:first] == keys[:first]


def test_keys_are_the_same_in_every_process() -> None:
    """Router replicas must agree: no per-process hash seed is involved."""
    code = ("import json, sys; from mol_router.replicas.policy.prefix import prefix_keys; "
            "print(json.dumps(prefix_keys(sys.stdin.buffer.read(), 'ns/coder@v3')))")
    out = subprocess.run([sys.executable, "-c", code], input=SYSTEM, capture_output=True,
                         check=True, env={"PYTHONHASHSEED": "123", **_env()})
    assert tuple(json.loads(out.stdout)) == prefix_keys(SYSTEM, A)


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}


def test_index_matches_the_longest_prefix_per_endpoint_and_forgets() -> None:
    index = PrefixIndex(capacity=1000)
    short = prefix_keys(SYSTEM, A)
    long = prefix_keys(SYSTEM + b"more context " * 100, A)
    index.record(short, "e1")
    index.record(long, "e2")
    assert index.matches(long, ["e1", "e2", "e3"]) == {"e1": len(short), "e2": len(long),
                                                       "e3": 0}  # fmt: skip
    index.forget("e2")  # restarted: its cache is empty
    assert index.matches(long, ["e1", "e2"]) == {"e1": len(short), "e2": 0}
    index.record(short, "e2")  # afresh, under a new bit
    assert index.matches(long, ["e2"]) == {"e2": len(short)}


def test_index_stays_bounded_and_keeps_shared_prefixes_longest() -> None:
    index = PrefixIndex(capacity=50)
    keys = [prefix_keys(SYSTEM + f"session {i} ".encode() * 60, A) for i in range(20)]
    for k in keys:
        index.record(k, "e1")
    assert len(index) == 50
    # the shared system-prompt blocks were touched by every request: still there
    assert index.matches(keys[0], ["e1"])["e1"] >= len(prefix_keys(SYSTEM, A)) - 1
    with pytest.raises(ValueError, match="capacity"):
        PrefixIndex(0)


def conversation_keys(
    system: bytes, adapter: str, name: bytes, n: int, *, message: bytes, repeat: int,
    reply: int,
) -> list[tuple[int, ...]]:  # fmt: skip
    """Prefix keys of a conversation's first ``n`` prompts: each turn repeats the one
    before, its reply and a new message (``message`` and the turn number, ``repeat``
    times; the reply pads with ``reply`` spaces)."""
    text, out = system, []
    for k in range(n):
        text += b" user: " + name + message % k * repeat
        out.append(prefix_keys(text, adapter))
        text += b" assistant: an answer for " + name + b" " * reply
    return out


def _turns(name: bytes, n: int) -> list[tuple[int, ...]]:
    return conversation_keys(SYSTEM, A, name, n, message=b" asks question %d ", repeat=12,
                             reply=30)  # fmt: skip


def test_the_session_key_is_the_key_past_the_shared_prompt_for_every_turn() -> None:
    shared = len(prefix_keys(SYSTEM, A))
    a, b = _turns(b"alice", 5), _turns(b"bob", 2)
    index = PrefixIndex()
    index.record(a[0], "e1")
    assert index.session(a[2]) is None  # one conversation seen: nothing branches yet
    index.record(b[0], "e2")
    key = index.session(a[2])
    assert key == a[0][shared]  # the first key past the system prompt's full blocks
    assert index.session(a[0]) == index.session(a[4]) == key != index.session(b[1])
    for turn in a[1:]:  # the conversation's own turns grow it and never branch it
        index.record(turn, "e1")
    assert index.session(a[4]) == key
    # another router that saw other turns of both derives the same key
    other = PrefixIndex()
    other.record(b[1], "x")
    other.record(a[3], "y")
    assert other.session(a[4]) == key
    assert index.session(prefix_keys(SYSTEM, A)) is None  # nothing past the branch
    assert index.matches(a[4], ["e1", "e2"]) == {"e1": len(a[4]), "e2": shared}


def _fleet(
    index: PrefixIndex, loads: dict[str, int], adapter: str, inflight: int = 0
) -> FleetStats:
    stats = {e: EngineStats(running=n, max_lora=4, running_adapters=frozenset({adapter}),
                            inflight=min(n, inflight))
             for e, n in loads.items()}  # fmt: skip
    return FleetStats.of(stats, Demand(), index)


def test_mol_affinity_sends_a_session_where_its_prefix_is() -> None:
    policy = make_policy("mol-affinity")
    index = PrefixIndex()
    history = prefix_keys(SYSTEM + b"turn 1 ... turn 2 ...", A)
    index.record(history, "e3")
    loads = {"e1": 0, "e2": 1, "e3": 2}  # e3 a little busier, well under the bound
    request = RouteRequest(A, prompt_tokens=900, prefix=history)
    assert policy.pick(list(loads), _fleet(index, loads, A), request) == "e3"
    # without the index (or another adapter's request) it is the least loaded
    assert policy.pick(list(loads), _fleet(PrefixIndex(), loads, A), request) == "e1"
    other = RouteRequest(B, prompt_tokens=900, prefix=prefix_keys(SYSTEM + b"turn 1", B))
    assert policy.pick(list(loads), _fleet(index, loads, B), other) == "e1"
    # with this router's own requests queued there the prefix does not hold it there
    busy = {"e1": 0, "e2": 0, "e3": 40}
    assert policy.pick(list(busy), _fleet(index, busy, A, inflight=40), request) != "e3"
    # base-model requests follow their prefix too
    base = prefix_keys(SYSTEM, "base")
    index.record(base, "e2")
    assert policy.pick(list(loads), _fleet(index, loads, A),
                       RouteRequest(None, prompt_tokens=900, prefix=base)) == "e2"  # fmt: skip


async def test_tracker_records_sends_and_forgets_restarted_engines() -> None:
    session: aiohttp.ClientSession = None  # type: ignore[assignment]
    t = EngineTracker(session, scrape_interval=60, eject_after_failures=1)
    t.set_endpoints(["http://e1", "http://e2"])
    for e in ("http://e1", "http://e2"):  # both pass their checks: one may be ejected
        t.record_health(e, True)
    keys = prefix_keys(SYSTEM, A)
    t.observe("http://e1", EngineMetrics(max_lora=2, prefix_queries=500.0))
    t.begin("http://e1", A, keys)
    t.end("http://e1", A)
    snap = t.snapshot()
    assert snap.prefix is t.prefix
    assert t.prefix.matches(keys, ["http://e1"]) == {"http://e1": len(keys)}
    t.observe("http://e1", EngineMetrics(max_lora=2, prefix_queries=800.0))  # grew: same
    assert t.prefix.matches(keys, ["http://e1"])["http://e1"] == len(keys)
    t.observe("http://e1", EngineMetrics(max_lora=2, prefix_queries=10.0))  # reset
    assert t.prefix.matches(keys, ["http://e1"])["http://e1"] == 0
    t.begin("http://e2", A, keys)
    t.record_failure("http://e2")  # ejected: maybe restarting
    assert t.prefix.matches(keys, ["http://e2"])["http://e2"] == 0
    t.begin("http://e1", A, keys)
    t.set_endpoints(["http://e2"])  # e1 left the fleet
    assert t.prefix.matches(keys, ["http://e1"])["http://e1"] == 0


def test_prefix_queries_counter_is_read_from_the_exposition() -> None:
    from mol_router.replicas.engine_metrics import parse_engine_metrics

    text = ('# TYPE vllm:prefix_cache_queries counter\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200.0\n'
            'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 34.0\n'
            'vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9\n')
    assert parse_engine_metrics(text).prefix_queries == 1234.0
    assert parse_engine_metrics("").prefix_queries == 0.0


def test_gie_prefix_cache_scorer_weighs_the_cached_share() -> None:
    """The Inference Extension's profile adds the prefix-cache scorer (weight 3): the
    endpoint holding the prompt's prefix wins over an equally idle one; with the
    scorer's weight at 0 the pick is back to the other scorers (a random tie here)."""
    index = PrefixIndex()
    history = prefix_keys(SYSTEM + b"turn 1 ... turn 2 ...", A)
    index.record(history, "e2")
    loads = {"e1": 0, "e2": 0, "e3": 0}
    request = RouteRequest(A, prefix=history)
    gie = make_policy("gie-lora-affinity")
    assert all(gie.pick(list(loads), _fleet(index, loads, A), request) == "e2"
               for _ in range(20))  # fmt: skip
    off = make_policy("gie-lora-affinity", {"prefix_weight": 0, "seed": 1})
    picks = {off.pick(list(loads), _fleet(index, loads, A), request) for _ in range(30)}
    assert picks == {"e1", "e2", "e3"}
