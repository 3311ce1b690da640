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
    """Engine stall when an adapter enters a GPU slot: the copy from host memory.
    ~0.01 s stands for a rank-16 all-linear Llama-3-8B LoRA (84 MB in BF16) on one
    H100 (PCIe host-to-device copy plus vLLM's slot setup)."""
    lora_disk_load_s: float = 0.0
    """Further stall when that adapter is not in host memory (``max_cpu_loras``) and
    is read from disk first; ~0.1 s stands for the same LoRA from a local NVMe drive."""
    prefill_s_per_token: float = 0.0
    """Engine time per prompt token not found in the prefix cache (a stall of the whole
    batch, before the request's first token). ~5e-5 s stands for Llama-3-8B in BF16 on
    one H100 SXM (about 20,000 prompt tokens a second at long prompts)."""
    enable_prefix_caching: bool = True
    """Automatic prefix caching (vLLM v1's default; ``--no-enable-prefix-caching``)."""
    ttft_s: float = 0.0
    """Time to first token, counted from the moment a request runs."""
    itl_s: float = 0.0
    """Inter-token latency."""
    output_tokens: int = 16
    """Length of every generated reply, unless ``max_tokens`` cuts it short."""
    block_size: int = 16
    """KV-cache block size in tokens (``--block-size``): 16 on GPUs, vLLM's CPU build
    uses 128. Prefix caching shares whole blocks only."""
    kv_cache_blocks: int = 4096
    """KV-cache blocks (vLLM's ``num_gpu_blocks``, set by the cache size)."""
    tool_call_parser: str | None = "hermes"
    """``--enable-auto-tool-choice --tool-call-parser``; None answers requests with
    ``tools`` (and ``tool_choice`` other than ``none``) 400 as vLLM does without it."""
    detailed_metrics: bool = True
    """Expose every vLLM family; off, ``/metrics`` carries only the scheduler families
    (requests running/waiting, KV-cache usage and config, ``lora_requests_info``,
    ``mol_engine_adapter_loads_total``), ~10x cheaper to scrape for many-replica runs."""
    check_adapter_paths: bool = True
    """Require ``<path>/adapter_config.json`` on disk when an adapter is loaded
    (404 ``NotFoundError`` otherwise, as vLLM does); off, any path is accepted (an
    adapter catalog that is not on this machine)."""

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
        for name in ("lora_load_s", "lora_disk_load_s", "prefill_s_per_token", "ttft_s", "itl_s"):
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
