"""The training recipe for real, on the real base in the engine's venv: the split at the
adapted layers gives the whole model's loss, and the same recipe and seed train the same
adapter twice (the lineage's promise), adapters only where the recipe puts them."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mol_platform.apps.experts import build, recipe
from mol_platform.apps.experts.base import default_cache, ensure_base

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def engine_python() -> Path:
    from mol_testkit.engine import find_engine_venv

    return find_engine_venv() / "bin" / "python"


@pytest.fixture(scope="module")
def real_base(engine_python: Path) -> Path:
    return ensure_base(default_cache(), engine_python, say=lambda _: None)


def _run(python: Path, script: str) -> str:
    """Run ``script`` in the engine's venv against this tree's platform package."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "platform"), "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_split_at_the_adapted_layers_gives_the_whole_models_loss(
        engine_python: Path, real_base: Path) -> None:
    out = _run(engine_python, f"""
import json, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from mol_platform.apps.experts.recipe import load_examples
from mol_platform.apps.experts.train import TopLayers, encode
torch.manual_seed(0)
tok = AutoTokenizer.from_pretrained({str(real_base)!r})
lm = AutoModelForCausalLM.from_pretrained({str(real_base)!r}, dtype=torch.float32,
                                          attn_implementation="sdpa").eval()
split = TopLayers(lm, 20)
rows = []
for example in [load_examples("agent")[0], load_examples("ui")[0]]:
    ids, labels = encode(tok, example, 640)
    with torch.no_grad():
        whole = lm(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
        part = split.loss(split.below(ids), labels)
    rows.append([float(whole), float(part)])
print(json.dumps(rows))
""")
    rows = json.loads(out.strip().splitlines()[-1])
    for whole, part in rows:
        assert part == pytest.approx(whole, rel=1e-5)
        assert 0.0 < whole < 10.0


def _header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return header


def test_the_same_recipe_and_seed_train_the_same_adapter(
        engine_python: Path, real_base: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "coding").mkdir(parents=True)
    lines = recipe.data_file("coding", "train").read_text().splitlines()[:6]
    (data / "coding" / "train.jsonl").write_text("\n".join(lines) + "\n")
    folders = []
    for run in ("a", "b"):
        said: list[str] = []
        folders.append(build.train_expert("coding", real_base, engine_python,
                                          tmp_path / f"cache-{run}", say=said.append,
                                          steps=2, shipped=tmp_path / "none", data_root=data))
        assert said[0] == "training the coding expert (2 steps on the CPU) ..."
        assert said[-1].startswith("the coding expert is trained")
    first, second = (build.lineage(f) for f in folders)
    assert first["losses"] == second["losses"]
    assert len(first["losses"]) == 2
    assert first["data_digest"] == recipe.data_digest("coding", data)
    assert first["base_digest"] == build.base_digest(real_base)
    assert first["examples"] == 6
    weights = [(f / "adapter_model.safetensors").read_bytes() for f in folders]
    assert weights[0] == weights[1]
    config = json.loads((folders[0] / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "smollm2-135m-instruct"
    assert config["r"] == recipe.RECIPES["coding"].rank
    layers = {int(k.split(".layers.")[1].split(".")[0])
              for k in _header(folders[0] / "adapter_model.safetensors")}
    top = recipe.RECIPES["coding"].top_layers
    assert layers == set(range(30 - top, 30))
