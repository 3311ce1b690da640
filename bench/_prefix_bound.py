"""What prefix hit rate a trace allows: with one unbounded cache, and with the fleet's KV.

Both replay the trace's requests in arrival order through vLLM's prefix cache as the
simulator models it (``mol_testkit.simulator.kvcache``: the same block hashing, so KV
is never shared across adapters or cache salts; full blocks only; the longest cached
run from the prompt's start, leaving its last token to compute), with no request in
flight while another looks up (no concurrency, nothing preempted, generated tokens take
no blocks): the hit rate is cached prompt tokens over prompt tokens, as
``vllm:prefix_cache_hits`` / ``queries`` count them.

- :func:`ideal`: one cache that never evicts, holding every request's blocks: the most
  any placement, on any capacity, can find cached.
- :func:`placement_bound`: what the fleet's capacity leaves of it when every session
  stays whole on one replica, sessions balanced greedily by their prompt tokens over
  the replicas (largest first onto the least loaded; a request without a session goes
  with its adapter's other sessionless requests, which share only the adapter's
  prefixes), each replica a ``PrefixCache`` of ``blocks`` blocks evicting least
  recently freed blocks first, a request's tail before its prefix, as vLLM does. A
  session whose context outgrows its replica's share of the cache, or replicas whose
  sessions together do, lose hits here that no placement of whole sessions keeps.

Neither is a bound on every policy in the strict sense: one that puts sessions of the
same adapter together shares their system prompts across sessions, which the balanced
placement counts once per replica. They tell how much of a policy's shortfall is the
trace's (cold prompts) and the capacity's, and how much is placement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from _workload import Arrival
from mol_testkit.simulator.kvcache import BlockHash, PrefixCache, block_hashes
from mol_testkit.simulator.segments import prompt_token_ids


@dataclass(frozen=True, slots=True)
class HitRate:
    """Prompt tokens found cached, of those looked up."""

    hits: int
    queries: int

    @property
    def rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


def trace_hashes(arrivals: Sequence[Arrival], block_size: int) -> list[list[BlockHash]]:
    """Each request's block hashes (none without segments: its prompt is its own),
    keyed by its adapter as the simulator keys them."""
    return [
        block_hashes(prompt_token_ids(a.segments), block_size,
                     (a.adapter, "") if a.adapter is not None else None)
        if a.segments is not None else []
        for a in arrivals
    ]  # fmt: skip


def _cap(prompt_tokens: int, block_size: int) -> int:
    """Blocks a lookup may return: vLLM computes at least the prompt's last token."""
    return max(prompt_tokens - 1, 0) // block_size


def _order(arrivals: Sequence[Arrival]) -> list[int]:
    return sorted(range(len(arrivals)), key=lambda i: arrivals[i].t)


def ideal(
    arrivals: Sequence[Arrival], block_size: int = 16,
    hashes: Sequence[Sequence[BlockHash]] | None = None,
) -> HitRate:  # fmt: skip
    """The hit rate of one cache that keeps every block it was ever given."""
    hashes = trace_hashes(arrivals, block_size) if hashes is None else hashes
    seen: set[BlockHash] = set()
    hits = queries = 0
    for i in _order(arrivals):
        found = 0
        for h in hashes[i][: _cap(arrivals[i].prompt_tokens, block_size)]:
            if h not in seen:
                break
            found += 1
        hits += found * block_size
        queries += arrivals[i].prompt_tokens
        seen.update(hashes[i])
    return HitRate(hits, queries)


def group(a: Arrival) -> str:
    """What a placement keeps together: the session, else the adapter's sessionless
    requests (they share nothing but its prefixes)."""
    return f"session:{a.session}" if a.session is not None else f"adapter:{a.adapter}"


def place(arrivals: Sequence[Arrival], replicas: int) -> dict[str, int]:
    """Each group's replica: the largest group (by prompt tokens) first, each onto the
    replica with the fewest prompt tokens so far (the lowest index on ties)."""
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    tokens: dict[str, int] = {}
    for a in arrivals:
        key = group(a)
        tokens[key] = tokens.get(key, 0) + a.prompt_tokens
    load = [0] * replicas
    out: dict[str, int] = {}
    for key in sorted(tokens, key=lambda k: (-tokens[k], k)):
        r = min(range(replicas), key=lambda j: (load[j], j))
        out[key] = r
        load[r] += tokens[key]
    return out


def placement_bound(
    arrivals: Sequence[Arrival], replicas: int, blocks: int, block_size: int = 16,
    hashes: Sequence[Sequence[BlockHash]] | None = None,
) -> HitRate:  # fmt: skip
    """The hit rate with every session whole on one of ``replicas`` caches of
    ``blocks`` blocks each (vLLM's ``num_gpu_blocks``, its null block included)."""
    if blocks < 2:
        raise ValueError("blocks must be >= 2 (vLLM keeps one in reserve)")
    hashes = trace_hashes(arrivals, block_size) if hashes is None else hashes
    where = place(arrivals, replicas)
    caches = [PrefixCache(blocks, block_size) for _ in range(replicas)]
    hits = queries = 0
    for i in _order(arrivals):
        a = arrivals[i]
        cache = caches[where[group(a)]]
        queries += a.prompt_tokens
        hit = cache.lookup(hashes[i], a.prompt_tokens)
        new = math.ceil(a.prompt_tokens / block_size) - len(hit)
        if not cache.can_allocate(hit, new):
            continue  # a prompt larger than the whole cache: nothing of it stays
        hits += len(hit) * block_size
        cache.take(hit)
        fresh = cache.allocate(new)
        assert fresh is not None
        held = hit + fresh
        cache.store(held, hashes[i])
        cache.release(held)
    return HitRate(hits, queries)
