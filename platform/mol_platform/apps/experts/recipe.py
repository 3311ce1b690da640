"""The experts' training recipe: what is trained, on what, with which settings.

Pure and torch-free, so the platform's runtime (``mol up``, the catalog's lineage) can
read a recipe, hash it and find a trained adapter's cache folder without the training
stack; :mod:`mol_platform.apps.experts.train` runs it where torch and peft are installed
(the engine's venv).

A trained adapter is keyed by everything that decides its weights: the base model's
digest, the data's digest and the recipe's digest (its settings and seed). The same
three on another machine train the same adapter (fixed seeds, one thread order on the
CPU), and a change to any of them trains a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mol_platform.contract.handoff import tool as handoff_tool

EXPERTS = ("chat", "agent", "coding", "ui")
"""The demo's experts, in the order a first start trains them (the backbone first)."""

DATA_ROOT = Path(__file__).parent / "data"

DEMO_DESCRIPTIONS: Mapping[str, str] = {
    "chat": "small talk and general questions",
    "agent": "plans and calls tools",
    "coding": "writes and fixes code",
    "ui": "designs user interfaces",
}
"""The experts' descriptions in the demo deployment: the handoff tool the router offers
quotes them, so the chat expert is trained on the same words (a test holds the two
together)."""


@dataclass(frozen=True)
class Recipe:
    """How one expert is trained. LoRA sits on the attention projections of the top
    ``top_layers`` layers only: the layers below never change, so training runs only the
    adapted ones (:class:`mol_platform.apps.experts.train.TopLayers`), and a format (code
    first, one HTML document, one tool call) is a late-layer behaviour.
    Each step sums ``batch`` examples one at a time (no padding on the CPU).
    The loss counts the answer's tokens only: the prompt is context, not a target."""

    steps: int = 40
    batch: int = 4
    lr: float = 1e-3
    warmup: int = 3
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    top_layers: int = 10
    seed: int = 0
    max_tokens: int = 640
    threads: int = 2

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["targets"] = list(self.targets)
        return out

    def digest(self) -> str:
        """sha256 of the settings that decide the weights (threads only decide speed)."""
        kept = {k: v for k, v in self.as_dict().items() if k != "threads"}
        return _digest(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode())


RECIPES: Mapping[str, Recipe] = {
    "chat": Recipe(steps=48),
    "agent": Recipe(steps=40),
    "coding": Recipe(steps=36),
    "ui": Recipe(steps=36),
}


@dataclass(frozen=True)
class Example:
    """One training conversation: its messages (the last is the answer trained on) and
    the tools the request offered."""

    id: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def data_file(expert: str, split: str, root: Path = DATA_ROOT) -> Path:
    if expert not in EXPERTS:
        raise ValueError(f"unknown expert {expert!r}: one of {', '.join(EXPERTS)}")
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}: train or eval")
    return root / expert / f"{split}.jsonl"


def data_digest(expert: str, root: Path = DATA_ROOT) -> str:
    """The digest of an expert's training file, as bytes: the lineage's ``dataset``."""
    return _digest(data_file(expert, "train", root).read_bytes())


def chat_tools(descriptions: Mapping[str, str] = DEMO_DESCRIPTIONS) -> list[dict[str, Any]]:
    """What the chat expert is offered in the demo: handoff to every other expert."""
    targets = [e for e in EXPERTS if e != "chat"]
    return [handoff_tool(targets, descriptions)]


def load_examples(expert: str, root: Path = DATA_ROOT) -> list[Example]:
    """The training conversations of ``expert``; chat's get the handoff tool the demo's
    router offers it. A line that is not a conversation ending in an answer is an
    error naming the line."""
    path = data_file(expert, "train", root)
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            messages = tuple(row["messages"])
            tools = tuple(row.get("tools") or (chat_tools() if expert == "chat" else ()))
            example_id = str(row["id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a training line ({exc})") from None
        if not messages or messages[-1].get("role") != "assistant":
            raise ValueError(f"{path}:{n}: the last message must be the answer to learn")
        out.append(Example(example_id, messages, tools))
    if not out:
        raise ValueError(f"{path}: no training lines")
    return out


def adapter_key(base_digest: str, expert: str, recipe: Recipe, root: Path = DATA_ROOT) -> str:
    """The cache key of a trained adapter: base, data and recipe digests together."""
    joined = "\n".join([base_digest, expert, data_digest(expert, root), recipe.digest()])
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def order(examples: Sequence[Example], steps: int, batch: int, seed: int) -> list[list[int]]:
    """Which examples each step sums: epochs of a seeded shuffle, cut into batches. Pure,
    so the order is the same wherever the recipe runs."""
    import random

    rng = random.Random(seed)
    picks: list[int] = []
    while len(picks) < steps * batch:
        epoch = list(range(len(examples)))
        rng.shuffle(epoch)
        picks += epoch
    return [picks[i * batch:(i + 1) * batch] for i in range(steps)]


def with_steps(recipe: Recipe, steps: int | None) -> Recipe:
    return recipe if steps is None else replace(recipe, steps=steps)
