"""A synthetic Llama-like base model and LoRA adapters for it, built in memory.

Tests of the compatibility checker, the catalog and (later) the router need base
shapes and adapter files with exact, chosen dimensions — GQA or not, other hidden
sizes, more layers — without building a real model. ``SyntheticLlama`` describes the
base; ``lora_files`` writes a real ``adapter_model.safetensors`` for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from safetensors.numpy import save

PEFT_PREFIX = "base_model.model.model.layers"


@dataclass(frozen=True)
class SyntheticLlama:
    """GQA by default: 4 attention heads, 2 KV heads, head_dim 16."""

    name: str = "tiny-llama"
    revision: str = "r1"
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    inter: int = 128
    vocab: int = 100
    layers: int = 2

    def shapes(self) -> dict[str, tuple[int, int]]:
        """Per module kind, the base weight's (out_features, in_features)."""
        hd = self.hidden // self.heads
        return {
            "self_attn.q_proj": (self.hidden, self.hidden),
            "self_attn.k_proj": (self.kv_heads * hd, self.hidden),
            "self_attn.v_proj": (self.kv_heads * hd, self.hidden),
            "self_attn.o_proj": (self.hidden, self.hidden),
            "mlp.gate_proj": (self.inter, self.hidden),
            "mlp.up_proj": (self.inter, self.hidden),
            "mlp.down_proj": (self.hidden, self.inter),
        }

    def config(self) -> dict[str, Any]:
        """The base's config.json."""
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "hidden_size": self.hidden, "num_hidden_layers": self.layers,
                "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
                "tie_word_embeddings": False}

    def tensors(self) -> dict[str, list[int]]:
        """The base's safetensors header as {tensor name: shape}."""
        out = {"model.embed_tokens.weight": [self.vocab, self.hidden],
               "model.norm.weight": [self.hidden], "lm_head.weight": [self.vocab, self.hidden]}
        for i in range(self.layers):
            out[f"model.layers.{i}.input_layernorm.weight"] = [self.hidden]
            for kind, dims in self.shapes().items():
                out[f"model.layers.{i}.{kind}.weight"] = list(dims)
        return out

    def base_body(self) -> dict[str, Any]:
        """The body of ``POST /v1/base-models`` for this base."""
        return {"name": self.name, "revision": self.revision,
                "architecture": "LlamaForCausalLM", "config": self.config(),
                "tensors": self.tensors()}

    def lora_files(
        self,
        rank: int = 8,
        modules: Sequence[str] = ("q_proj", "v_proj"),
        *,
        seed: int = 0,
        layers: int | None = None,
        config: Mapping[str, Any] | None = None,
        extra: Mapping[str, np.ndarray] | None = None,
    ) -> tuple[bytes, bytes]:
        """(adapter_config.json, adapter_model.safetensors) bytes of a PEFT LoRA for this base.

        ``modules`` are short names (``q_proj``); ``layers`` may exceed the base's to build
        an adapter for a deeper model; ``config`` overrides adapter_config.json keys.
        """
        rng = np.random.default_rng(seed)
        by_short = {kind.split(".")[-1]: (kind, dims) for kind, dims in self.shapes().items()}
        tensors: dict[str, np.ndarray] = {}
        for i in range(self.layers if layers is None else layers):
            for m in modules:
                kind, (out, inp) = by_short[m]
                tensors[f"{PEFT_PREFIX}.{i}.{kind}.lora_A.weight"] = rng.standard_normal(
                    (rank, inp)).astype(np.float32)
                tensors[f"{PEFT_PREFIX}.{i}.{kind}.lora_B.weight"] = rng.standard_normal(
                    (out, rank)).astype(np.float32)
        tensors.update(extra or {})
        cfg: dict[str, Any] = {
            "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
            "target_modules": list(modules), "base_model_name_or_path": self.name,
            "bias": "none", "use_dora": False, "modules_to_save": None,
        }
        cfg.update(config or {})
        return json.dumps(cfg).encode(), save(tensors)
