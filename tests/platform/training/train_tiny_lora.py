"""A few PEFT LoRA steps on the tiny demo Llama, on the CPU, publishing each checkpoint
through mol_platform.apps.training. Run with the engine venv's python:

    python train_tiny_lora.py BASE_DIR OUT_DIR CATALOG_URL DATASET_DIGEST

Prints the published versions as one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaForCausalLM, Trainer, TrainingArguments

from mol_platform.apps.training import catalog_callback


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, count: int, length: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.rows = torch.randint(3, vocab, (count, length), generator=generator)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.rows[i], "labels": self.rows[i].clone()}


def main() -> None:
    base_dir, out_dir, catalog_url, dataset = sys.argv[1:5]
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                             target_modules=["q_proj", "v_proj"],
                                             task_type="CAUSAL_LM"))
    callback = catalog_callback("lab/tune", base="tiny-llama", catalog_url=catalog_url,
                                alias="candidate", dataset_digest=dataset)
    args = TrainingArguments(output_dir=out_dir, max_steps=4, save_steps=2,
                             save_strategy="steps", per_device_train_batch_size=2,
                             learning_rate=1e-2, logging_steps=1, report_to=[], use_cpu=True,
                             dataloader_num_workers=0, seed=0)
    Trainer(model=model, args=args, train_dataset=Tokens(16, 16, model.config.vocab_size),
            callbacks=[callback]).train()
    print(json.dumps([p.model_dump(mode="json") for p in callback.publisher.published]))


if __name__ == "__main__":
    main()
