"""Which engine holds which KV block, from the engines' own KV-cache events.

vLLM publishes what its prefix cache does (``--kv-events-config``: msgpack over ZMQ,
one batch per scheduler step): ``BlockStored`` (the hashes of newly cached full
blocks, with the adapter's name), ``BlockRemoved`` (evicted hashes) and
``AllBlocksCleared``. llm-d's precise prefix-cache scorer keeps an index of them,
keyed by the block hash and the LoRA name, and scores each pod by the longest run of
the request's block hashes, from the first, that the pod holds. This is that index:
exact where the router's own ``PrefixIndex`` guesses from what it sent, at the price
of a subscription to every engine and of the request's block hashes (a tokenizer on
the hot path, as llm-d runs one). Events are read by their vLLM tag (the class name)
and field names, so vLLM's decoded structs and the simulator's apply alike. Memory is
bounded by the fleet's KV blocks: every stored block is removed again when evicted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

Key = tuple[str | None, Hashable]


class KvBlockIndex:
    """(LoRA name, block hash) -> endpoints holding it, kept from KV events."""

    __slots__ = ("_held", "_where")

    def __init__(self) -> None:
        self._where: dict[Key, set[str]] = {}
        self._held: dict[str, dict[Hashable, str | None]] = {}
        """Per endpoint: its blocks' hashes -> LoRA name (``BlockRemoved`` has none)."""

    def __len__(self) -> int:
        return len(self._where)

    def apply(self, endpoint: str, events: Iterable[Any]) -> None:
        """One batch's events from ``endpoint``, in order."""
        held = self._held.setdefault(endpoint, {})
        where = self._where
        for event in events:
            kind = type(event).__name__
            if kind == "BlockStored":
                lora = event.lora_name
                for h in event.block_hashes:
                    held[h] = lora
                    where.setdefault((lora, h), set()).add(endpoint)
            elif kind == "BlockRemoved":
                for h in event.block_hashes:
                    if h in held:
                        self._drop(endpoint, (held.pop(h), h))
            elif kind == "AllBlocksCleared":
                self.forget(endpoint)
                held = self._held.setdefault(endpoint, {})
            else:
                raise ValueError(f"unknown KV event {kind!r} from {endpoint}")

    def forget(self, endpoint: str) -> None:
        """Nothing is cached on ``endpoint`` any more (cleared, restarted or gone)."""
        for h, lora in self._held.pop(endpoint, {}).items():
            self._drop(endpoint, (lora, h))

    def _drop(self, endpoint: str, key: Key) -> None:
        pods = self._where.get(key)
        if pods is not None:
            pods.discard(endpoint)
            if not pods:
                del self._where[key]

    def longest_prefix(
        self, lora: str | None, hashes: Sequence[Hashable], endpoints: Iterable[str]
    ) -> dict[str, int]:
        """Blocks of ``hashes``, from the first, that each endpoint holds; only the
        endpoints holding the first block are in the answer (as llm-d's scorer)."""
        alive = set(endpoints)
        found: dict[str, int] = {}
        where = self._where
        for depth, h in enumerate(hashes):
            pods = where.get((lora, h))
            still = alive & pods if pods else set()
            for e in alive - still:
                if depth:
                    found[e] = depth
            if not still:
                return found
            alive = still
        for e in alive:
            found[e] = len(hashes)
        return found
