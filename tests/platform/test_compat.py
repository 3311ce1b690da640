"""Compatibility of LoRA adapters with a base model and a serving profile, from headers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save

from mol_platform.contract.compat import (
    AdapterConfigError,
    AdapterInfo,
    BaseModelError,
    BaseShapes,
    ServingProfileSpec,
    check_base,
    check_profile,
)
from mol_platform.contract.safetensors_header import header_shapes, read_header
from mol_testkit.lora import SyntheticLlama

P = "base_model.model.model.layers"


@dataclass(frozen=True)
class Model(SyntheticLlama):
    """The synthetic GQA base with its checker-side shapes."""

    def base(self) -> BaseShapes:
        return BaseShapes.from_config_and_tensors(self.config(), self.tensors())


GQA = Model()


@dataclass
class Adapter:
    """Builds a real adapter_model.safetensors (zeros) and an adapter_config.json dict."""

    model: Model = field(default_factory=Model)
    targets: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    r: int = 4
    tensor_rank: int | None = None
    key_suffix: str = ".weight"
    extra: dict[str, tuple[int, ...]] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)

    def files(self) -> tuple[dict[str, Any], bytes]:
        rank = self.tensor_rank or self.r
        arrays: dict[str, np.ndarray] = {}
        for i in range(self.model.layers):
            for kind in self.targets:
                out_f, in_f = self.model.shapes()[kind]
                arrays[f"{P}.{i}.{kind}.lora_A{self.key_suffix}"] = np.zeros((rank, in_f), "f4")
                arrays[f"{P}.{i}.{kind}.lora_B{self.key_suffix}"] = np.zeros((out_f, rank), "f4")
        for name, shape in self.extra.items():
            arrays[name] = np.zeros(shape, "f4")
        for name in self.drop:
            del arrays[name]
        config = {"peft_type": "LORA", "r": self.r, "lora_alpha": 2 * self.r, "bias": "none",
                  "target_modules": [t.split(".")[-1] for t in self.targets],
                  "base_model_name_or_path": "tiny", "use_dora": False,
                  "modules_to_save": None, **self.config}
        return config, save(arrays)

    def info(self) -> AdapterInfo:
        config, data = self.files()
        return AdapterInfo.from_files(config, read_header(data))


# (case id, adapter, expected reason codes, fragments every message of the first reason has)
CASES: list[tuple[str, Adapter, list[str], list[str]]] = [
    ("fits", Adapter(), [], []),
    ("fits, all linear modules", Adapter(targets=tuple(GQA.shapes())), [], []),
    ("fits, .default. key form", Adapter(key_suffix=".default.weight"), [], []),
    ("fits, rank_pattern", Adapter(r=4, tensor_rank=8, config={"rank_pattern": {r".*_proj": 8}}),
     [], []),
    ("non-LoRA tensor", Adapter(extra={f"{P}.0.self_attn.q_proj.weight_scale": (3,)}),
     ["not_lora_tensor"], ["weight_scale", "lora_A"]),
    ("DoRA in config", Adapter(config={"use_dora": True}), ["dora"], ["use_dora"]),
    ("DoRA magnitude tensors",
     Adapter(extra={f"{P}.0.self_attn.q_proj.lora_magnitude_vector": (64,),
                    f"{P}.1.self_attn.q_proj.lora_magnitude_vector": (64,)}),
     ["dora"], ["lora_magnitude_vector", "and 1 more"]),
    ("modules_to_save in config", Adapter(config={"modules_to_save": ["lm_head"]}),
     ["modules_to_save"], ["expected none", "lm_head"]),
    ("modules_to_save tensor", Adapter(extra={"base_model.model.lm_head.weight": (100, 64)}),
     ["modules_to_save"], ["lm_head.weight"]),
    ("bias in config", Adapter(config={"bias": "lora_only"}), ["bias"],
     ["expected 'none'", "'lora_only'"]),
    ("bias tensor", Adapter(extra={f"{P}.0.self_attn.q_proj.lora_B.bias": (64,)}), ["bias"],
     ["q_proj.lora_B.bias"]),
    ("non-GQA adapter on a GQA base", Adapter(model=Model(kv_heads=4)),
     ["shape_mismatch", "shape_mismatch"], ["k_proj.lora_B", "expected shape [32, 4]",
                                            "got [64, 4]", "and 1 more"]),
    ("another hidden size", Adapter(model=Model(hidden=128), targets=("self_attn.q_proj",)),
     ["shape_mismatch", "shape_mismatch"], ["q_proj.lora_A", "expected shape [4, 64]",
                                            "got [4, 128]"]),
    ("more layers than the base", Adapter(model=Model(layers=4), targets=("mlp.up_proj",)),
     ["layer_out_of_range"], ["layers.2.", "layer 2", "2 layers", "and 3 more"]),
    ("unknown module", Adapter(extra={f"{P}.0.self_attn.rotary.lora_A.weight": (4, 64),
                                      f"{P}.0.self_attn.rotary.lora_B.weight": (64, 4)}),
     ["unknown_module"], ["'self_attn.rotary'", "self_attn.q_proj"]),
    ("tensor rank differs from r", Adapter(r=8, tensor_rank=4, targets=("self_attn.q_proj",)),
     ["rank_mismatch", "rank_mismatch"], ["rank 4", "rank 8", "expected shape [8, 64]"]),
    ("rank_pattern names another module",
     Adapter(r=4, tensor_rank=8, targets=("self_attn.q_proj",),
             config={"rank_pattern": {"v_proj": 8}}),
     ["rank_mismatch", "rank_mismatch"], ["rank 8 but adapter_config.json sets rank 4"]),
    ("wrong peft_type", Adapter(config={"peft_type": "IA3"}), ["peft_type"],
     ["expected 'LORA'", "'IA3'"]),
    ("missing lora_B", Adapter(drop=(f"{P}.1.self_attn.v_proj.lora_B.weight",)),
     ["missing_tensor"], ["layers.1.self_attn.v_proj", "no lora_B"]),
    ("no tensors", Adapter(targets=()), ["no_tensors"], ["found no tensors"]),
]


@pytest.mark.parametrize(("adapter", "codes", "fragments"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_check_base(adapter: Adapter, codes: list[str], fragments: list[str]) -> None:
    reasons = check_base(adapter.info(), GQA.base())
    assert sorted(r.code for r in reasons) == sorted(codes), reasons
    for fragment in fragments:
        assert fragment in reasons[0].message, reasons[0].message


def test_every_reason_is_returned_not_just_the_first() -> None:
    adapter = Adapter(
        model=Model(kv_heads=4),
        config={"use_dora": True, "bias": "all", "peft_type": "ADALORA"},
        extra={"base_model.model.model.layers.0.mlp.up_proj.bias": (128,)},
    )
    codes = {r.code for r in check_base(adapter.info(), GQA.base())}
    assert codes == {"dora", "bias", "peft_type", "shape_mismatch"}


def test_lora_on_embeddings_uses_peft_embedding_layout() -> None:
    emb = "base_model.model.model.embed_tokens"
    good = Adapter(extra={f"{emb}.lora_embedding_A": (4, 100), f"{emb}.lora_embedding_B": (64, 4)})
    assert check_base(good.info(), GQA.base()) == []
    swapped = Adapter(extra={f"{emb}.lora_embedding_A": (4, 64),
                             f"{emb}.lora_embedding_B": (100, 4)})
    reasons = check_base(swapped.info(), GQA.base())
    assert [r.code for r in reasons] == ["shape_mismatch", "shape_mismatch"]
    assert "num_embeddings 100" in reasons[0].message


@pytest.mark.parametrize(
    ("profile", "codes"),
    [
        (ServingProfileSpec("gpu-a", max_lora_rank=64), []),
        (ServingProfileSpec("gpu-a", max_lora_rank=8), []),
        (ServingProfileSpec("small", max_lora_rank=4), ["rank_above_max"]),
        (ServingProfileSpec("attn", 64, ("q_proj", "k_proj", "v_proj", "o_proj")), []),
        (ServingProfileSpec("qv", 64, ("q_proj", "self_attn.v_proj")), ["unsupported_module"]),
        (ServingProfileSpec("both", 4, ("q_proj",)),
         ["rank_above_max", "unsupported_module", "unsupported_module"]),
    ],
)
def test_check_profile(profile: ServingProfileSpec, codes: list[str]) -> None:
    adapter = Adapter(r=8).info()
    reasons = check_profile(adapter, profile)
    assert sorted(r.code for r in reasons) == codes, reasons
    for r in reasons:
        assert profile.name in r.message


def test_rank_above_max_names_both_values() -> None:
    (reason,) = check_profile(Adapter(r=16).info(), ServingProfileSpec("p", 8))
    assert reason.message == "adapter rank 16 exceeds serving profile 'p' max_lora_rank 8"


def test_rank_pattern_counts_towards_the_profile_max() -> None:
    adapter = Adapter(r=4, tensor_rank=32, config={"rank_pattern": {r".*_proj": 32}}).info()
    assert adapter.max_rank == 32
    assert [r.code for r in check_profile(adapter, ServingProfileSpec("p", 16))] == [
        "rank_above_max"
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ([1, 2], "must be a JSON object, got list"),
        ({"peft_type": "LORA"}, "'r' is missing"),
        ({"r": 0}, "r must be a positive integer, got 0"),
        ({"r": "8"}, "r must be a positive integer, got '8'"),
        ({"r": True}, "r must be a positive integer"),
        ({"r": 8, "lora_alpha": "16"}, "lora_alpha must be a number"),
        ({"r": 8, "use_dora": "yes"}, "use_dora must be true or false"),
        ({"r": 8, "target_modules": [1]}, "target_modules must be a list"),
        ({"r": 8, "rank_pattern": {"q": 0}}, "rank_pattern must be"),
        ({"r": 8, "rank_pattern": {"(": 4}}, "valid regex"),
        ({"r": 8, "peft_type": 3}, "peft_type must be a string"),
    ],
)
def test_invalid_adapter_config(config: Any, message: str) -> None:
    with pytest.raises(AdapterConfigError, match=message.replace("(", r"\(")):
        AdapterInfo.from_files(config, {})


def test_adapter_info_defaults_and_fields() -> None:
    info = AdapterInfo.from_files({"r": 8, "target_modules": "all-linear"}, {})
    assert (info.peft_type, info.rank, info.alpha, info.bias) == (None, 8, 8.0, "none")
    assert info.target_modules == ("all-linear",)
    assert info.use_dora is False
    assert info.modules_to_save == ()
    assert [r.code for r in check_base(info, GQA.base())] == ["peft_type", "no_tensors"]


def test_base_shapes_read_real_shapes() -> None:
    base = GQA.base()
    assert base.architecture == "LlamaForCausalLM"
    assert base.num_layers == 2
    assert base.modules["self_attn.k_proj"] == (32, 64)  # GQA: 2 KV heads x head_dim 16
    assert base.modules["self_attn.q_proj"] == (64, 64)
    assert base.modules["embed_tokens"] == (100, 64)
    assert "norm" not in base.modules
    assert "input_layernorm" not in base.modules


def test_base_shapes_tied_embeddings_and_inferred_layers() -> None:
    tensors = {k: v for k, v in GQA.tensors().items() if k != "lm_head.weight"}
    config = {"model_type": "llama", "tie_word_embeddings": True}
    base = BaseShapes.from_config_and_tensors(config, tensors)
    assert base.architecture == "llama"
    assert base.num_layers == 2
    assert base.modules["lm_head"] == (100, 64)


@pytest.mark.parametrize(
    ("config", "tensors", "message"),
    [
        ({}, {"model.norm.weight": [4]}, "no 2-D weight"),
        ({"num_hidden_layers": 1}, GQA.tensors(), "reach layer 1"),
        ({}, {"model.layers.0.mlp.up_proj.weight": [8, 4],
              "model.layers.1.mlp.up_proj.weight": [9, 4]}, "differs from"),
        ({}, {"lm_head.weight": [8, 4]}, "no num_hidden_layers"),
    ],
)
def test_base_shapes_errors(config: dict[str, Any], tensors: dict[str, list[int]],
                            message: str) -> None:
    with pytest.raises(BaseModelError, match=message):
        BaseShapes.from_config_and_tensors(config, tensors)


def test_demo_model_and_adapters(tmp_path: Path) -> None:
    """The demo Llama (GQA) and its PEFT adapters, as real files on disk."""
    from mol_platform.apps.demo import build_demo

    demo = build_demo(tmp_path, seed=1)
    base_config = json.loads((demo.base / "config.json").read_text())
    shapes = header_shapes(read_header(demo.base / "model.safetensors"))
    base = BaseShapes.from_config_and_tensors(base_config, shapes)
    assert base.modules["self_attn.k_proj"][0] < base.modules["self_attn.q_proj"][0]
    assert demo.adapters
    for name, folder in demo.adapters.items():
        config = json.loads((folder / "adapter_config.json").read_text())
        info = AdapterInfo.from_files(config, read_header(folder / "adapter_model.safetensors"))
        assert check_base(info, base) == [], name
        assert check_profile(info, ServingProfileSpec("big", 64)) == [], name
        small = check_profile(info, ServingProfileSpec("tiny", max(info.rank - 1, 1)))
        assert [r.code for r in small] == (["rank_above_max"] if info.rank > 1 else [])
