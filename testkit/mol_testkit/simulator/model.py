"""The engine model: adapter registry, GPU/CPU adapter slots and the batch scheduler.

No HTTP here. It follows vLLM v1's scheduler in the ways a router can observe: a
request runs when the batch has room (``max_num_seqs``) and, if it uses an adapter,
that adapter is already in the running batch or fewer than ``max_loras`` distinct
adapters are running; otherwise it waits (requests behind it may overtake it, as
vLLM skips LoRA-blocked requests). An adapter entering a GPU slot evicts the least
recently used idle one and costs ``lora_load_s`` before its requests produce tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Literal

from mol_testkit.simulator.config import SimConfig

FinishReason = Literal["stop", "length", "abort", "error"]


class EngineError(Exception):
    """A request the engine refuses; carries vLLM's error fields."""

    def __init__(
        self,
        message: str,
        status: HTTPStatus,
        err_type: str,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param


@dataclass(frozen=True)
class AdapterInfo:
    """A registered adapter, as vLLM's ``LoRARequest`` would hold it."""

    name: str
    path: str
    int_id: int
    dynamic: bool = False


@dataclass(eq=False)
class SimRequest:
    """One request inside the engine."""

    id: str
    model: str
    adapter: str | None
    arrival: float
    admitted: asyncio.Future[float]
    """Resolves, when the request is scheduled, to the loop time its slot is ready."""
    prompt_tokens: int = 1
    planned_tokens: int = 1
    """Tokens it will generate: its KV-cache blocks are reserved for all of them."""
    generated: int = 0
    emitting: bool = False
    """Has produced its first token (from then on vLLM lists its adapter as running)."""
    blocks: int = 0
    state: Literal["waiting", "running", "finished"] = "waiting"


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
    """How often each adapter entered a GPU slot."""
    cpu_loads: dict[str, int]
    """How often each adapter was read into host memory (first load or after eviction)."""
    kv_blocks_used: int = 0
    """KV-cache blocks holding the tokens of running requests."""
    received: tuple[ReceivedRequest, ...] = field(default=())


class SlotEngine:
    """Registry plus scheduler of one replica; runs inside that replica's event loop."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.adapters: dict[str, AdapterInfo] = {}
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.gpu_slots: OrderedDict[str, float] = OrderedDict()
        self.cpu_cache: OrderedDict[str, None] = OrderedDict()
        self.lora_requests: dict[str, int] = {}
        """Adapter -> requests producing tokens, in order of their first token."""
        self.reserved_blocks = 0
        self.requests_by_model: Counter[str] = Counter()
        self.finished_by_reason: Counter[str] = Counter()
        self.slot_loads: Counter[str] = Counter()
        self.cpu_loads: Counter[str] = Counter()
        self.total_loads = {"gpu": 0, "cpu": 0}
        """All slot (gpu) and host-memory (cpu) loads, for ``mol_sim_adapter_loads_total``."""
        self.listeners: list[Callable[[], None]] = []
        self._ids = itertools.count(1)
        self._lora_ids = itertools.count(1)
        for name, path in config.lora_modules.items():
            try:
                self.load_adapter(name, path)
            except EngineError as exc:
                raise ValueError(f"lora_modules: {exc.message}") from None

    # Registry (vLLM's OpenAIServingModels).

    def resolve_model(self, model: str | None) -> str | None:
        """The adapter a request's ``model`` names (None: the base model).

        Unknown names are registered on the fly when ``dynamic_loras`` is set, as
        vLLM does when a resolver plugin finds them; otherwise 404 like vLLM.
        """
        if not model or model == self.config.model:
            return None
        if model in self.adapters:
            return model
        if self.config.dynamic_loras:
            self.adapters[model] = AdapterInfo(
                model, f"/sim/lora-cache/{model}", next(self._lora_ids), dynamic=True
            )
            self._touch_cpu(model)
            return model
        raise EngineError(
            f"The model `{model}` does not exist. Valid aliases: {self.config.model}.",
            HTTPStatus.NOT_FOUND,
            "NotFoundError",
            param="model",
        )

    def load_adapter(self, name: str, path: str, load_inplace: bool = False) -> str:
        """``POST /v1/load_lora_adapter``: same checks, messages and codes as vLLM."""
        if not name or not path:
            raise EngineError(
                "Both 'lora_name' and 'lora_path' must be provided.",
                HTTPStatus.BAD_REQUEST,
                "InvalidUserInput",
            )
        if name == self.config.model:
            raise EngineError(
                f"The lora adapter '{name}' conflicts with a served base model.",
                HTTPStatus.BAD_REQUEST,
                "InvalidUserInput",
            )
        previous = self.adapters.get(name)
        if previous is not None and not load_inplace:
            raise EngineError(
                f"The lora adapter '{name}' has already been loaded. If you want to load "
                "the adapter in place, set 'load_inplace' to True.",
                HTTPStatus.BAD_REQUEST,
                "InvalidUserInput",
            )
        if self.config.check_adapter_paths and not (Path(path) / "adapter_config.json").is_file():
            raise EngineError(
                f"Loading lora {name} failed: No adapter found for {path}",
                HTTPStatus.NOT_FOUND,
                "NotFoundError",
            )
        int_id = previous.int_id if previous else next(self._lora_ids)
        self.adapters[name] = AdapterInfo(name, path, int_id)
        if previous is not None:  # new weights: the old copy in a slot is stale
            self.cpu_cache.pop(name, None)
            if name not in self._running_adapters():
                self.gpu_slots.pop(name, None)
        self._touch_cpu(name)
        self._notify()
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload_adapter(self, name: str) -> str:
        """``POST /v1/unload_lora_adapter``."""
        if not name:
            raise EngineError(
                "'lora_name' needs to be provided to unload a LoRA adapter.",
                HTTPStatus.BAD_REQUEST,
                "InvalidUserInput",
            )
        if name not in self.adapters:
            raise EngineError(
                f"The lora adapter '{name}' cannot be found.",
                HTTPStatus.NOT_FOUND,
                "NotFoundError",
            )
        del self.adapters[name]
        self.cpu_cache.pop(name, None)
        if name not in self._running_adapters():
            self.gpu_slots.pop(name, None)
        self._notify()
        return f"Success: LoRA adapter '{name}' removed successfully."

    # Scheduler.

    def submit(
        self, model: str, adapter: str | None, prompt_tokens: int = 1, planned_tokens: int = 1
    ) -> SimRequest:
        """Queue a request; await ``request.admitted`` for its start time."""
        loop = asyncio.get_running_loop()
        request = SimRequest(
            id=f"{next(self._ids)}", model=model, adapter=adapter,
            arrival=loop.time(), admitted=loop.create_future(),
            prompt_tokens=prompt_tokens, planned_tokens=planned_tokens,
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
            self.running.remove(request)
            self.reserved_blocks -= request.blocks
        request.state = "finished"
        self.finished_by_reason[reason] += 1
        if request.adapter is not None and request.emitting:
            left = self.lora_requests[request.adapter] - 1
            if left:
                self.lora_requests[request.adapter] = left
            else:
                del self.lora_requests[request.adapter]
        self._schedule(asyncio.get_running_loop().time())
        self._notify()

    def token(self, request: SimRequest) -> None:
        """Record one generated token (the first one makes its adapter show as running)."""
        request.generated += 1
        if request.emitting:
            return
        request.emitting = True
        if request.adapter is not None:
            self.lora_requests[request.adapter] = self.lora_requests.get(request.adapter, 0) + 1
            self._notify()

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    @property
    def usable_blocks(self) -> int:
        return self.config.kv_cache_blocks - 1  # vLLM keeps one null block

    def kv_blocks_used(self) -> int:
        """Blocks holding the prompt and generated tokens of running requests."""
        held = (self.blocks_for(r.prompt_tokens + r.generated) for r in self.running)
        return min(self.usable_blocks, sum(held))

    def kv_cache_usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: the share of usable blocks in use."""
        return self.kv_blocks_used() / self.usable_blocks

    def _running_adapters(self) -> Counter[str]:
        return Counter(r.adapter for r in self.running if r.adapter is not None)

    def _schedule(self, now: float) -> None:
        active = self._running_adapters()
        for request in list(self.waiting):
            if len(self.running) >= self.config.max_num_seqs:
                break
            adapter = request.adapter
            budget_full = len(active) >= self.config.max_loras
            if adapter is not None and adapter not in active and budget_full:
                continue  # skipped, as vLLM does: later requests may still run
            need = min(
                self.usable_blocks,
                self.blocks_for(request.prompt_tokens + request.planned_tokens),
            )
            if self.reserved_blocks + need > self.usable_blocks:
                break  # no room in the KV cache: first come, first served
            self.reserved_blocks += need
            request.blocks = need
            self.waiting.remove(request)
            self.running.append(request)
            request.state = "running"
            ready = now
            if adapter is not None:
                ready = self._activate(adapter, now, active)
                active[adapter] += 1
            request.admitted.set_result(ready)

    def _activate(self, adapter: str, now: float, active: Counter[str]) -> float:
        """Put ``adapter`` in a GPU slot (LRU eviction of an idle one); its ready time."""
        if adapter in self.gpu_slots:
            self.gpu_slots.move_to_end(adapter)
            return max(self.gpu_slots[adapter], now)
        if len(self.gpu_slots) >= self.config.max_loras:
            idle = next(name for name in self.gpu_slots if name not in active)
            del self.gpu_slots[idle]
        self._touch_cpu(adapter)
        ready = now + self.config.lora_load_s
        self.gpu_slots[adapter] = ready
        self.slot_loads[adapter] += 1
        self.total_loads["gpu"] += 1
        return ready

    def _touch_cpu(self, adapter: str) -> None:
        if adapter in self.cpu_cache:
            self.cpu_cache.move_to_end(adapter)
            return
        if len(self.cpu_cache) >= self.config.cpu_capacity:
            victim = next((n for n in self.cpu_cache if n not in self.gpu_slots), None)
            if victim is not None:
                del self.cpu_cache[victim]
        self.cpu_cache[adapter] = None
        self.cpu_loads[adapter] += 1
        self.total_loads["cpu"] += 1

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
        )

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()
