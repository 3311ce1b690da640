"""The experts' recipe and build, without torch: the order examples are trained in, the
digests that key a trained adapter, the data lines, the handoff tool the chat expert is
trained with (the router's own, word for word), and which trained copy a build reuses."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mol_platform.apps.experts import build, recipe
from mol_platform.contract.router_config import router_config_from_spec
from mol_platform.contract.spec import MoLDeployment
from mol_router.routing.rules import Routing

ROOT = Path(__file__).parents[2]
BASE = "sha256:" + "ab" * 32


def test_the_order_is_seeded_epochs_cut_into_batches() -> None:
    examples = [recipe.Example(str(i), ({"role": "assistant", "content": "x"},))
                for i in range(10)]
    first = recipe.order(examples, steps=6, batch=4, seed=3)
    assert first == recipe.order(examples, steps=6, batch=4, seed=3)
    assert first != recipe.order(examples, steps=6, batch=4, seed=4)
    assert [len(b) for b in first] == [4] * 6
    flat = [i for b in first for i in b]
    assert sorted(flat[:10]) == list(range(10))  # every example once per epoch
    assert sorted(flat[10:20]) == list(range(10))


def test_the_recipe_digest_follows_what_decides_the_weights() -> None:
    r = recipe.RECIPES["coding"]
    assert r.digest() == replace(r, threads=1).digest()  # speed, not weights
    assert r.digest() != replace(r, seed=1).digest()
    assert r.digest() != replace(r, steps=r.steps + 1).digest()
    assert r.digest() != replace(r, top_layers=r.top_layers - 1).digest()


def _data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(recipe.DATA_ROOT, root)
    return root


def test_a_data_change_keys_a_new_adapter(tmp_path: Path) -> None:
    root = _data_root(tmp_path)
    r = recipe.RECIPES["ui"]
    key = recipe.adapter_key(BASE, "ui", r, root)
    assert key == recipe.adapter_key(BASE, "ui", r, root)
    assert key != recipe.adapter_key("sha256:" + "cd" * 32, "ui", r, root)
    path = recipe.data_file("ui", "train", root)
    path.write_text(path.read_text() + "\n")
    assert key != recipe.adapter_key(BASE, "ui", r, root)


def test_chat_is_trained_with_the_handoff_tool_the_demo_router_offers() -> None:
    spec = MoLDeployment.model_validate(
        yaml.safe_load((ROOT / "deploy/examples/macaron-local.yaml").read_text()))
    routing = Routing.build(router_config_from_spec(spec, endpoints=["http://127.0.0.1:1"],
                                                     embeddings_url="http://127.0.0.1:2"))
    offered, _targets = routing.handoff_tools["chat"]
    chat = recipe.load_examples("chat")
    assert all(list(e.tools) == [offered] for e in chat)
    assert all(not e.tools for e in recipe.load_examples("coding"))
    assert all(e.tools for e in recipe.load_examples("agent")
               if e.messages[-1].get("tool_calls"))


def test_bad_lines_are_refused_with_their_place(tmp_path: Path) -> None:
    root = _data_root(tmp_path)
    path = recipe.data_file("coding", "train", root)
    path.write_text('{"id": "x", "messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(ValueError, match=r"train.jsonl:1: the last message must be the answer"):
        recipe.load_examples("coding", root)
    path.write_text("not json\n")
    with pytest.raises(ValueError, match=r"train.jsonl:1: not a training line"):
        recipe.load_examples("coding", root)
    with pytest.raises(ValueError, match="unknown expert"):
        recipe.data_file("poet", "train")


def _trained(folder: Path, expert: str, base: str, r: recipe.Recipe, root: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    (folder / "adapter_config.json").write_text("{}")
    (folder / build.TRAINING).write_text(json.dumps({
        "expert": expert, "base_digest": base, "data_digest": recipe.data_digest(expert, root),
        "recipe_digest": r.digest(), "recipe": r.as_dict(), "seconds": 1.0}))
    return folder


def _base(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    base.mkdir(parents=True)
    (base / "mol-base.json").write_text(json.dumps({"base": "b", "sha256": "ab" * 32}))
    return base


def test_a_current_shipped_copy_seeds_the_cache_and_a_stale_one_does_not(
        tmp_path: Path) -> None:
    root = _data_root(tmp_path)
    r = recipe.RECIPES["coding"]
    shipped = tmp_path / "shipped"
    _trained(shipped / "coding", "coding", BASE, r, root)
    cache = tmp_path / "cache"
    said: list[str] = []
    folder = build.train_expert("coding", _base(tmp_path), Path("/nonexistent/python"), cache,
                                say=said.append, shipped=shipped, data_root=root)
    assert folder == build.cache_folder(cache, "coding", BASE, r, root)
    assert (folder / "adapter_model.safetensors").read_bytes() == b"weights"
    assert said == []  # nothing trained, nothing to say
    # The data changed: the shipped copy is stale and training starts (here: no python).
    path = recipe.data_file("coding", "train", root)
    path.write_text(path.read_text() + "\n")
    with pytest.raises((build.ExpertBuildError, OSError)):
        build.train_expert("coding", _base(tmp_path / "b2"), Path("/nonexistent/python"),
                           cache, say=said.append, shipped=shipped, data_root=root)
    assert said[:1] == [f"training the coding expert ({r.steps} steps on the CPU) ..."]


def test_progress_lines_are_condensed() -> None:
    said: list[str] = []
    for line in ['{"step": 0, "steps": 20, "prepared": 9, "elapsed": 1.0}',
                 '{"step": 3, "steps": 20, "loss": 1.0, "elapsed": 2.0}',
                 '{"step": 10, "steps": 20, "loss": 0.5, "elapsed": 3.0}',
                 "a warning from a library", '{"step": 20, "steps": 20, "loss": 0.2, '
                 '"elapsed": 4.0}']:
        build._progress("ui", line, said.append)
    assert said == ["  ui: 9 examples prepared (1.0 s)", "  ui: step 10/20, loss 0.5 (3.0 s)",
                    "  ui: step 20/20, loss 0.2 (4.0 s)"]


@pytest.mark.parametrize("expert", recipe.EXPERTS)
def test_the_shipped_adapter_is_current_for_the_data_and_recipe(expert: str) -> None:
    """A change to an expert's data or recipe must ship a retrained adapter
    (`mol demo experts --expert NAME --ship`): a stale copy would be served as if it were
    trained on what the tree holds."""
    from mol_platform.apps.experts.base import WHEEL_SHA256

    folder = build.SHIPPED / expert
    assert build.current(folder, expert, f"sha256:{WHEEL_SHA256}", recipe.RECIPES[expert]), (
        f"{folder} is not {expert} trained on the current data and recipe: run "
        f"`mol demo experts --expert {expert} --ship`")
    assert sorted(p.name for p in folder.iterdir()) == sorted(build.SHIPPED_FILES)


def test_ship_replaces_the_copy_whole(tmp_path: Path) -> None:
    root = _data_root(tmp_path)
    trained = _trained(tmp_path / "t" / "ui", "ui", BASE, recipe.RECIPES["ui"], root)
    shipped = tmp_path / "shipped"
    (shipped / "ui").mkdir(parents=True)
    (shipped / "ui" / "stale.bin").write_bytes(b"old")
    out = build.ship(trained, "ui", shipped)
    assert sorted(p.name for p in out.iterdir()) == sorted(build.SHIPPED_FILES)
    assert [p.name for p in shipped.iterdir()] == ["ui"]
