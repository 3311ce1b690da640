"""Configuration of one simulated vLLM engine replica."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimConfig:
    """What a simulated engine serves and how fast.

    The knobs mirror the vLLM flags they stand for (``--served-model-name``,
    ``--lora-modules``, ``--max-loras``, ``--max-cpu-loras``, ``--max-num-seqs``) plus
    timings that make scheduling effects observable in tests: keep them at a few
    milliseconds so tests stay fast.
    """

    model: str = "base-model"
    """Served base model name (vLLM ``--served-model-name``); the ``model_name`` label."""
    model_path: str | None = None
    """The model folder (``vllm serve MODEL``): ``root`` of the base model card in
    ``/v1/models`` (defaults to ``model``). When it is a folder with a
    ``tokenizer.json``, prompts are counted with that tokenizer and chat requests
    through its chat template, as vLLM does."""
    max_model_len: int = 2048
    lora_modules: Mapping[str, str] = field(default_factory=dict)
    """Adapters registered at start, name -> path (vLLM ``--lora-modules name=path``)."""
    dynamic_loras: bool = False
    """Accept any unknown model name as an adapter, as a resolver plugin that finds
    every name would (the platform's engines see names like ``ns/name@v3``)."""
    max_loras: int = 4
    """GPU adapter slots: distinct adapters that can run in one batch."""
    max_cpu_loras: int | None = None
    """Adapters kept in host memory; more are evicted and re-read from disk on use.
    ``None`` means the same as vLLM's default (``max_loras``)."""
    max_num_seqs: int = 256
    """Batch capacity: requests beyond it wait."""
    lora_load_s: float = 0.0
    """Delay when an adapter enters a GPU slot (its first request waits for it)."""
    ttft_s: float = 0.0
    """Time to first token, counted from the moment a request runs."""
    itl_s: float = 0.0
    """Inter-token latency."""
    output_tokens: int = 16
    """Length of every generated reply, unless ``max_tokens`` cuts it short."""
    block_size: int = 16
    """KV-cache block size in tokens (``--block-size``; vLLM's CPU build uses 128)."""
    kv_cache_blocks: int = 4096
    """KV-cache blocks (vLLM's ``num_gpu_blocks``, set by the cache size)."""
    tool_call_parser: str | None = "hermes"
    """``--enable-auto-tool-choice --tool-call-parser``; None answers requests with
    ``tools`` (and ``tool_choice`` other than ``none``) 400 as vLLM does without it."""
    detailed_metrics: bool = True
    """Expose every vLLM family; off, ``/metrics`` carries only the scheduler families
    (requests running/waiting, KV-cache usage and config, ``lora_requests_info``,
    ``mol_sim_adapter_loads_total``), ~10x cheaper to scrape for many-replica runs."""
    check_adapter_paths: bool = False
    """Require ``<path>/adapter_config.json`` on disk when an adapter is loaded
    (404 ``NotFoundError`` otherwise, as vLLM); off, any path is accepted."""

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("SimConfig.model must be a non-empty served model name")
        for name in (
            "max_model_len", "max_loras", "max_num_seqs", "output_tokens", "block_size",
            "kv_cache_blocks",
        ):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"SimConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.kv_cache_blocks < 2:
            raise ValueError("SimConfig.kv_cache_blocks must be >= 2 (vLLM keeps one in reserve)")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"SimConfig.max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras "
                f"({self.max_loras}), as vLLM requires"
            )
        for name in ("lora_load_s", "ttft_s", "itl_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"SimConfig.{name} must be >= 0 seconds")
        if self.model in self.lora_modules:
            raise ValueError(f"adapter name {self.model!r} conflicts with the base model name")

    @property
    def cpu_capacity(self) -> int:
        """Effective host-memory adapter capacity."""
        return self.max_cpu_loras if self.max_cpu_loras is not None else self.max_loras

    @property
    def root(self) -> str:
        return self.model_path or self.model
