"""llm-d's precise prefix-cache scorer (``llmd-precise-prefix``) and its KV-block index,
as pure functions of the events and the request; and mol-affinity's step 0 (a warm
replica against the one its adapter rules pick, priced in prefill tokens)."""

from __future__ import annotations

import pytest

from mol_router.replicas.policy import make_policy
from mol_router.replicas.policy.interface import Demand, EngineStats, FleetStats, RouteRequest
from mol_router.replicas.policy.kvindex import KvBlockIndex
from mol_router.replicas.policy.llmd import precise_prefix_scores
from mol_router.replicas.policy.mol import traffic_share
from mol_router.replicas.policy.prefix import PrefixIndex, prefix_keys
from mol_testkit.simulator.kvevents import AllBlocksCleared, BlockRemoved, BlockStored

A = "acme/bot@v1"
EPS = ["http://e0", "http://e1", "http://e2", "http://e3"]
CHAIN = (b"h0", b"h1", b"h2", b"h3")


def stored(hashes: tuple[bytes, ...], lora: str | None = A) -> BlockStored:
    return BlockStored(list(hashes), None, [], 16, 1 if lora else None, lora_name=lora)


def indexed() -> KvBlockIndex:
    index = KvBlockIndex()
    index.apply(EPS[0], [stored(CHAIN[:1])])
    index.apply(EPS[1], [stored(CHAIN[:3])])
    index.apply(EPS[2], [stored(CHAIN[1:])])  # no first block: no prefix at all
    index.apply(EPS[3], [stored(CHAIN, lora="other@v1")])  # another adapter's blocks
    return index


def test_index_scores_the_longest_prefix_per_pod_within_the_lora_name() -> None:
    index = indexed()
    assert index.longest_prefix(A, CHAIN, EPS) == {EPS[0]: 1, EPS[1]: 3}
    assert index.longest_prefix("other@v1", CHAIN, EPS) == {EPS[3]: 4}
    assert index.longest_prefix(None, CHAIN, EPS) == {}
    index.apply(EPS[1], [BlockRemoved([b"h1"])])  # evicted: the chain breaks there
    assert index.longest_prefix(A, CHAIN, EPS) == {EPS[0]: 1, EPS[1]: 1}
    index.apply(EPS[1], [AllBlocksCleared()])
    assert index.longest_prefix(A, CHAIN, EPS) == {EPS[0]: 1}
    index.forget(EPS[0])
    index.forget(EPS[2])
    index.forget(EPS[3])
    assert len(index) == 0  # nothing left behind
    with pytest.raises(ValueError, match="unknown KV event"):
        index.apply(EPS[0], [object()])


def test_scores_are_min_max_normalised_over_the_pods_holding_the_first_block() -> None:
    index = indexed()
    cands = [(e, EngineStats()) for e in EPS]
    request = RouteRequest(A, blocks=CHAIN)
    assert precise_prefix_scores(cands, request, index) == [0.0, 1.0, 0.0, 0.0]
    index.apply(EPS[0], [stored(CHAIN[1:3])])  # now as long as e1's
    assert precise_prefix_scores(cands, request, index) == [1.0, 1.0, 0.0, 0.0]
    assert precise_prefix_scores(cands, RouteRequest(A), index) == [0.0] * 4
    assert precise_prefix_scores(cands, request, None) == [0.0] * 4


def test_precise_policy_weighs_prefix_3_against_kv_2_and_queue_2() -> None:
    index = indexed()
    policy = make_policy("llmd-precise-prefix")
    idle = {e: EngineStats() for e in EPS}
    request = RouteRequest(A, blocks=CHAIN)
    snap = FleetStats.of(idle, Demand(), None, index)
    assert policy.pick(EPS, snap, request) == EPS[1]
    # a longest prefix behind the longest queue and a full KV cache loses (3 < 2 + 2)
    busy = dict(idle)
    busy[EPS[1]] = EngineStats(waiting=9, kv_cache_usage=1.0)
    busy[EPS[3]] = EngineStats(waiting=9, kv_cache_usage=1.0)
    assert policy.pick(EPS, FleetStats.of(busy, Demand(), None, index), request) != EPS[1]
    # a plain mapping (no index): queue and KV only
    assert policy.pick(EPS, busy, request) in {EPS[0], EPS[2]}
    with pytest.raises(ValueError, match="prefix_weight"):
        make_policy("llmd-precise-prefix", {"prefix_weight": -1})


SYSTEM = b"You are a careful coding assistant. " * 80  # ~2.9 KB: ~700 tokens


def _fleet(index: PrefixIndex, inflight: dict[str, int]) -> FleetStats:
    stats = {e: EngineStats(inflight=n, max_lora=4, running_adapters=frozenset({A}))
             for e, n in inflight.items()}  # fmt: skip
    return FleetStats.of(stats, Demand(), index)


def test_mol_keeps_a_session_where_its_history_is_until_the_queue_costs_more() -> None:
    policy = make_policy("mol-affinity", {"queue_tokens": 500})
    index = PrefixIndex()
    history = prefix_keys(SYSTEM + b" turn 1 and its reply " * 20, A)
    index.record(history, "e3")
    request = RouteRequest(A, prompt_tokens=1000, prefix=history)
    # ~770 tokens believed cached there: worth one request ahead (500) but not two (1000)
    assert policy.pick(["e1", "e3"], _fleet(index, {"e1": 0, "e3": 1}), request) == "e3"
    assert policy.pick(["e1", "e3"], _fleet(index, {"e1": 0, "e3": 2}), request) == "e1"
    # a replica without the adapter pays its load on top
    stats = _fleet(index, {"e1": 0, "e3": 1})
    stats["e3"] = EngineStats(inflight=1, max_lora=4)
    loading = make_policy("mol-affinity", {"queue_tokens": 500, "load_tokens": 400})
    assert loading.pick(["e1", "e3"], stats, request) == "e1"


def test_traffic_share_scales_this_routers_queue_to_the_fleets() -> None:
    """One of four routers sees a quarter of every queue in flight: the last scrape's
    queues over its own in-flight count restore the rest (never below 1)."""
    four = [EngineStats(running=8, inflight=2), EngineStats(running=4, waiting=4, inflight=2)]
    assert traffic_share(four) == 4.0
    assert traffic_share([EngineStats(running=1, inflight=3)]) == 1.0  # scrape behind us
    assert traffic_share([EngineStats(running=5)]) == 1.0  # nothing of ours in flight


def test_mol_sends_a_session_to_an_idle_replica_with_room_when_its_own_queues() -> None:
    """A replica that no adapter calls home, idle with an empty slot, takes a turn
    whose warm replica has requests queued beyond what its history saves; not one
    whose slots are full (the load would evict another adapter's copy)."""
    policy = make_policy("mol-affinity")
    index = PrefixIndex()
    history = prefix_keys(SYSTEM, A)
    index.record(history, "e1")
    request = RouteRequest(A, prompt_tokens=1000, prefix=history)
    stats = _fleet(index, {"e1": 3})
    stats["e2"] = EngineStats(max_lora=4)  # idle, nothing resident
    assert policy.pick(["e1", "e2"], stats, request) == "e2"
    stats["e2"] = EngineStats(max_lora=4, slot_adapters=("w", "x", "y", "z"))
    stats = FleetStats.of(stats, Demand(), index)
    assert policy.pick(["e1", "e2"], stats, request) == "e1"
