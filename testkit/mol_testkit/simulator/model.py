"""The engine model: requests, the batch scheduler, the KV cache and engine time.

No HTTP here. It follows vLLM v1's scheduler in the ways a router can observe: a
request runs when the batch has room (``max_num_seqs``), the KV cache has blocks for
its uncached prompt tokens, and, if it uses an adapter, that adapter is already in
the running batch or fewer than ``max_loras`` distinct adapters are running;
otherwise it waits (requests behind it may overtake a LoRA-blocked one, as vLLM skips
them; a request short of KV blocks stops admission, first come first served).

Engine time: the engine is one device, so an adapter load (``lora_load_s``, plus
``lora_disk_load_s`` when it is not in host memory) and a prefill (uncached prompt
tokens x ``prefill_s_per_token``) each stall every running request, and a request
admitted while the engine is busy starts when it is free. A request's first token is
due ``ttft_s`` after its prefill, then one per ``itl_s``, each pushed back by the
stalls since. KV blocks grow with generated tokens; when none is left, the newest
running request is preempted (its blocks freed, recomputed from the prefix cache
when it runs again), as vLLM v1 does.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from mol_testkit.simulator.adapters import AdapterInfo, AdapterRegistry, EngineError
from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.kvcache import BlockHash, PrefixCache, block_hashes
from mol_testkit.simulator.kvevents import KVEventBatch

__all__ = ["AdapterInfo", "EngineError", "FinishReason", "ReplicaState", "SimRequest", "SlotEngine"]

FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(eq=False)
class SimRequest:
    """One request inside the engine."""

    id: str
    model: str
    adapter: str | None
    arrival: float
    admitted: asyncio.Future[float]
    """Resolves, when the request is scheduled, to the loop time its prefill is done
    (replaced by a new future when it is preempted)."""
    prompt_tokens: int = 1
    planned_tokens: int = 1
    """Tokens it means to generate (the ``max_tokens`` histogram's, not reserved)."""
    hashes: list[BlockHash] = field(default_factory=list)
    """Hash chain of the prompt's full blocks."""
    token_ids: Sequence[int] | None = None
    """The prompt's token ids, when known (the KV events carry a block's tokens)."""
    cache_salt: str | None = None
    generated: int = 0
    emitting: bool = False
    """Has produced its first token since it was (re)scheduled (from then on vLLM lists
    its adapter as running)."""
    block_ids: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    """Prompt tokens found in the prefix cache when it was first scheduled."""
    preemptions: int = 0
    ready: float = 0.0
    resumed_at: int = 0
    """``generated`` when it was last scheduled."""
    stall_base: float = 0.0
    state: Literal["waiting", "running", "finished"] = "waiting"

    @property
    def blocks(self) -> int:
        return len(self.block_ids)


@dataclass(frozen=True)
class ReceivedRequest:
    """A request body as the replica received it (for assertions on what was sent)."""

    path: str
    body: dict[str, object]
    headers: dict[str, str]


@dataclass(frozen=True)
class ReplicaState:
    """A consistent snapshot of one replica, for test assertions."""

    running: int
    waiting: int
    waiting_deferred: int
    """Waiting requests held back by the adapter budget (``max_loras``)."""
    registered: dict[str, str]
    """Known adapters, name -> path (what ``/v1/models`` lists)."""
    gpu_slots: list[str]
    """Adapters in GPU slots, least recently used first."""
    cpu_adapters: list[str]
    active_adapters: list[str]
    """Adapters with a request that produces tokens, in ``lora_requests_info`` order."""
    requests_by_model: dict[str, int]
    finished_by_reason: dict[str, int]
    slot_loads: dict[str, int]
    """How often each adapter entered a GPU slot (a copy from host memory)."""
    cpu_loads: dict[str, int]
    """How often each adapter was read from disk into host memory."""
    kv_blocks_used: int = 0
    """KV-cache blocks held by running requests."""
    cached_blocks: int = 0
    """Blocks holding a cached prefix (held or free)."""
    prefix_cache_queries: int = 0
    """Prompt tokens looked up in the prefix cache (``vllm:prefix_cache_queries``)."""
    prefix_cache_hits: int = 0
    """Of those, tokens found (``vllm:prefix_cache_hits``)."""
    preemptions: int = 0
    received: tuple[ReceivedRequest, ...] = field(default=())


class SlotEngine(AdapterRegistry):
    """Registry plus scheduler of one replica; runs inside that replica's event loop."""

    def __init__(self, config: SimConfig) -> None:
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.lora_requests: dict[str, int] = {}
        """Adapter -> requests producing tokens, in order of their first token."""
        self.cache = PrefixCache(config.kv_cache_blocks, config.block_size)
        self.requests_by_model: Counter[str] = Counter()
        self.finished_by_reason: Counter[str] = Counter()
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.computed_tokens = 0
        """Prompt tokens prefilled (not found in the cache), preempted ones' included."""
        self.preemptions = 0
        self.busy_until = 0.0
        self.stall_total = 0.0
        """Seconds of stalls so far: a running request's tokens move back by those
        since it was scheduled."""
        self._ids = itertools.count(1)
        super().__init__(config)

    # Requests.

    def submit(
        self,
        model: str,
        adapter: str | None,
        prompt_tokens: int = 1,
        planned_tokens: int = 1,
        *,
        token_ids: Sequence[int] | None = None,
        cache_salt: str | None = None,
        hashes: list[BlockHash] | None = None,
    ) -> SimRequest:
        """Queue a request; await ``request.admitted`` for its start time.

        The prompt's block hashes come from ``hashes`` (computed by the caller with
        :func:`~mol_testkit.simulator.kvcache.block_hashes`), else from ``token_ids``
        (``prompt_tokens`` is then their count); with neither, the prompt shares no
        block with any other.
        """
        loop = asyncio.get_running_loop()
        rid = f"{next(self._ids)}"
        if hashes is None and token_ids is not None:
            prompt_tokens = len(token_ids)
            hashes = block_hashes(
                token_ids, self.config.block_size, self.lora_key(adapter), cache_salt
            )
        request = SimRequest(
            id=rid, model=model, adapter=adapter, arrival=loop.time(),
            admitted=loop.create_future(), prompt_tokens=prompt_tokens,
            planned_tokens=planned_tokens, hashes=hashes or [], token_ids=token_ids,
            cache_salt=cache_salt,
        )  # fmt: skip
        self.requests_by_model[model] += 1
        self.waiting.append(request)
        self._schedule(loop.time())
        self._notify()
        return request

    def finish(self, request: SimRequest, reason: FinishReason) -> None:
        """Take a request out of the engine (done, cut short or aborted)."""
        if request.state == "finished":
            return
        if request.state == "waiting":
            self.waiting.remove(request)
            if not request.admitted.done():
                request.admitted.cancel()
        else:
            self._leave_batch(request)
        request.state = "finished"
        self.finished_by_reason[reason] += 1
        self._schedule(asyncio.get_running_loop().time())
        self._notify()

    def token(self, request: SimRequest) -> None:
        """Record one generated token (the first one makes its adapter show as running).

        A token that needs a new KV block and finds none preempts the newest running
        request (possibly this one) until one is free.
        """
        if request.state != "running":
            return
        request.generated += 1
        tokens = request.prompt_tokens + request.generated
        if tokens > request.blocks * self.config.block_size:
            while (got := self.cache.allocate(1)) is None:
                victim = self.running[-1]
                self._preempt(victim)
                if victim is request:
                    return
            request.block_ids.extend(got)
        if request.emitting:
            return
        request.emitting = True
        if request.adapter is not None:
            self.lora_requests[request.adapter] = self.lora_requests.get(request.adapter, 0) + 1
            self._notify()

    def due(self, request: SimRequest) -> float:
        """When the request's next token is due (it must be running)."""
        cfg = self.config
        steps = request.generated - request.resumed_at
        return (
            request.ready + cfg.ttft_s + steps * cfg.itl_s + self.stall_total - request.stall_base
        )

    async def wait_due(self, request: SimRequest, extra_tokens: int = 0) -> bool:
        """Sleep until the next token (plus ``extra_tokens`` more) is due, following
        stalls and preemptions; False if the request finished meanwhile."""
        loop = asyncio.get_running_loop()
        while True:
            if request.state == "finished":
                return False
            if request.state == "waiting":
                await request.admitted
                continue
            wait = self.due(request) + extra_tokens * self.config.itl_s - loop.time()
            if wait <= 1e-9:
                return True
            await asyncio.sleep(wait)

    # KV cache.

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    @property
    def usable_blocks(self) -> int:
        return self.cache.usable

    def kv_blocks_used(self) -> int:
        """Blocks held by running requests (a shared prefix block counts once)."""
        return self.cache.usable - self.cache.num_free()

    def kv_cache_usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: the share of usable blocks in use."""
        return self.cache.usage()

    # Scheduler.

    def _running_adapters(self) -> Counter[str]:
        return Counter(r.adapter for r in self.running if r.adapter is not None)

    def _stall(self, now: float, seconds: float) -> None:
        if seconds > 0:
            self.busy_until = max(now, self.busy_until) + seconds
            self.stall_total += seconds

    def _schedule(self, now: float) -> None:
        active = self._running_adapters()
        cfg = self.config
        for request in list(self.waiting):
            if len(self.running) >= cfg.max_num_seqs:
                break
            adapter = request.adapter
            budget_full = len(active) >= cfg.max_loras
            if adapter is not None and adapter not in active and budget_full:
                continue  # skipped, as vLLM does: later requests may still run
            tokens = request.prompt_tokens + request.generated
            hit = self.cache.lookup(request.hashes, tokens) if cfg.enable_prefix_caching else []
            new = self.blocks_for(tokens) - len(hit)
            if not self.cache.can_allocate(hit, new):
                break  # no room in the KV cache: first come, first served
            self.cache.take(hit)
            fresh = self.cache.allocate(new)
            assert fresh is not None
            request.block_ids = hit + fresh
            if cfg.enable_prefix_caching:
                self.cache.store(request.block_ids, request.hashes, request.token_ids,
                                 self._lora_ref(adapter), request.cache_salt)  # fmt: skip
                if request.preemptions == 0:  # vLLM counts a preempted one apart
                    request.cached_tokens = len(hit) * cfg.block_size
                    self.prefix_queries += request.prompt_tokens
                    self.prefix_hits += request.cached_tokens
            computed = tokens - len(hit) * cfg.block_size
            self.computed_tokens += computed
            self.waiting.remove(request)
            self.running.append(request)
            request.state = "running"
            if adapter is not None:
                self._stall(now, self.activate(adapter, active))
                active[adapter] += 1
            self._stall(now, computed * cfg.prefill_s_per_token)
            request.ready = max(now, self.busy_until)
            request.stall_base = self.stall_total
            request.resumed_at = request.generated
            request.admitted.set_result(request.ready)

    def _leave_batch(self, request: SimRequest) -> None:
        self.running.remove(request)
        adapter = request.adapter
        if adapter is not None and adapter in self.gpu_slots:  # vLLM touches them every step
            self.gpu_slots.move_to_end(adapter)
        self.cache.release(request.block_ids)
        request.block_ids = []
        if request.adapter is not None and request.emitting:
            left = self.lora_requests[request.adapter] - 1
            if left:
                self.lora_requests[request.adapter] = left
            else:
                del self.lora_requests[request.adapter]
        request.emitting = False

    def _preempt(self, request: SimRequest) -> None:
        """Back to the head of the queue; it recomputes its tokens when rescheduled."""
        self._leave_batch(request)
        request.state = "waiting"
        request.preemptions += 1
        self.preemptions += 1
        request.admitted = asyncio.get_running_loop().create_future()
        self.waiting.insert(0, request)
        self._notify()

    # KV events.

    def enable_kv_events(self) -> None:
        """Publish KV-cache events (vLLM's ``--kv-events-config``); take them with
        :meth:`publish_kv_events`."""
        if self.cache.events is None:
            self.cache.events = []

    def publish_kv_events(self, ts: float) -> KVEventBatch | None:
        """The events since the last call as one batch (as vLLM's engine core
        publishes a step's events), or None when there are none."""
        events = self.cache.events
        if not events:
            return None
        self.cache.events = []
        return KVEventBatch(ts, events)

    def _lora_ref(self, adapter: str | None) -> tuple[int, str] | None:
        info = self.adapters.get(adapter) if adapter is not None else None
        return (info.int_id, adapter) if info is not None and adapter is not None else None

    # Observation.

    def waiting_deferred(self) -> int:
        active = set(self._running_adapters())
        full = len(active) >= self.config.max_loras
        return sum(
            1 for r in self.waiting if r.adapter is not None and r.adapter not in active and full
        )

    def snapshot(self) -> ReplicaState:
        return ReplicaState(
            running=len(self.running),
            waiting=len(self.waiting),
            waiting_deferred=self.waiting_deferred(),
            registered={name: info.path for name, info in self.adapters.items()},
            gpu_slots=list(self.gpu_slots),
            cpu_adapters=list(self.cpu_cache),
            active_adapters=list(self.lora_requests),
            requests_by_model=dict(self.requests_by_model),
            finished_by_reason=dict(self.finished_by_reason),
            slot_loads=dict(self.slot_loads),
            cpu_loads=dict(self.cpu_loads),
            kv_blocks_used=self.kv_blocks_used(),
            cached_blocks=len(self.cache.cached),
            prefix_cache_queries=self.prefix_queries,
            prefix_cache_hits=self.prefix_hits,
            preemptions=self.preemptions,
        )
