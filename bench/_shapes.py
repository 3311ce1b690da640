"""Model and adapter shapes of the catalog benchmark's seed: real Llama-3-8B ones and small.

At least a third of the seeded adapters are what teams fine-tune most: an all-linear
rank-16 LoRA of Llama-3-8B (q, k, v, o, gate, up, down x 32 layers x A/B = 448 tensors,
~35 KB of shape-map JSON). The rest are a spread of small and medium LoRAs (q/v up to
all-linear, ranks 8-32) of small 4-layer bases. Adapter configs carry every field PEFT
writes, with the dropout varying by team, so the seed has several distinct configs per
shape, as a real catalog does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dims:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int

    @property
    def kv_out(self) -> int:
        return self.hidden // self.heads * self.kv_heads


LLAMA_3_8B = Dims(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256)
# A small Llama-shaped base: 4 layers, hidden 256, 4 heads / 2 KV heads (GQA).
SMALL = Dims(hidden=256, layers=4, heads=4, kv_heads=2, ffn=512, vocab=2048)
BIG_BASE = "llama-3-8b"  # registered with LLAMA_3_8B's shapes; the other bases are SMALL

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
ALL_LINEAR = (*ATTENTION, "gate_proj", "up_proj", "down_proj")
_PATH = {m: f"self_attn.{m}" for m in ATTENTION} | {m: f"mlp.{m}" for m in ALL_LINEAR[4:]}


@dataclass(frozen=True)
class Family:
    """One adapter recipe: which base shape, which modules, which rank."""

    dims: Dims
    targets: tuple[str, ...]
    rank: int
    weight_bytes: int = 4  # per parameter: F32, BF16 for the 8B ones


LLAMA_8B_ALL_LINEAR_R16 = Family(LLAMA_3_8B, ALL_LINEAR, 16, weight_bytes=2)
SMALL_FAMILIES = (Family(SMALL, ("q_proj", "v_proj"), 8), Family(SMALL, ("q_proj", "v_proj"), 16),
                  Family(SMALL, ATTENTION, 16), Family(SMALL, ALL_LINEAR, 8),
                  Family(SMALL, ATTENTION, 32))
DROPOUTS = (0.0, 0.05, 0.1)


def base_config(dims: Dims) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": dims.hidden, "num_hidden_layers": dims.layers,
            "num_attention_heads": dims.heads, "num_key_value_heads": dims.kv_heads,
            "intermediate_size": dims.ffn, "vocab_size": dims.vocab}


def _module_shape(dims: Dims, module: str) -> tuple[int, int]:
    """(out, in) of a linear layer."""
    return {"q_proj": (dims.hidden, dims.hidden), "k_proj": (dims.kv_out, dims.hidden),
            "v_proj": (dims.kv_out, dims.hidden), "o_proj": (dims.hidden, dims.hidden),
            "gate_proj": (dims.ffn, dims.hidden), "up_proj": (dims.ffn, dims.hidden),
            "down_proj": (dims.hidden, dims.ffn)}[module]


def base_tensors(dims: Dims) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"model.embed_tokens.weight": [dims.vocab, dims.hidden],
                                 "model.norm.weight": [dims.hidden],
                                 "lm_head.weight": [dims.vocab, dims.hidden]}
    for layer in range(dims.layers):
        for module in ALL_LINEAR:
            out[f"model.layers.{layer}.{_PATH[module]}.weight"] = list(
                _module_shape(dims, module))
        out[f"model.layers.{layer}.input_layernorm.weight"] = [dims.hidden]
        out[f"model.layers.{layer}.post_attention_layernorm.weight"] = [dims.hidden]
    return out


def lora_shapes(family: Family) -> dict[str, tuple[int, ...]]:
    """PEFT tensor names and shapes of the family's LoRA."""
    out: dict[str, tuple[int, ...]] = {}
    r = family.rank
    for layer in range(family.dims.layers):
        for module in family.targets:
            dim_out, dim_in = _module_shape(family.dims, module)
            stem = f"base_model.model.model.layers.{layer}.{_PATH[module]}"
            out[f"{stem}.lora_A.weight"] = (r, dim_in)
            out[f"{stem}.lora_B.weight"] = (dim_out, r)
    return out


def weights_size(family: Family) -> int:
    """Bytes of the family's adapter_model.safetensors (header ~1 KB)."""
    params = sum(a * b for a, b in lora_shapes(family).values())
    return family.weight_bytes * params + 1024


def adapter_config(base: str, rank: int, targets: tuple[str, ...] = ("q_proj", "v_proj"),
                   dropout: float = 0.0) -> dict[str, Any]:
    """adapter_config.json as PEFT writes it."""
    return {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base,
            "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
            "init_lora_weights": True, "layer_replication": None, "layers_pattern": None,
            "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 2 * rank,
            "lora_dropout": dropout, "megatron_config": None, "megatron_core": "megatron.core",
            "modules_to_save": None, "peft_type": "LORA", "r": rank, "rank_pattern": {},
            "revision": None, "target_modules": sorted(targets), "task_type": "CAUSAL_LM",
            "use_dora": False, "use_rslora": False}
