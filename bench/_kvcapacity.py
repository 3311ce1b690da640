"""KV-cache blocks per replica, from a model's shape and the memory left for KV, as vLLM
sizes them: the routing benchmark's `--kv-cache-blocks` is derived here, not asserted.

vLLM keeps every attention layer's K and V for a token, so a token costs
``2 * layers * kv_heads * head_dim * dtype_bytes`` bytes and a block of ``block_size``
tokens that times ``block_size`` (one page in every layer). The engine gives the KV
cache what its memory profile leaves,
``total * gpu_memory_utilization - weights - peak activation - non-torch memory``
("Available KV cache memory" in its startup log; on vLLM's CPU backend the
``VLLM_CPU_KVCACHE_SPACE`` GiB, as set), and makes ``available // block bytes``
blocks of it (``num_gpu_blocks``, one of which it keeps as the null block).

Calibrated against two real engines:

- **Llama-3-8B BF16 on one H100 80 GB** (the benchmark's default replica): vLLM reports
  79.18 GiB total, 71.26 GiB at ``gpu_memory_utilization`` 0.9, weights 14.99 GiB, peak
  activation 4.76 GiB, non-torch 0.13 GiB, "Available KV cache memory: 51.38 GiB" for
  meta-llama/Llama-3.1-8B-Instruct (the Llama-3-8B architecture: 32 layers, 8 KV heads,
  head_dim 128), max-model-len 16000, published in llm-d-benchmark's measurements:
  https://github.com/llm-d/llm-d-benchmark/blob/main/config_explorer/empirical-vllm-memory-results.md
  At 128 KiB a token that is 420,904 tokens, :data:`H100_LLAMA3_8B_BLOCKS` blocks of 16.
- **The vllm-cpu engine the e2e tests run** (the demo model, float32, 1 GiB of
  ``VLLM_CPU_KVCACHE_SPACE``): ``tests/e2e/test_simulator_conformance.py`` checks that
  :func:`kv_blocks` on its config.json gives the ``num_gpu_blocks`` of the engine's
  ``vllm:cache_config_info``, block for block.

Kept free of imports from the rest of bench/ so that a test can load it by path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GIB = 1 << 30
DTYPE_BYTES = {
    "float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}  # fmt: skip
"""Bytes per element of vLLM's ``--dtype`` / ``--kv-cache-dtype`` names."""


@dataclass(frozen=True, slots=True)
class KvShape:
    """What of a model decides its KV bytes per token."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @classmethod
    def from_config(cls, config: Mapping[str, object], dtype: str | None = None) -> KvShape:
        """From a Hugging Face ``config.json`` (a decoder with full attention in every
        layer); ``dtype`` is the engine's KV dtype (its ``--dtype`` when the KV cache
        dtype is ``auto``), else the config's ``torch_dtype``."""

        def number(key: str, default: object = None) -> int:
            value = config.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"config.json: {key!r} must be a positive integer, got {value!r}")
            return value

        heads = number("num_attention_heads")
        name = dtype or config.get("torch_dtype") or config.get("dtype")
        if not isinstance(name, str) or name not in DTYPE_BYTES:
            raise ValueError(f"unknown KV dtype {name!r}; expected one of {sorted(DTYPE_BYTES)}")
        head_dim = config.get("head_dim") or number("hidden_size") // heads
        return cls(
            layers=number("num_hidden_layers"),
            kv_heads=number("num_key_value_heads", heads),
            head_dim=number("head_dim", head_dim),
            dtype_bytes=DTYPE_BYTES[name],
        )


def available_kv_bytes(
    total_gib: float, utilization: float, weights_gib: float, activation_gib: float,
    non_torch_gib: float,
) -> int:  # fmt: skip
    """vLLM's KV budget on a GPU: its share of the device less what the profile used."""
    left = total_gib * utilization - weights_gib - activation_gib - non_torch_gib
    if left <= 0:
        raise ValueError(f"no memory left for the KV cache ({left:.2f} GiB)")
    return int(left * GIB)


def kv_blocks(shape: KvShape, available_bytes: int, block_size: int = 16) -> int:
    """Blocks of ``block_size`` tokens in ``available_bytes`` (vLLM's ``num_gpu_blocks``)."""
    if block_size < 1 or available_bytes < 0:
        raise ValueError("block_size must be >= 1 and available_bytes >= 0")
    return available_bytes // (block_size * shape.bytes_per_token)


LLAMA3_8B_BF16 = KvShape(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
"""meta-llama/Meta-Llama-3-8B(-Instruct), also Llama-3.1-8B: 128 KiB of KV a token."""
H100_AVAILABLE_KV_GIB = 51.38
"""vLLM's "Available KV cache memory" for it on one H100 80 GB (see the module docstring)."""
H100_LLAMA3_8B_BLOCKS = kv_blocks(LLAMA3_8B_BF16, int(H100_AVAILABLE_KV_GIB * GIB), 16)
"""The routing benchmark's default ``--kv-cache-blocks`` (26,306 blocks of 16 tokens)."""
