"""The adapter side of one replica: the registry, GPU slots and the host-memory tier.

As in vLLM, an adapter loaded through ``/v1/load_lora_adapter`` (or ``--lora-modules``)
is read into host memory at once (``max_cpu_loras`` of them, least recently used
evicted); one a resolver plugin finds (``dynamic_loras``) is read on first use. Entering
a GPU slot copies it from host memory (``lora_load_s``, cheap); one that is not in host
memory is read from disk first (``lora_disk_load_s``, costly). Both stall the whole
engine step, as vLLM's model runner activates adapters before it runs the batch.
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

from mol_testkit.simulator.config import SimConfig


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


class AdapterRegistry:
    """Known adapters, their GPU slots and host-memory copies, and load counts."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.adapters: dict[str, AdapterInfo] = {}
        self.gpu_slots: OrderedDict[str, None] = OrderedDict()
        """Adapters in GPU slots, least recently used first."""
        self.cpu_cache: OrderedDict[str, None] = OrderedDict()
        self.slot_loads: Counter[str] = Counter()
        self.cpu_loads: Counter[str] = Counter()
        self.total_loads = {"gpu": 0, "cpu": 0}
        """Slot entries (gpu: a copy from host memory) and disk reads into host memory
        (cpu), for ``mol_engine_adapter_loads_total``."""
        self.listeners: list[Callable[[], None]] = []
        self._lora_ids = itertools.count(1)
        for name, path in config.lora_modules.items():
            try:
                self.load_adapter(name, path)
            except EngineError as exc:
                raise ValueError(f"lora_modules: {exc.message}") from None

    def _running_adapters(self) -> Counter[str]:
        raise NotImplementedError

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()

    def resolve_model(self, model: str | None) -> str | None:
        """The adapter a request's ``model`` names (None: the base model).

        Unknown names are registered on the fly when ``dynamic_loras`` is set, as
        vLLM does when a resolver plugin finds them (read from disk on first use);
        otherwise 404 like vLLM.
        """
        if not model or model == self.config.model:
            return None
        if model in self.adapters:
            return model
        if self.config.dynamic_loras:
            self.adapters[model] = AdapterInfo(
                model, f"/sim/lora-cache/{model}", next(self._lora_ids), dynamic=True
            )
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

    def lora_key(self, adapter: str | None) -> tuple[str, str] | None:
        """(name, path) of an adapter: its part of the prefix cache's block keys."""
        if adapter is None:
            return None
        info = self.adapters.get(adapter)
        return (adapter, info.path if info else "")

    def activate(self, adapter: str, active: Counter[str]) -> float:
        """Put ``adapter`` in a GPU slot (LRU eviction of an idle one); the seconds the
        engine stalls for it (0 if it is already in a slot)."""
        if adapter in self.gpu_slots:
            self.gpu_slots.move_to_end(adapter)
            return 0.0
        if len(self.gpu_slots) >= self.config.max_loras:
            idle = next(name for name in self.gpu_slots if name not in active)
            del self.gpu_slots[idle]
        cost = self.config.lora_load_s
        if self._touch_cpu(adapter):
            cost += self.config.lora_disk_load_s
        self.gpu_slots[adapter] = None
        self.slot_loads[adapter] += 1
        self.total_loads["gpu"] += 1
        return cost

    def _touch_cpu(self, adapter: str) -> bool:
        """Mark ``adapter`` used in host memory; True when it had to be read from disk."""
        if adapter in self.cpu_cache:
            self.cpu_cache.move_to_end(adapter)
            return False
        if len(self.cpu_cache) >= self.config.cpu_capacity:
            victim = next((n for n in self.cpu_cache if n not in self.gpu_slots), None)
            if victim is not None:
                del self.cpu_cache[victim]
        self.cpu_cache[adapter] = None
        self.cpu_loads[adapter] += 1
        self.total_loads["cpu"] += 1
        return True
