"""The packaged embedding models' folders: the shallow model is the packaged
all-MiniLM-L6-v2 with its first layers kept byte for byte, written atomically, once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from mol_platform.apps.embedding_model import (
    MARKER,
    EmbeddingModelError,
    derive,
    main,
    model_dir,
    packaged_dir,
)
from mol_platform.contract.embedding_models import (
    DEFAULT_EMBEDDING_MODEL,
    MINILM,
    MINILM_L3,
    PACKAGED_LAYERS,
    image_dir,
)


def test_the_default_model_keeps_the_first_three_layers_byte_for_byte(tmp_path: Path) -> None:
    assert DEFAULT_EMBEDDING_MODEL == MINILM_L3
    source = packaged_dir()
    folder = model_dir(MINILM_L3, tmp_path)
    assert folder == tmp_path / MINILM_L3
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == PACKAGED_LAYERS[MINILM_L3] == 3
    assert config["hidden_size"] == json.loads((source / "config.json").read_text())[
        "hidden_size"]
    full, kept = load_file(str(source / "model.safetensors")), load_file(
        str(folder / "model.safetensors"))
    layers = {int(k.split("encoder.layer.")[1].split(".")[0]) for k in kept if
              "encoder.layer." in k}
    assert layers == {0, 1, 2}
    assert set(kept) == {k for k in full if "encoder.layer." not in k
                         or int(k.split("encoder.layer.")[1].split(".")[0]) < 3}
    for name, tensor in kept.items():
        assert np.array_equal(tensor, full[name]), name
    # tokenizer and pooling come along unchanged
    for name in ("tokenizer.json", "modules.json", "1_Pooling/config.json"):
        assert (folder / name).read_bytes() == (source / name).read_bytes()
    assert json.loads((folder / MARKER).read_text())["layers"] == 3


def test_a_derived_folder_is_written_once_and_again_when_incomplete(tmp_path: Path) -> None:
    first = model_dir(MINILM_L3, tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert model_dir(MINILM_L3, tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp  # reused
    (first / MARKER).unlink()  # a copy that stopped half way has no marker
    again = model_dir(MINILM_L3, tmp_path)
    assert (again / MARKER).is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no leftovers


def test_the_full_model_is_the_packaged_folder_itself(tmp_path: Path) -> None:
    assert model_dir(MINILM, tmp_path) == packaged_dir()
    assert not list(tmp_path.iterdir())


def test_unknown_models_and_layer_counts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingModelError, match="not a packaged embedding model"):
        model_dir("bge-small", tmp_path)
    with pytest.raises(EmbeddingModelError, match=r"layers must be in 1\.\.6"):
        derive(packaged_dir(), tmp_path / "x", 7)
    assert not (tmp_path / "x").exists()


def test_the_image_build_command_writes_each_packaged_model(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    main([MINILM_L3, str(tmp_path / MINILM_L3)])
    assert f"wrote {MINILM_L3}" in capsys.readouterr().out
    assert json.loads((tmp_path / MINILM_L3 / "config.json").read_text())[
        "num_hidden_layers"] == 3
    assert image_dir(MINILM_L3) == f"/models/embedding/{MINILM_L3}"
    assert image_dir("bge-small") is None
    with pytest.raises(SystemExit):
        main(["bge-small", str(tmp_path / "b")])
