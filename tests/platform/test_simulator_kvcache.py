"""The simulator's KV cache model: hash chaining, isolation, LRU eviction, preemption,
engine-wide stalls and the two adapter load tiers."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mol_router.replicas.policy.kvindex import KvBlockIndex
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig
from mol_testkit.simulator.kvcache import PrefixCache, block_hashes, extra_keys
from mol_testkit.simulator.kvevents import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    external_hash,
)
from mol_testkit.simulator.model import SlotEngine
from mol_testkit.simulator.segments import prompt_token_ids

BS = 4


def test_each_block_hash_chains_from_its_parent() -> None:
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], BS)
    b = block_hashes([1, 2, 3, 4, 5, 6, 7, 0, 9], BS)
    c = block_hashes([0, 2, 3, 4, 5, 6, 7, 8], BS)
    assert len(a) == 2  # the partial third block has no hash
    assert a[0] == b[0]
    assert a[1] != b[1]
    assert c[0] != a[0]
    assert c[1] != a[1]  # same tokens in block 2, another parent


def test_adapter_name_and_path_key_every_block() -> None:
    tokens = list(range(12))
    base = block_hashes(tokens, BS)
    one = block_hashes(tokens, BS, ("a", "/adapters/a/v1"))
    other = block_hashes(tokens, BS, ("b", "/adapters/b/v1"))
    new_version = block_hashes(tokens, BS, ("a", "/adapters/a/v2"))
    for i in range(3):
        assert len({base[i], one[i], other[i], new_version[i]}) == 4
    assert one == block_hashes(tokens, BS, ("a", "/adapters/a/v1"))


def test_cache_salt_keys_the_first_block_only() -> None:
    assert extra_keys(None, "tenant-1", True) == (("cache_salt", "tenant-1"),)
    assert extra_keys(None, "tenant-1", False) is None
    assert extra_keys(("a", "/a"), "t", True) == (("lora", "a", "/a"), ("cache_salt", "t"))
    tokens = list(range(8))
    salted = block_hashes(tokens, BS, cache_salt="t1")
    assert salted == block_hashes(tokens, BS, cache_salt="t1")
    other = block_hashes(tokens, BS, cache_salt="t2")
    assert salted[0] != other[0]
    assert salted[1] != other[1]  # the chain carries it on


def test_blocks_with_nothing_cached_are_reused_before_any_cached_one() -> None:
    """vLLM 0.32 puts a freed block with no cached content (a partial last block) at
    the front of the free queue and cached ones at its end."""
    pool = PrefixCache(num_blocks=7, block_size=BS)  # 6 usable
    first, second = pool.allocate(3), pool.allocate(3)
    assert first is not None
    assert second is not None
    pool.store(second, [b"b0", b"b1", b"b2"])
    pool.release(second)  # freed earlier: evicted first among the cached
    pool.store(first[:2], [b"a0", b"a1"])  # its third block holds a partial one
    pool.release(first)
    assert pool.allocate(1) == first[2:]  # the partial block, not b2
    assert pool.evictions == 0
    assert pool.lookup([b"b0", b"b1", b"b2"], 100) == second


def test_free_blocks_are_reused_least_recently_freed_first_tail_first() -> None:
    pool = PrefixCache(num_blocks=7, block_size=BS)  # 6 usable
    first = pool.allocate(3)
    second = pool.allocate(3)
    assert first is not None
    assert second is not None
    pool.store(first, [b"a0", b"a1", b"a2"])
    pool.store(second, [b"b0", b"b1", b"b2"])
    pool.release(first)
    pool.release(second)
    assert pool.usage() == 0
    assert len(pool.cached) == 6  # free but still cached
    assert pool.lookup([b"a0", b"a1", b"a2"], 100) == first
    pool.allocate(2)  # evicts the tail of the first request, its prefix stays
    assert pool.lookup([b"a0", b"a1", b"a2"], 100) == first[:1]
    assert pool.evictions == 2
    hit = pool.lookup([b"b0", b"b1"], 100)
    pool.take(hit)  # held blocks leave the free queue: never evicted
    assert pool.allocate(2) is not None  # a0 and b2 go
    assert pool.lookup([b"b0", b"b1"], 100) == second[:2]
    assert pool.lookup([b"a0"], 100) == []
    assert pool.allocate(1) is None


def test_a_lookup_leaves_the_last_prompt_token_to_compute() -> None:
    pool = PrefixCache(num_blocks=10, block_size=BS)
    blocks = pool.allocate(2)
    assert blocks is not None
    pool.store(blocks, [b"x", b"y"])
    assert len(pool.lookup([b"x", b"y"], 8)) == 1  # 8 tokens: at most 7 cached, 1 block
    assert len(pool.lookup([b"x", b"y"], 9)) == 2


async def test_a_repeated_prompt_hits_on_its_adapter_only() -> None:
    engine = SlotEngine(SimConfig(model="m", dynamic_loras=True, block_size=BS))
    prompt = prompt_token_ids([("system", 10), ("question", 3)])  # 13 tokens: 3 blocks
    for adapter, hit in (("a", 0), ("a", 12), ("b", 0), (None, 0), (None, 12)):
        name = engine.resolve_model(adapter)
        request = engine.submit("m", name, token_ids=prompt)
        assert request.cached_tokens == hit, adapter
        engine.finish(request, "stop")
    assert (engine.prefix_queries, engine.prefix_hits) == (5 * 13, 2 * 12)


async def test_a_salted_prompt_hits_only_with_its_salt() -> None:
    engine = SlotEngine(SimConfig(model="m", block_size=BS))
    prompt = list(range(9))
    hits = []
    for salt in ("t1", "t2", "t1", None):
        request = engine.submit("m", None, token_ids=prompt, cache_salt=salt)
        hits.append(request.cached_tokens)
        engine.finish(request, "stop")
    assert hits == [0, 0, 8, 0]


async def test_out_of_blocks_the_newest_request_is_preempted_and_recomputed() -> None:
    engine = SlotEngine(SimConfig(model="m", block_size=BS, kv_cache_blocks=5))  # 4 usable
    old = engine.submit("m", None, token_ids=list(range(100, 108)))  # 2 blocks
    new = engine.submit("m", None, token_ids=list(range(200, 208)))  # 2 blocks
    assert engine.kv_cache_usage() == 1.0
    engine.token(old)  # a 9th token needs a third block: the newest gives way
    assert (old.state, new.state) == ("running", "waiting")
    assert (new.preemptions, engine.preemptions) == (1, 1)
    assert engine.waiting[0] is new
    assert not new.admitted.done()  # a fresh future: its clock waits for the rerun
    queries = engine.prefix_queries
    engine.finish(old, "stop")
    assert new.state == "running"
    assert new.block_ids
    assert engine.prefix_queries == queries  # a rerun is counted apart
    assert await new.admitted == new.ready
    assert engine.snapshot().preemptions == 1


async def test_an_adapter_load_stalls_every_running_request() -> None:
    engine = SlotEngine(
        SimConfig(model="m", dynamic_loras=True, ttft_s=0.01, itl_s=0.01, lora_load_s=0.5)
    )
    loop = asyncio.get_running_loop()
    running = engine.submit("m", None)
    engine.token(running)
    before = engine.due(running)
    start = loop.time()
    loading = engine.submit("m", engine.resolve_model("x"))
    assert engine.due(running) == pytest.approx(before + 0.5)  # not just its own request
    assert start + 0.5 <= loading.ready <= loop.time() + 0.5  # wall time, not a step
    after_load = engine.submit("m", None)  # arrives during the load: starts after it
    assert after_load.ready == pytest.approx(loading.ready)


async def test_prefill_time_counts_uncached_tokens_only() -> None:
    engine = SlotEngine(SimConfig(model="m", block_size=BS, prefill_s_per_token=0.01))
    loop = asyncio.get_running_loop()
    prompt = list(range(41))
    cold = engine.submit("m", None, token_ids=prompt)
    assert cold.ready == pytest.approx(loop.time() + 0.41)
    engine.finish(cold, "stop")
    engine.busy_until = 0.0  # the engine is idle again
    warm = engine.submit("m", None, token_ids=prompt)
    assert warm.cached_tokens == 40
    assert warm.ready == pytest.approx(loop.time() + 0.01)


async def test_slot_copies_and_disk_loads_are_counted_and_priced_apart() -> None:
    config = SimConfig(model="m", dynamic_loras=True, max_loras=1, max_cpu_loras=2,
                       lora_load_s=0.01, lora_disk_load_s=0.1)  # fmt: skip
    engine = SlotEngine(config)
    stalls = []
    for name in ("a", "b", "a", "c", "a"):
        before = engine.stall_total
        request = engine.submit("m", engine.resolve_model(name))
        engine.finish(request, "stop")
        stalls.append(round(engine.stall_total - before, 6))
    # a, b from disk; a again from host memory; c evicts b there (least recently used).
    assert stalls == [0.11, 0.11, 0.01, 0.11, 0.01]
    assert engine.total_loads == {"gpu": 5, "cpu": 3}
    state = engine.snapshot()
    assert state.slot_loads == {"a": 3, "b": 1, "c": 1}
    assert state.cpu_loads == {"a": 1, "b": 1, "c": 1}
    assert state.cpu_adapters == ["c", "a"]


def _counter(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} not exposed")


async def test_prefix_cache_metrics_count_tokens_as_vllm() -> None:
    config = SimConfig(model="m", block_size=BS, output_tokens=2)
    prompt = " ".join(f"w{i}" for i in range(10))  # 10 words: 10 tokens, 2 full blocks
    async with AsyncSimulatorCluster(config=config) as sims, aiohttp.ClientSession() as http:
        url = sims.urls[0]
        seen = []
        bodies = [{"prompt": prompt}, {"prompt": prompt}, {"prompt": prompt, "cache_salt": "t"},
                  {"prompt": prompt, "cache_salt": ""}]  # fmt: skip
        for body in bodies:
            async with http.post(url + "/v1/completions", json={"model": "m", **body}) as resp:
                assert resp.status == (400 if body.get("cache_salt") == "" else 200)
            async with http.get(url + "/metrics") as resp:
                text = await resp.text()
            seen.append((_counter(text, "vllm:prefix_cache_queries_total"),
                         _counter(text, "vllm:prefix_cache_hits_total")))  # fmt: skip
        assert _counter(text, "vllm:prompt_tokens_cached_total") == 8
    assert seen == [(10, 0), (20, 8), (30, 8), (30, 8)]


async def test_kv_events_tell_what_the_cache_stores_and_evicts_as_vllm() -> None:
    """BlockStored per run of newly cached blocks (chain order, the parent's hash, the
    blocks' tokens, the adapter's id and name), BlockRemoved on eviction,
    AllBlocksCleared on a reset: the names and fields of vllm.distributed.kv_events."""
    engine = SlotEngine(SimConfig(model="m", dynamic_loras=True, block_size=BS,
                                  kv_cache_blocks=7))  # 6 usable  # fmt: skip
    engine.enable_kv_events()
    name = engine.resolve_model("a")
    first = prompt_token_ids([("system", 8), ("q1", 1)])  # 9 tokens: 2 full blocks
    r1 = engine.submit("m", name, token_ids=first)
    batch = engine.publish_kv_events(1.5)
    assert batch is not None
    assert batch.ts == 1.5
    (stored,) = batch.events
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == [
        external_hash(h) for h in block_hashes(first, BS, engine.lora_key(name))]
    assert all(isinstance(h, int) and 0 <= h < 1 << 64 for h in stored.block_hashes)
    assert stored.parent_block_hash is None
    assert stored.extra_keys == [("a",), ("a",)]  # untagged: the LoRA's name per block
    assert (stored.group_idx, stored.kv_cache_spec_kind) == (0, "full_attention")
    assert stored.token_ids == first[:8]
    assert (stored.block_size, stored.medium) == (BS, "GPU")
    assert (stored.lora_id, stored.lora_name) == (engine.adapters["a"].int_id, "a")
    assert engine.publish_kv_events(2.0) is None  # nothing new
    engine.finish(r1, "stop")
    # The same system prompt and a longer question: only the new block is told, chained
    # from the last shared one.
    second = prompt_token_ids([("system", 8), ("q2", 5)])
    r2 = engine.submit("m", name, token_ids=second)
    batch = engine.publish_kv_events(3.0)
    assert batch is not None
    (more,) = batch.events
    assert isinstance(more, BlockStored)
    hashes = [external_hash(h) for h in block_hashes(second, BS, engine.lora_key(name))]
    assert more.block_hashes == hashes[2:3]
    assert more.parent_block_hash == hashes[1]
    assert more.token_ids == second[8:12]
    engine.finish(r2, "stop")
    # A base-model prompt needing every block evicts cached ones: told as removed.
    r3 = engine.submit("m", None, token_ids=list(range(1000, 1024)))
    batch = engine.publish_kv_events(4.0)
    assert batch is not None
    gone = [e for e in batch.events if isinstance(e, BlockRemoved)]
    assert all(len(e.block_hashes) == 1 for e in gone)  # one event per evicted block
    removed = [h for e in gone for h in e.block_hashes]
    assert set(removed) <= set(stored.block_hashes) | set(more.block_hashes)
    assert removed
    assert not set(removed) & {external_hash(h) for h in engine.cache.cached}
    base = [e for e in batch.events if isinstance(e, BlockStored)]
    assert base
    assert all(e.lora_id is None and e.lora_name is None for e in base)
    engine.finish(r3, "stop")
    engine.cache.clear()
    batch = engine.publish_kv_events(5.0)
    assert batch is not None
    assert isinstance(batch.events[-1], AllBlocksCleared)
    assert not engine.cache.cached


async def test_an_index_fed_by_the_events_holds_what_the_cache_holds() -> None:
    """Replaying the event stream into the router's KV-block index (llm-d's precise
    scorer's view) gives exactly the cache's contents, through stores and evictions."""
    engine = SlotEngine(SimConfig(model="m", dynamic_loras=True, block_size=BS,
                                  kv_cache_blocks=12))  # fmt: skip
    engine.enable_kv_events()
    index = KvBlockIndex()
    for i in range(12):
        adapter = engine.resolve_model(("a", "b", None)[i % 3])
        ids = prompt_token_ids([("sys", 8), (f"q{i % 5}", 6)])
        request = engine.submit("m", adapter, token_ids=ids)
        engine.finish(request, "stop")
        batch = engine.publish_kv_events(float(i))
        if batch is not None:
            index.apply("e0", batch.events)
    held = {h for (_, h), pods in index._where.items() if "e0" in pods}
    assert held == {external_hash(h) for h in engine.cache.cached}
    assert len(index) == len(engine.cache.cached)
