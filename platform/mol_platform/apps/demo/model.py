"""The tiny random Llama: config.json, generation_config.json, model.safetensors.

Shapes follow Hugging Face's ``LlamaForCausalLM`` with grouped-query attention
(k_proj/v_proj are narrower than q_proj), so adapters for it exercise the same shape
rules a real Llama 3 or Qwen base does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from mol_platform.apps.demo.tokenizer import BOS, EOS, IM_END, PAD, write_tokenizer

ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
LINEAR_MODULES = ATTENTION_MODULES + MLP_MODULES


@dataclass(frozen=True)
class DemoModelConfig:
    """Sizes of the demo base model; the defaults make an ~8 MB float32 model."""

    num_hidden_layers: int = 2
    hidden_size: int = 256
    intermediate_size: int = 512
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    vocab_size: int = 2048
    max_position_embeddings: int = 2048
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def module_shape(self, module: str) -> tuple[int, int]:
        """(out_features, in_features) of a linear module in one decoder layer."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.num_key_value_heads
        shapes = {
            "q_proj": (h, h),
            "k_proj": (kv * self.head_dim, h),
            "v_proj": (kv * self.head_dim, h),
            "o_proj": (h, h),
            "gate_proj": (i, h),
            "up_proj": (i, h),
            "down_proj": (h, i),
        }
        try:
            return shapes[module]
        except KeyError:
            raise ValueError(
                f"unknown module {module!r}; expected one of {', '.join(LINEAR_MODULES)}"
            ) from None

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of model.safetensors with its shape."""
        shapes: dict[str, tuple[int, ...]] = {
            "model.embed_tokens.weight": (self.vocab_size, self.hidden_size),
            "model.norm.weight": (self.hidden_size,),
            "lm_head.weight": (self.vocab_size, self.hidden_size),
        }
        for n in range(self.num_hidden_layers):
            p = f"model.layers.{n}"
            for m in ATTENTION_MODULES:
                shapes[f"{p}.self_attn.{m}.weight"] = self.module_shape(m)
            for m in MLP_MODULES:
                shapes[f"{p}.mlp.{m}.weight"] = self.module_shape(m)
            shapes[f"{p}.input_layernorm.weight"] = (self.hidden_size,)
            shapes[f"{p}.post_attention_layernorm.weight"] = (self.hidden_size,)
        return shapes

    def hf_config(self, token_ids: dict[str, int]) -> dict[str, object]:
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "attention_bias": False,
            "mlp_bias": False,
            "initializer_range": self.init_std,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "use_cache": True,
            "bos_token_id": token_ids[BOS],
            "eos_token_id": token_ids[EOS],
            "pad_token_id": token_ids[PAD],
        }


def random_weights(cfg: DemoModelConfig, seed: int) -> dict[str, np.ndarray]:
    """Normal(0, init_std) matrices and all-ones norms, reproducible from ``seed``."""
    rng = np.random.default_rng([seed, 0xBA5E])
    out: dict[str, np.ndarray] = {}
    for name, shape in cfg.tensor_shapes().items():
        if len(shape) == 1:
            out[name] = np.ones(shape, dtype=np.float32)
        else:
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * cfg.init_std).astype(
                np.float32
            )
    return out


def write_base_model(out: Path, cfg: DemoModelConfig, seed: int) -> Path:
    """Write a Hugging Face model folder (weights, config, tokenizer) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out, seed, cfg.vocab_size)
    (out / "config.json").write_text(json.dumps(cfg.hf_config(ids), indent=2) + "\n")
    generation = {
        "bos_token_id": ids[BOS],
        "eos_token_id": [ids[EOS], ids[IM_END]],
        "pad_token_id": ids[PAD],
    }
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    weights = out / "model.safetensors"
    save_file(random_weights(cfg, seed), str(weights), metadata={"format": "pt"})
    weights.chmod(0o644)  # safetensors writes 0600; engines may run as another user
    return out
