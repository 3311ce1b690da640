"""Train one expert by its recipe: ``python -m mol_platform.apps.experts.train``.

Runs where torch, transformers and peft are installed (the engine's venv; the platform's
runtime never imports this module). Prints one JSON line per step on stdout (``step``,
``steps``, ``loss``, ``elapsed``) so that a parent process can show progress, and writes
the adapter folder (PEFT's ``adapter_config.json`` and ``adapter_model.safetensors``)
with a ``training.json`` beside it: the lineage (base, data and recipe digests, seed)
and each step's loss. The folder appears whole or not at all (written aside, then
renamed), so a killed run never leaves an adapter that looks trained.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mol_platform.apps.experts.recipe import (
    DATA_ROOT,
    RECIPES,
    Example,
    Recipe,
    data_digest,
    load_examples,
    order,
    with_steps,
)

IGNORE = -100


def encode(tokenizer: Any, example: Example, max_tokens: int) -> tuple[list[int], list[int]]:
    """Token ids of the whole conversation and its labels: only the answer's tokens,
    through its end-of-turn token, are targets."""
    messages = [dict(m) for m in example.messages]
    tools = [dict(t) for t in example.tools] or None
    prompt = tokenizer.apply_chat_template(messages[:-1], tools=tools, tokenize=False,
                                           add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    if not whole.startswith(prompt):
        raise ValueError(f"{example.id}: the chat template renders the prompt differently "
                         "inside the whole conversation")
    end = whole.rfind("<|im_end|>") + len("<|im_end|>")
    ids_prompt = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids_answer = tokenizer(whole[len(prompt):end], add_special_tokens=False)["input_ids"]
    ids = [*ids_prompt, *ids_answer]
    if len(ids) > max_tokens:
        raise ValueError(f"{example.id}: {len(ids)} tokens, over the recipe's {max_tokens}: "
                         "keep training answers short")
    return ids, [IGNORE] * len(ids_prompt) + ids_answer


class TopLayers:
    """The model cut where the adapters start. The layers below the lowest adapted one
    never change during training, so each example's hidden state at the cut is computed
    once, without gradients, and every step runs only the adapted layers, forward and
    backward: exact (the same loss as the whole model, which a test checks), and on a
    30-layer base with 10 adapted layers a step runs a third of the layers."""

    def __init__(self, causal_lm: Any, cut: int) -> None:
        self.lm = causal_lm
        self.inner = causal_lm.model
        self.cut = cut

    def _positions(self, hidden: Any) -> tuple[Any, Any]:
        import torch

        positions = torch.arange(hidden.shape[1]).unsqueeze(0)
        return positions, self.inner.rotary_emb(hidden, positions)

    def _run(self, hidden: Any, layers: Any) -> Any:
        positions, rotary = self._positions(hidden)
        for layer in layers:
            out = layer(hidden, attention_mask=None, position_ids=positions,
                        position_embeddings=rotary)
            hidden = out[0] if isinstance(out, tuple) else out
        return hidden

    def below(self, ids: list[int]) -> Any:
        """The frozen part: the hidden state at the cut (no gradients kept)."""
        import torch

        with torch.no_grad():
            hidden = self.inner.embed_tokens(torch.tensor([ids]))
            return self._run(hidden, self.inner.layers[:self.cut]).detach()

    def loss(self, below: Any, labels: list[int]) -> Any:
        """The answer tokens' mean cross-entropy from the cut up."""
        import torch

        hidden = self.inner.norm(self._run(below, self.inner.layers[self.cut:]))
        logits = self.lm.lm_head(hidden)[0, :-1].float()
        targets = torch.tensor(labels[1:])
        return torch.nn.functional.cross_entropy(logits, targets, ignore_index=IGNORE)


def train(base: Path, expert: str, out: Path, recipe: Recipe, base_digest: str,
          data_root: Path = DATA_ROOT, log: Any = sys.stdout) -> dict[str, Any]:
    """Train ``expert`` on ``base`` into ``out``; the lineage written beside it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    torch.manual_seed(recipe.seed)
    torch.set_num_threads(recipe.threads)
    tokenizer = AutoTokenizer.from_pretrained(base)
    examples = load_examples(expert, data_root)
    encoded = [encode(tokenizer, e, recipe.max_tokens) for e in examples]
    causal_lm = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32,
                                                     attn_implementation="sdpa")
    causal_lm.eval()  # no dropout anywhere: the recipe's own is the LoRA's
    layers = int(causal_lm.config.num_hidden_layers)
    cut = layers - min(recipe.top_layers, layers)
    split = TopLayers(causal_lm, cut)
    cached = [split.below(ids) for ids, _labels in encoded]
    print(json.dumps({"step": 0, "steps": recipe.steps, "prepared": len(cached),
                      "elapsed": round(time.monotonic() - started, 1)}), file=log, flush=True)
    config = LoraConfig(r=recipe.rank, lora_alpha=recipe.alpha, lora_dropout=recipe.dropout,
                        target_modules=list(recipe.targets), bias="none",
                        layers_to_transform=list(range(cut, layers)), task_type="CAUSAL_LM")
    model = get_peft_model(causal_lm, config)  # injects into the same layer objects
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)

    def rate(step: int) -> float:  # linear warm-up, then cosine down to a tenth
        if step < recipe.warmup:
            return (step + 1) / recipe.warmup
        span = max(1, recipe.steps - recipe.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - recipe.warmup) / span))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    losses: list[float] = []
    for step, batch in enumerate(order(examples, recipe.steps, recipe.batch, recipe.seed)):
        total = 0.0
        for index in batch:
            loss = split.loss(cached[index], encoded[index][1])
            (loss / len(batch)).backward()
            total += float(loss.detach())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(total / len(batch), 5))
        print(json.dumps({"step": step + 1, "steps": recipe.steps, "loss": losses[-1],
                          "elapsed": round(time.monotonic() - started, 1)}),
              file=log, flush=True)
    lineage = {"expert": expert, "base_digest": base_digest,
               "data_digest": data_digest(expert, data_root), "recipe": recipe.as_dict(),
               "recipe_digest": recipe.digest(), "seed": recipe.seed,
               "examples": len(examples), "losses": losses,
               "trainable_parameters": sum(p.numel() for p in params),
               "seconds": round(time.monotonic() - started, 1)}
    aside = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(aside, ignore_errors=True)
    model.save_pretrained(aside)
    _name_base(aside / "adapter_config.json", base_name(base))
    (aside / "training.json").write_text(json.dumps(lineage, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    aside.rename(out)
    return lineage


def base_name(base: Path) -> str:
    """The base's catalog name: its marker's (a converted base), else the folder's."""
    marker = base / "mol-base.json"
    if marker.is_file():
        return str(json.loads(marker.read_text())["base"])
    return base.name


def _name_base(config_file: Path, name: str) -> None:
    """PEFT writes the base's local path; the catalog matches adapters to bases by name."""
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = name
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the base model folder")
    parser.add_argument("--base-digest", required=True, help="the base's sha256:<hex>")
    parser.add_argument("--expert", required=True, choices=sorted(RECIPES))
    parser.add_argument("--out", type=Path, required=True, help="the adapter folder to write")
    parser.add_argument("--data", type=Path, default=DATA_ROOT, help="the data folder")
    parser.add_argument("--steps", type=int, help="override the recipe's steps (tests)")
    args = parser.parse_args(argv)
    recipe = with_steps(RECIPES[args.expert], args.steps)
    train(args.base, args.expert, args.out, recipe, args.base_digest, args.data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
