"""Where each prompt prefix was last sent: the router's approximate prefix-cache index.

vLLM caches a prompt's KV blocks by a hash chain over its tokens, with the LoRA's
identity (and a request's ``cache_salt``) in the key, so a later request for the same
adapter whose prompt starts the same way skips prefill for that prefix — on the replica
that computed it, and only while its blocks survive LRU eviction. A router that sends
such a request back to that replica saves the prefill; one that sends it elsewhere
pays it again.

The router cannot see the engines' caches without their KV events, so it remembers
what it sent where: for each request, hashes of its prompt's prefixes, chained from a
seed that holds the adapter's immutable name and the tenant salt (so prefixes are never
matched across adapters, versions or tenants, as the engine never shares them). No
tokenizer on the hot path: prefixes end at character offsets, every ``block_chars`` up
to ``fine_blocks`` blocks, then at doubling lengths, so a 100 KB agent context costs
~25 hashes (each one XXH3-64 call in C over the bytes since the previous prefix end,
seeded with the previous key: a 64-bit key for the whole prefix) and the match is fine
where it matters (system prompts and first turns) and coarse deep into a long context,
where any long match wins anyway. XXH3 hashes 4 KB in ~0.3 µs, so a prompt is hashed whole
every time (a 4k-token prompt in a few microseconds): nothing is kept to resume from.

The index is an LRU of prefix keys bounded in entries; each entry holds a bitmask of
the endpoints it was sent to. An engine that restarts (its cache empty) is forgotten by
giving it a new bit: masks are read against the live bits only. Every router replica
hashes the same way, so replicas that see a session's turns agree on where it lives.

Two more bits an entry mark the prompt's shape: that some prompt went on past that
prefix, and that prompts went on past it in two different ways: a **branch**, where a
shared prompt (a system prompt, an agent's tools) ends and sessions part. The key just
past the deepest branch on a prompt's path is its **session key**
(:meth:`PrefixIndex.session`): the same for every turn of a conversation whose history
only grows, whichever router sent the turns before, and different between
conversations. Router replicas that share nothing agree on it once each has seen two
sessions start from that shared prompt, and hash it to the same home replica
(``mol-affinity``'s step 0).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from functools import lru_cache

from xxhash import xxh3_64_intdigest as _xxh3

DEFAULT_BLOCK_CHARS = 256
"""~64 tokens of English text: coarser than vLLM's 16-token GPU blocks, fine enough to
tell a shared system prompt from a shared conversation."""
DEFAULT_FINE_BLOCKS = 16
DEFAULT_CAPACITY = 1_000_000
"""Prefix entries kept (about 110 bytes each: ~110 MB at the default)."""


def prefix_keys(
    data: bytes, seed: str, *, block_chars: int = DEFAULT_BLOCK_CHARS,
    fine_blocks: int = DEFAULT_FINE_BLOCKS,
) -> tuple[int, ...]:  # fmt: skip
    """Chained 64-bit keys of the prompt ``data``'s prefixes (shortest first; the proxy
    passes the request's messages or prompt as JSON); ``seed`` names the adapter and
    tenant. Only whole blocks count: a prompt shorter than one block has no key, as vLLM
    caches only full blocks. A key is XXH3-64 of the bytes since the previous prefix end,
    seeded with the previous key (the first with the seed's), so it stands for the whole
    prefix and the same on every host."""
    ends = prefix_ends(block_chars, fine_blocks)
    count = bisect_right(ends, len(data))
    if not count:
        return ()
    view = memoryview(data)
    key = _seeded(seed)
    keys: list[int] = []
    append = keys.append
    start = 0
    for end in ends[:count]:
        key = _xxh3(view[start:end], key)
        append(key)
        start = end
    return tuple(keys)


@lru_cache(maxsize=8)
def prefix_ends(block_chars: int, fine_blocks: int) -> tuple[int, ...]:
    """Where the prefixes ``prefix_keys`` hashes end: ``fine_blocks`` blocks of
    ``block_chars``, then steps that double (up to 2**48 bytes)."""
    if block_chars < 1 or fine_blocks < 1:
        raise ValueError("block_chars and fine_blocks must be >= 1")
    ends: list[int] = []
    end, step = block_chars, block_chars
    while end <= 1 << 48:
        ends.append(end)
        if len(ends) >= fine_blocks:
            step *= 2
        end += step
    return tuple(ends)


@lru_cache(maxsize=4096)
def _seeded(seed: str) -> int:
    """The chain's start for a seed (adapter and tenant: few, so kept)."""
    return _xxh3(seed.encode("utf-8", "surrogatepass") + b"\0", 0)


def key_chars(
    depth: int, *, block_chars: int = DEFAULT_BLOCK_CHARS, fine_blocks: int = DEFAULT_FINE_BLOCKS
) -> int:  # fmt: skip
    """Bytes of the prompt that its first ``depth`` prefix keys cover (their layout in
    ``prefix_keys``: ``fine_blocks`` blocks of ``block_chars``, then doubling steps)."""
    if depth <= fine_blocks:
        return depth * block_chars
    return fine_blocks * block_chars + block_chars * ((2 << (depth - fine_blocks)) - 2)


_WENT_ON = 1
"""Entry flag: some prompt went on past this prefix."""
_BRANCH = 2
"""Entry flag: prompts went on past this prefix in two different ways."""
_FLAGS = _WENT_ON | _BRANCH


class PrefixIndex:
    """LRU of prefix keys -> endpoints they were sent to; see the module docstring."""

    __slots__ = ("_bits", "_capacity", "_entries", "_live", "_next_bit")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1 entry")
        self._capacity = capacity
        self._entries: dict[int, int] = {}  # insertion order = recency
        self._bits: dict[str, int] = {}
        self._live = 0
        self._next_bit = 2  # bits 0 and 1 hold _FLAGS

    def __len__(self) -> int:
        return len(self._entries)

    def _bit(self, endpoint: str) -> int:
        bit = self._bits.get(endpoint)
        if bit is None:
            bit = self._bits[endpoint] = 1 << self._next_bit
            self._next_bit += 1
            self._live |= bit
        return bit

    def forget(self, endpoint: str) -> None:
        """``endpoint``'s cache is gone (it restarted, or left): nothing is believed
        cached there any more; a later send starts afresh under a new bit."""
        bit = self._bits.pop(endpoint, None)
        if bit is not None:
            self._live &= ~bit

    def record(self, keys: Sequence[int], endpoint: str) -> None:
        """A request with these prefix keys was sent to ``endpoint``."""
        if not keys:
            return
        bit = self._bit(endpoint)
        entries = self._entries
        keep = self._live | _FLAGS
        # Deepest first, so the shallow prefixes many requests share are the most
        # recent and outlive the deep ones under eviction (a match walks from shallow).
        # A prefix that went on before and is now followed by a key never seen branches.
        flags = 0  # for the key before the one in hand: it goes on, maybe somewhere new
        for key in reversed(keys):
            old = entries.pop(key, None)
            mask = 0 if old is None else old & keep
            if flags & _BRANCH and mask & _WENT_ON:
                mask |= _BRANCH
            entries[key] = mask | bit | (flags & _WENT_ON)
            flags = _WENT_ON | (_BRANCH if old is None else 0)
        excess = len(entries) - self._capacity
        if excess > 0:
            for old in list(_first(entries, excess)):
                del entries[old]

    def session(self, keys: Sequence[int]) -> int | None:
        """The prompt's session key: the first of ``keys`` past the deepest prefix the
        index has seen prompts go on from in two different ways (None when there is no
        such branch on the prompt's path, or nothing past it). Pure read."""
        entries = self._entries
        branch = -1
        for i, key in enumerate(keys):
            mask = entries.get(key)
            if mask is None:
                break
            if mask & _BRANCH:
                branch = i
        if branch < 0 or branch + 1 >= len(keys):
            return None
        return keys[branch + 1]

    def matches(self, keys: Sequence[int], endpoints: Iterable[str]) -> dict[str, int]:
        """How many leading keys of ``keys`` each of ``endpoints`` was sent (0 for
        none): the longest prefix believed cached there. Pure read: no LRU touch."""
        bits = {e: self._bits.get(e, 0) for e in endpoints}
        found = dict.fromkeys(bits, 0)
        if not keys or not self._entries:
            return found
        alive = 0
        for b in bits.values():
            alive |= b
        alive &= self._live
        entries = self._entries
        depth = 0
        for key in keys:
            mask = entries.get(key, 0) & alive
            if mask != alive:  # some endpoints' prefixes end here
                self._settle(bits, found, alive & ~mask, depth)
                if not mask:
                    return found
                alive = mask
            depth += 1
        self._settle(bits, found, alive, depth)
        return found

    @staticmethod
    def _settle(bits: dict[str, int], found: dict[str, int], mask: int, depth: int) -> None:
        for e, b in bits.items():
            if mask & b:
                found[e] = depth


def _first(entries: dict[int, int], n: int) -> Iterable[int]:
    it = iter(entries)
    for _ in range(n):
        yield next(it)
