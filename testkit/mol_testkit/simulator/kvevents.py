"""KV-cache events as vLLM publishes them (``--kv-events-config``).

vLLM's engine core collects what its block pool did in each scheduler step and
publishes it as one ``KVEventBatch`` (msgpack over ZMQ, ``vllm.distributed.kv_events``):
``BlockStored`` when full blocks enter the prefix cache (their hashes in chain order,
the hash of the block before the first, their token ids, the block size, and the
adapter as ``lora_id`` and ``lora_name``), ``BlockRemoved`` when cached blocks are
evicted, ``AllBlocksCleared`` when the cache is reset. Consumers such as llm-d's
precise prefix-cache scorer index them per pod. The classes here carry vLLM's names,
fields and tags (the class name), so a consumer written against vLLM reads them as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ExternalBlockHash = bytes | int
MEDIUM_GPU = "GPU"


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None = MEDIUM_GPU
    lora_name: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: list[ExternalBlockHash]
    medium: str | None = MEDIUM_GPU


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
