"""KV-cache events as vLLM publishes them (``--kv-events-config``).

vLLM's engine core collects what its block pool did in each scheduler step and
publishes it as one ``KVEventBatch`` (msgpack over ZMQ, ``vllm.distributed.kv_events``):
``BlockStored`` when full blocks enter the prefix cache (their hashes in chain order,
the hash of the block before the first, their token ids, the block size, and the
adapter as ``lora_id`` and ``lora_name``), ``BlockRemoved`` when cached blocks are
evicted, ``AllBlocksCleared`` when the cache is reset. Consumers such as llm-d's
precise prefix-cache scorer index them per pod. The classes here carry vLLM's names,
fields and tags (the class name), so a consumer written against vLLM reads them as is;
``tests/e2e/test_kv_events_conformance.py`` compares them with what a real engine
publishes. As vLLM 0.32 does by default (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``),
hashes are published as the low 64 bits of the block hash (:func:`external_hash`),
``extra_keys`` lists each block's hash inputs besides its tokens untagged (the LoRA's
name, then the ``cache_salt`` on the first block; None when there are none), and an
eviction is told block by block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ExternalBlockHash = bytes | int
MEDIUM_GPU = "GPU"
FULL_ATTENTION = "full_attention"


def external_hash(block_hash: bytes) -> int:
    """A block hash as vLLM publishes it: its low 64 bits, big-endian."""
    return int.from_bytes(block_hash, "big") & ((1 << 64) - 1)


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None = MEDIUM_GPU
    lora_name: str | None = None
    extra_keys: list[tuple[str, ...] | None] | None = None
    group_idx: int | None = 0
    kv_cache_spec_kind: str | None = FULL_ATTENTION
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: list[ExternalBlockHash]
    medium: str | None = MEDIUM_GPU
    group_idx: int | None = 0
    locality: str | None = None
    ownership: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class KVEventBatch:
    """One scheduler step's events (``ts``: when the step published them)."""

    ts: float
    events: list[KVCacheEvent] = field(default_factory=list)
    data_parallel_rank: int | None = None
