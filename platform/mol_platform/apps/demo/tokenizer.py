"""A byte-level BPE tokenizer trained locally on generated text.

Byte-level BPE (as in Llama 3 / GPT-2) encodes any string, so the engine never meets
an unknown character; the training text is generated from the seed, so the same seed
gives the same vocabulary. The chat template is a small ChatML variant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"
# The hermes tool-call parser looks these up in the vocabulary.
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
SPECIAL_TOKENS = (BOS, EOS, IM_START, IM_END, PAD, TOOL_CALL_START, TOOL_CALL_END)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}"
    "{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_TEXT = (
    "the a an of to and in is it you that he was for on are with as his they be at one "
    "have this from or had by hot word but what some we can out other were all there when "
    "up use your how said each she which do their time if will way about many then them "
    "write would like so these her long make thing see him two has look more day could go "
    "come did number sound no most people my over know water than call first who may down "
    "side been now find any new work part take get place made live where after back little "
    "only round man year came show every good me give our under name very through just form "
    "def return class import self print None True False for while if else elif try except "
    "function const let var async await yield lambda model adapter router expert serve token "
    "request response stream chat agent coding button layout style color margin padding"
)
COMMON_WORDS = tuple(_TEXT.split())
"""Words each of which, with a leading space, is one token of the demo tokenizer (the
simulator's prompt segments are made of them)."""
_SYLLABLES = ("ka", "lo", "mi", "ra", "te", "su", "no", "pe", "vi", "da", "zu", "qe", "xo")
_PUNCT = (".", ",", "?", "!", ":", ";", "()", "[]", "{}", "=", "+", "-", "*", "/", "\n")


def _corpus(seed: int, lines: int = 4000) -> Iterator[str]:
    rng = np.random.default_rng([seed, 0x70C])
    invented = [
        "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 5)))) for _ in range(400)
    ]
    words = [*COMMON_WORDS, *invented]
    for _ in range(lines):
        n = int(rng.integers(4, 16))
        parts = []
        for _ in range(n):
            w = str(words[int(rng.integers(len(words)))])
            r = rng.random()
            if r < 0.1:
                w = w.capitalize()
            elif r < 0.15:
                w = str(int(rng.integers(0, 10_000)))
            if rng.random() < 0.15:
                w += _PUNCT[int(rng.integers(len(_PUNCT)))]
            parts.append(w)
        yield " ".join(parts)


def train_tokenizer(seed: int, vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE of at most ``vocab_size`` tokens (specials included)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def write_tokenizer(out: Path, seed: int, vocab_size: int) -> dict[str, int]:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json.

    Returns the ids of the special tokens (the model config needs bos/eos ids).
    """
    tok = train_tokenizer(seed, vocab_size)
    tok.save(str(out / "tokenizer.json"))
    ids: dict[str, int] = {}
    for t in SPECIAL_TOKENS:
        tid = tok.token_to_id(t)
        if tid is None:  # pragma: no cover - the trainer always adds specials
            raise RuntimeError(f"tokenizer lost special token {t}")
        ids[t] = tid
    added = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    _write_json(out / "tokenizer_config.json", config)
    _write_json(
        out / "special_tokens_map.json",
        {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD},
    )
    return ids


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
