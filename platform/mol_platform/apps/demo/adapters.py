"""PEFT LoRA adapters for the demo base model, written without torch.

PEFT initialises ``lora_B`` to zero, which makes a fresh adapter a no-op; these are
random on both sides and scaled so that each adapter changes greedy output of the
base model: the point of the demo is to see which expert answered.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from mol_platform.apps.demo.model import ATTENTION_MODULES, MLP_MODULES, DemoModelConfig
from mol_platform.contract.refs import check_name

ALL_LINEAR = ATTENTION_MODULES + MLP_MODULES


@dataclass(frozen=True)
class AdapterRecipe:
    """What to build: a name, a rank, and the modules the adapter targets."""

    name: str
    r: int
    target_modules: tuple[str, ...]
    b_std: float = 0.05

    @property
    def lora_alpha(self) -> int:
        return 2 * self.r


DEMO_ADAPTERS: tuple[AdapterRecipe, ...] = (
    AdapterRecipe("chat", 8, ("q_proj", "v_proj")),
    AdapterRecipe("coding", 16, ALL_LINEAR),
    AdapterRecipe("agent", 8, ATTENTION_MODULES),
    AdapterRecipe("ui", 16, ("q_proj", "v_proj")),
    AdapterRecipe("router", 8, ("q_proj", "k_proj", "v_proj", "o_proj")),
)


def _prefix(module: str) -> str:
    return "self_attn" if module in ATTENTION_MODULES else "mlp"


def adapter_config(recipe: AdapterRecipe, base_model: str) -> dict[str, object]:
    """adapter_config.json as PEFT writes it for a plain LoRA."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": recipe.r,
        "lora_alpha": recipe.lora_alpha,
        "lora_dropout": 0.0,
        "target_modules": sorted(recipe.target_modules),
        "bias": "none",
        "use_dora": False,
        "use_rslora": False,
        "modules_to_save": None,
        "fan_in_fan_out": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "layers_to_transform": None,
        "layers_pattern": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "revision": None,
    }


def adapter_weights(
    recipe: AdapterRecipe, cfg: DemoModelConfig, seed: int
) -> dict[str, np.ndarray]:
    """lora_A [r, in] and lora_B [out, r] for every targeted module of every layer."""
    rng = np.random.default_rng([seed, zlib.crc32(recipe.name.encode()), recipe.r])
    out: dict[str, np.ndarray] = {}
    for n in range(cfg.num_hidden_layers):
        for module in sorted(recipe.target_modules):
            fan_out, fan_in = cfg.module_shape(module)
            key = f"base_model.model.model.layers.{n}.{_prefix(module)}.{module}"
            a = rng.standard_normal((recipe.r, fan_in), dtype=np.float32) / np.sqrt(fan_in)
            b = rng.standard_normal((fan_out, recipe.r), dtype=np.float32) * recipe.b_std
            out[f"{key}.lora_A.weight"] = a.astype(np.float32)
            out[f"{key}.lora_B.weight"] = b.astype(np.float32)
    return out


def write_adapter(
    out: Path, recipe: AdapterRecipe, cfg: DemoModelConfig, *, base_model: str, seed: int
) -> Path:
    """Write a PEFT adapter folder (adapter_config.json + adapter_model.safetensors)."""
    check_name(recipe.name, "adapter name")
    unknown = sorted(set(recipe.target_modules) - set(ALL_LINEAR))
    if unknown:
        raise ValueError(
            f"adapter {recipe.name!r} targets unknown modules {unknown}; "
            f"the demo model has {', '.join(ALL_LINEAR)}"
        )
    out.mkdir(parents=True, exist_ok=True)
    config = adapter_config(recipe, base_model)
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    weights = out / "adapter_model.safetensors"
    save_file(adapter_weights(recipe, cfg, seed), str(weights), metadata={"format": "pt"})
    weights.chmod(0o644)  # safetensors writes 0600; engines may run as another user
    return out
