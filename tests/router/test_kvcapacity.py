"""bench/_kvcapacity.py: replicas' KV blocks from a model's shape and vLLM's KV budget.

The real CPU engine's block count is checked in tests/e2e/test_simulator_conformance.py;
here the published H100 figure and the formula's parts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _fleet import FleetShape  # noqa: E402
from _kvcapacity import (  # noqa: E402
    GIB,
    H100_AVAILABLE_KV_GIB,
    H100_LLAMA3_8B_BLOCKS,
    LLAMA3_8B_BF16,
    KvShape,
    available_kv_bytes,
    kv_blocks,
)
from mol_platform.apps.demo.model import DemoModelConfig  # noqa: E402
from mol_platform.apps.demo.tokenizer import BOS, EOS, PAD  # noqa: E402

# meta-llama/Meta-Llama-3-8B-Instruct's config.json, the fields the KV size reads.
LLAMA3_8B_CONFIG = {
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_hidden_layers": 32, "torch_dtype": "bfloat16", "intermediate_size": 14336,
}  # fmt: skip


def test_llama3_8b_costs_128_kib_of_kv_a_token() -> None:
    shape = KvShape.from_config(LLAMA3_8B_CONFIG)
    assert shape == LLAMA3_8B_BF16
    assert shape.bytes_per_token == 128 * 1024
    assert KvShape.from_config(LLAMA3_8B_CONFIG, dtype="fp8").bytes_per_token == 64 * 1024


def test_the_h100_budget_is_vllms_profile_and_gives_the_bench_default() -> None:
    # total x utilisation - weights - peak activation - non-torch, as vLLM logged them
    budget = available_kv_bytes(79.18, 0.9, 14.99, 4.76, 0.13)
    assert abs(budget / GIB - H100_AVAILABLE_KV_GIB) < 0.01
    assert H100_LLAMA3_8B_BLOCKS == 26_306  # 420,896 tokens in blocks of 16
    assert kv_blocks(LLAMA3_8B_BF16, budget) in range(26_300, 26_312)
    assert FleetShape().kv_cache_blocks == H100_LLAMA3_8B_BLOCKS
    import routing

    assert routing.parse_args([]).kv_cache_blocks == H100_LLAMA3_8B_BLOCKS


def test_demo_model_on_the_cpu_engine() -> None:
    """The demo model as the e2e engine serves it (--dtype float32, 1 GiB of KV, the
    CPU backend's 128-token blocks): 2 KiB a token, 4,096 blocks."""
    config = DemoModelConfig().hf_config({BOS: 1, EOS: 2, PAD: 0})
    shape = KvShape.from_config(config, dtype="float32")
    assert shape == KvShape(layers=2, kv_heads=2, head_dim=64, dtype_bytes=4)
    assert kv_blocks(shape, GIB, 128) == 4096


def test_defaults_and_refusals() -> None:
    no_kv_heads = {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4}
    assert KvShape.from_config(no_kv_heads, dtype="float16") == KvShape(4, 8, 64, 2)
    with pytest.raises(ValueError, match="unknown KV dtype"):
        KvShape.from_config(no_kv_heads)  # no dtype anywhere
    with pytest.raises(ValueError, match="num_hidden_layers"):
        KvShape.from_config({"num_attention_heads": 8, "hidden_size": 64}, dtype="float16")
    with pytest.raises(ValueError, match="no memory left"):
        available_kv_bytes(24.0, 0.9, 16.0, 4.0, 2.0)
    assert kv_blocks(LLAMA3_8B_BF16, 16 * 128 * 1024 - 1) == 0  # a block is whole or none
