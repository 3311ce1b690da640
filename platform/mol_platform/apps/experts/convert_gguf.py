"""Turn a GGUF file into a bf16 Hugging Face folder that vLLM serves and PEFT trains on.

Runs in the engine venv (torch, transformers, gguf), started by ``base.convert`` with
this file's path, so it imports nothing from mol_platform: the engine venv's installed
copy of the project may lag the tree that calls it.

transformers reads GGUF (dequantising every tensor) but ``save_pretrained`` refuses a
model loaded that way, so the weights, config and tokenizer are written here by hand:
the state dict in bf16 without ``lm_head.weight`` (the embeddings are tied, and vLLM
refuses a checkpoint tensor its model has no parameter for), a config without the GGUF
``quantization_config`` (else vLLM would look for a GGUF file), and the tokenizer with
the given chat template both in tokenizer_config.json and as chat_template.jinja.

    python convert_gguf.py --gguf DIR/FILE.gguf --out FOLDER --chat-template FILE
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ARCHITECTURE = "LlamaForCausalLM"
# Only the GGUF reader's own bookkeeping; everything else in the config is the model's.
DROPPED_CONFIG_KEYS = ("quantization_config", "_name_or_path", "_commit_hash")


def clean_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config.json for the bf16 folder: what the GGUF reader gave, less its own keys."""
    out = {k: v for k, v in config.items() if k not in DROPPED_CONFIG_KEYS}
    out["architectures"] = [ARCHITECTURE]
    out["dtype"] = "bfloat16"
    # Older readers (and people) look for the pre-5.0 key.
    out["torch_dtype"] = "bfloat16"
    out["tie_word_embeddings"] = True
    return out


def convert(gguf: Path, out: Path, chat_template: str) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    if not model.config.tie_word_embeddings:
        raise SystemExit(f"{name}: expected tied embeddings (a model without them needs "
                         "lm_head.weight kept)")
    state = {k: v.detach().to(torch.bfloat16).contiguous()
             for k, v in model.state_dict().items() if k != "lm_head.weight"}
    out.mkdir(parents=True, exist_ok=True)
    save_file(dict(sorted(state.items())), str(out / "model.safetensors"),
              metadata={"format": "pt"})
    config = clean_config(model.config.to_dict())
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    model.generation_config.save_pretrained(str(out))

    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(str(out))
    # vLLM and older transformers read the template from tokenizer_config.json; newer
    # transformers from chat_template.jinja. Both hold the same text.
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["chat_template"] = chat_template
    # How this process loaded it, not a property of the tokenizer.
    for key in ("name_or_path", "is_local", "local_files_only"):
        tc.pop(key, None)
    tc["model_max_length"] = int(config.get("max_position_embeddings", 2048))
    tc_path.write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").write_text(chat_template)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Convert a GGUF model file into a bf16 "
                                "Hugging Face folder (run in the engine venv).")
    p.add_argument("--gguf", type=Path, required=True, help="the .gguf file")
    p.add_argument("--out", type=Path, required=True, help="the folder to write into")
    p.add_argument("--chat-template", type=Path, required=True,
                   help="a Jinja chat template file for the tokenizer")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    convert(args.gguf, args.out, args.chat_template.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
