"""``mol demo build``: the tiny Llama and its PEFT adapters are what engines expect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from typer.testing import CliRunner

from mol_platform.apps.cli import app
from mol_platform.apps.demo import DEMO_ADAPTERS, AdapterRecipe, DemoModelConfig, build_demo
from mol_platform.apps.demo.tokenizer import BOS, EOS, IM_END, IM_START

CFG = DemoModelConfig()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return build_demo(tmp_path_factory.mktemp("demo"), seed=0)


def _files(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_config_is_a_small_gqa_llama(demo):
    config = json.loads((demo.base / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert (config["num_hidden_layers"], config["hidden_size"]) == (2, 256)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["intermediate_size"] == 512
    assert config["max_position_embeddings"] == 2048
    assert config["torch_dtype"] == "float32"
    assert config["tie_word_embeddings"] is False
    tok = Tokenizer.from_file(str(demo.base / "tokenizer.json"))
    assert tok.get_vocab_size() <= config["vocab_size"]
    assert config["bos_token_id"] == tok.token_to_id(BOS)
    assert config["eos_token_id"] == tok.token_to_id(EOS)
    generation = json.loads((demo.base / "generation_config.json").read_text())
    assert tok.token_to_id(IM_END) in generation["eos_token_id"]


def test_weights_have_llama_names_and_shapes(demo):
    weights = load_file(str(demo.base / "model.safetensors"))
    assert weights["model.embed_tokens.weight"].shape == (2048, 256)
    assert weights["lm_head.weight"].shape == (2048, 256)
    assert weights["model.norm.weight"].shape == (256,)
    for n in range(2):
        attn = f"model.layers.{n}.self_attn"
        assert weights[f"{attn}.q_proj.weight"].shape == (256, 256)
        assert weights[f"{attn}.k_proj.weight"].shape == (128, 256)  # GQA: 2 KV heads x 64
        assert weights[f"{attn}.v_proj.weight"].shape == (128, 256)
        assert weights[f"{attn}.o_proj.weight"].shape == (256, 256)
        mlp = f"model.layers.{n}.mlp"
        assert weights[f"{mlp}.gate_proj.weight"].shape == (512, 256)
        assert weights[f"{mlp}.up_proj.weight"].shape == (512, 256)
        assert weights[f"{mlp}.down_proj.weight"].shape == (256, 512)
        np.testing.assert_array_equal(weights[f"model.layers.{n}.input_layernorm.weight"], 1.0)
        np.testing.assert_array_equal(
            weights[f"model.layers.{n}.post_attention_layernorm.weight"], 1.0
        )
    assert set(weights) == set(CFG.tensor_shapes())
    assert all(w.dtype == np.float32 for w in weights.values())
    std = float(weights["model.layers.0.self_attn.q_proj.weight"].std())
    assert 0.015 < std < 0.025
    assert not np.array_equal(weights["model.embed_tokens.weight"], weights["lm_head.weight"])


def test_demo_adapters_are_peft_loras_with_nonzero_b(demo):
    assert set(demo.adapters) >= {"chat", "coding", "agent", "ui", "router"}
    expected = {
        "chat": (8, {"q_proj", "v_proj"}),
        "coding": (16, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"}),
        "agent": (8, {"q_proj", "k_proj", "v_proj", "o_proj"}),
        "ui": (16, {"q_proj", "v_proj"}),
    }
    for name, (rank, modules) in expected.items():
        config = json.loads((demo.adapters[name] / "adapter_config.json").read_text())
        assert config["peft_type"] == "LORA"
        assert config["task_type"] == "CAUSAL_LM"
        assert config["r"] == rank
        assert set(config["target_modules"]) == modules
        assert config["bias"] == "none"
        assert config["use_dora"] is False
        assert config["modules_to_save"] is None
        assert Path(config["base_model_name_or_path"]) == demo.base
        tensors = load_file(str(demo.adapters[name] / "adapter_model.safetensors"))
        assert len(tensors) == 2 * 2 * len(modules)  # A and B, 2 layers
        for module in modules:
            out_f, in_f = CFG.module_shape(module)
            part = "self_attn" if module.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) \
                else "mlp"
            for n in range(2):
                key = f"base_model.model.model.layers.{n}.{part}.{module}"
                a = tensors[f"{key}.lora_A.weight"]
                b = tensors[f"{key}.lora_B.weight"]
                assert a.shape == (rank, in_f)
                assert b.shape == (out_f, rank)
                assert np.abs(b).max() > 0, "lora_B all zero would make the adapter a no-op"


def test_adapters_differ_from_each_other(demo):
    a = load_file(str(demo.adapters["chat"] / "adapter_model.safetensors"))
    b = load_file(str(demo.adapters["router"] / "adapter_model.safetensors"))
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
    assert not np.array_equal(a[key], b[key])


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, demo):
    again = build_demo(tmp_path / "again", seed=0)
    original = _files(demo.base.parent)
    rebuilt = _files(again.base.parent)
    assert rebuilt.keys() == original.keys()
    for name, content in original.items():
        if name.endswith("adapter_config.json"):
            continue  # names the base folder, which differs
        assert rebuilt[name] == content, name
    other = build_demo(tmp_path / "other", seed=1)
    w0 = load_file(str(demo.base / "model.safetensors"))
    w1 = load_file(str(other.base / "model.safetensors"))
    assert not np.array_equal(w0["lm_head.weight"], w1["lm_head.weight"])


@pytest.mark.parametrize(
    "text",
    ["Hello world", "def add(a, b):\n    return a + b", "naïve café ✓ 日本語", "", "  spaces  "],
)
def test_tokenizer_round_trips(demo, text):
    tok = Tokenizer.from_file(str(demo.base / "tokenizer.json"))
    ids = tok.encode(text).ids
    assert all(0 <= i < 2048 for i in ids)
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_learned_merges_and_keeps_specials_whole(demo):
    tok = Tokenizer.from_file(str(demo.base / "tokenizer.json"))
    assert tok.get_vocab_size() > 1500  # trained, not just the 256 byte alphabet
    ids = tok.encode(f"{IM_START}user\nhi{IM_END}").ids
    assert ids[0] == tok.token_to_id(IM_START)
    assert ids[-1] == tok.token_to_id(IM_END)
    assert len(tok.encode(" the model").ids) < len(" the model")


def test_tokenizer_config_has_chat_template_and_specials(demo):
    config = json.loads((demo.base / "tokenizer_config.json").read_text())
    assert config["bos_token"] == BOS
    assert config["eos_token"] == EOS
    assert "add_generation_prompt" in config["chat_template"]
    specials = json.loads((demo.base / "special_tokens_map.json").read_text())
    assert specials["bos_token"] == BOS


def test_bad_adapter_recipe_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown modules"):
        build_demo(tmp_path, adapters=[AdapterRecipe("bad", 8, ("qkv_proj",))])
    with pytest.raises(ValueError, match="given twice"):
        build_demo(tmp_path, adapters=[DEMO_ADAPTERS[0], DEMO_ADAPTERS[0]])


def test_bad_model_config_is_refused():
    with pytest.raises(ValueError, match="multiple of num_key_value_heads"):
        DemoModelConfig(num_attention_heads=4, num_key_value_heads=3)


def test_cli_builds_the_demo(tmp_path):
    result = CliRunner().invoke(app, ["demo", "build", "-o", str(tmp_path / "d"), "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d" / "tiny-llama" / "model.safetensors").is_file()
    assert (tmp_path / "d" / "adapters" / "coding" / "adapter_model.safetensors").is_file()
    assert "adapter coding" in result.output


def test_docs_name_the_folders_the_demo_writes(demo):
    """docs/engine.md ("The demo model") and docs/local.md describe the layout as built."""
    root = demo.base.parent
    engine_doc = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    section = engine_doc.split("## The demo model", 1)[1]
    assert demo.base.name == "tiny-llama"
    for entry in sorted(p.name for p in root.iterdir() if p.is_dir()):
        shown = "adapters/<name>/" if entry == "adapters" else f"{entry}/"
        assert f"`{shown}`" in section, entry
    for name in DEMO_ADAPTERS:
        assert f"| `{name.name}` |" in section
    assert "`base/`" not in engine_doc
