"""The KV cache of one replica: fixed-size blocks, prefix caching and LRU eviction.

It follows vLLM v1's ``BlockPool`` and ``KVCacheManager`` (``vllm/v1/core/``) in what a
router can observe:

- Only full blocks are cached. A block's hash covers its parent block's hash, its
  token ids and the request's extra keys (:func:`extra_keys`): the adapter's name and
  path, so that KV computed with one adapter, or one version of it, is never reused by
  another, and ``cache_salt`` in the first block only, which isolates tenants (every
  later block chains from the salted first one).
- A lookup returns the longest run of cached blocks from the start of the prompt,
  capped so that at least the last prompt token is computed (vLLM needs its logits).
- Blocks no request holds stay cached but free. Free blocks with no cached content
  (a partial last block) are reused first; cached ones least recently freed first, and
  reusing a cached one evicts it. A request's blocks are freed tail first, so its last
  blocks are evicted before its first ones (the shared prefixes).
- With ``events`` set (vLLM's ``--kv-events-config``), every block that enters the
  cache and every eviction is told as vLLM's block pool tells it: ``BlockStored`` per
  run of newly cached blocks of a request, ``BlockRemoved`` per evicted block,
  ``AllBlocksCleared`` on a reset (``mol_testkit.simulator.kvevents``).

Hashes are SHA-256 over a compact encoding, not vLLM's pickle/CBOR bytes: equal
inputs give equal hashes within and across simulator processes, which is all the
simulator needs.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

from mol_testkit.simulator.kvevents import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
    external_hash,
)

BlockHash = bytes
NONE_HASH: BlockHash = hashlib.sha256(b"mol-sim-none-hash").digest()
ExtraKeys = tuple[tuple[str, ...], ...] | None


def extra_keys(
    lora: tuple[str, str] | None, cache_salt: str | None, first_block: bool
) -> ExtraKeys:
    """vLLM's ``generate_block_hash_extra_keys`` for text prompts: the adapter as
    ``("lora", name, path)``, then ``("cache_salt", salt)`` on the first block."""
    keys: list[tuple[str, ...]] = []
    if lora is not None:
        keys.append(("lora", *lora))
    if cache_salt and first_block:
        keys.append(("cache_salt", cache_salt))
    return tuple(keys) or None


def hash_block(parent: BlockHash | None, tokens: Sequence[int], extra: ExtraKeys) -> BlockHash:
    """vLLM's ``hash_block_tokens``: the chain link of one full block."""
    h = hashlib.sha256(parent or NONE_HASH)
    h.update(array("q", tokens).tobytes())
    if extra is not None:
        h.update(repr(extra).encode())
    return h.digest()


def block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    lora: tuple[str, str] | None = None,
    cache_salt: str | None = None,
) -> list[BlockHash]:
    """The hash chain of a prompt's full blocks (a partial last block has none)."""
    out: list[BlockHash] = []
    parent: BlockHash | None = None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(
            parent, token_ids[start : start + block_size], extra_keys(lora, cache_salt, start == 0)
        )
        out.append(parent)
    return out


class PrefixCache:
    """The block pool of one replica (block 0 is vLLM's reserved null block)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.refs = [0] * num_blocks
        """Requests holding each block."""
        self.hashes: list[BlockHash | None] = [None] * num_blocks
        """The cached content of each block, if any."""
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        """Free blocks, the next to reuse first."""
        self.cached: dict[BlockHash, int] = {}
        """Block hash -> the block holding it (held or free)."""
        self.evictions = 0
        self.events: list[KVCacheEvent] | None = None
        """Events not yet published (None: the engine publishes none)."""

    @property
    def usable(self) -> int:
        return self.num_blocks - 1

    def num_free(self) -> int:
        return len(self.free)

    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: the share of usable blocks a request holds."""
        return (self.usable - len(self.free)) / self.usable

    def lookup(self, hashes: Sequence[BlockHash], num_tokens: int) -> list[int]:
        """Blocks of the longest cached prefix, leaving at least one token to compute."""
        limit = max(num_tokens - 1, 0) // self.block_size
        hit: list[int] = []
        for h in hashes[:limit]:
            block = self.cached.get(h)
            if block is None:
                break
            hit.append(block)
        return hit

    def can_allocate(self, hit: Sequence[int], new: int) -> bool:
        """Room for ``new`` fresh blocks after taking the free ones among ``hit``."""
        free_hits = sum(1 for b in hit if self.refs[b] == 0)
        return new + free_hits <= len(self.free)

    def take(self, hit: Sequence[int]) -> None:
        """Hold cached blocks (a prefix hit): free ones leave the free queue."""
        for b in hit:
            if self.refs[b] == 0:
                del self.free[b]
            self.refs[b] += 1

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks, evicting the cached content of reused ones; None if short."""
        if n > len(self.free):
            return None
        out = []
        for _ in range(n):
            b, _ = self.free.popitem(last=False)
            old = self.hashes[b]
            if old is not None:
                del self.cached[old]
                self.hashes[b] = None
                self.evictions += 1
                if self.events is not None:  # one event per evicted block, as vLLM
                    self.events.append(BlockRemoved([external_hash(old)]))
            self.refs[b] = 1
            out.append(b)
        return out

    def store(
        self, block_ids: Sequence[int], hashes: Sequence[BlockHash],
        token_ids: Sequence[int] | None = None, lora: tuple[int, str] | None = None,
        cache_salt: str | None = None,
    ) -> None:  # fmt: skip
        """Cache full blocks under their hashes (a hash already cached keeps its block,
        as vLLM does when two requests computed the same block at once); ``token_ids``
        (the prompt's), ``lora`` (the adapter's id and name) and ``cache_salt`` go into
        the events."""
        events = self.events
        run: list[int] = []  # indices of a run of newly cached blocks, for one event
        for i, (b, h) in enumerate(zip(block_ids, hashes, strict=False)):
            if self.hashes[b] is None and h not in self.cached:
                self.hashes[b] = h
                self.cached[h] = b
                if events is not None:
                    if run and run[-1] != i - 1:
                        events.append(self._stored(run, hashes, token_ids, lora, cache_salt))
                        run = []
                    run.append(i)
        if run and events is not None:
            events.append(self._stored(run, hashes, token_ids, lora, cache_salt))

    def _stored(
        self, run: list[int], hashes: Sequence[BlockHash], token_ids: Sequence[int] | None,
        lora: tuple[int, str] | None, cache_salt: str | None,
    ) -> BlockStored:  # fmt: skip
        first, last, bs = run[0], run[-1] + 1, self.block_size
        name = lora[1] if lora else None
        extra: list[tuple[str, ...] | None] = []
        for i in range(first, last):
            keys = ((name,) if name else ()) + ((cache_salt,) if cache_salt and i == 0 else ())
            extra.append(keys or None)
        return BlockStored(
            block_hashes=[external_hash(h) for h in hashes[first:last]],
            parent_block_hash=external_hash(hashes[first - 1]) if first else None,
            token_ids=list(token_ids[first * bs : last * bs]) if token_ids is not None else [],
            block_size=bs, lora_id=lora[0] if lora else None, lora_name=name,
            extra_keys=extra,
        )  # fmt: skip

    def clear(self) -> None:
        """Forget every cached block (vLLM's ``reset_prefix_cache``, or a restart)."""
        for b, h in enumerate(self.hashes):
            if h is not None:
                self.hashes[b] = None
        self.cached.clear()
        if self.events is not None:
            self.events.append(AllBlocksCleared())

    def release(self, block_ids: Sequence[int]) -> None:
        """A request lets go of its blocks, tail first (evicted before its prefix). As
        vLLM 0.32's block pool: cached blocks join the end of the free queue (LRU
        eviction), blocks with no cached content its front (reused first)."""
        uncached: list[int] = []
        for b in reversed(block_ids):
            self.refs[b] -= 1
            if self.refs[b] == 0:
                if self.hashes[b] is None:
                    uncached.append(b)
                else:
                    self.free[b] = None
        for b in reversed(uncached):  # the first of them ends up at the head
            self.free[b] = None
            self.free.move_to_end(b, last=False)
