"""Prompt token ids: the model's own tokenizer and chat template when the replica is
given a model folder, else one token per word (its CRC-32 as the id).

vLLM counts a chat prompt after rendering the chat template (with the generation
prompt) and a completion prompt with the tokenizer's special tokens; token budgets,
``max_model_len`` checks and rate limits all depend on that count, so a replica with
a model folder counts the same way; the ids key the prefix cache's blocks.
``tokenizers`` and ``jinja2`` are imported only then, so a word-counting replica
stays light.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mol_testkit.simulator.textgen import PromptError


class TokenCounter(Protocol):
    def completion(self, prompt: str) -> list[int]: ...

    def chat(self, messages: list[dict[str, Any]], prompt: str) -> list[int]: ...


class WordCounter:
    """One token per whitespace-separated word, at least 1 (an empty prompt is one
    token, id 0)."""

    def completion(self, prompt: str) -> list[int]:
        return [zlib.crc32(word.encode()) for word in prompt.split()] or [0]

    def chat(self, messages: list[dict[str, Any]], prompt: str) -> list[int]:
        return self.completion(prompt)


class ModelTokenCounter:
    """The model folder's ``tokenizer.json`` and ``tokenizer_config.json`` chat template."""

    def __init__(self, folder: Path) -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        self._template_error = TemplateError

        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config_path = folder / "tokenizer_config.json"
        config: dict[str, Any] = {}
        if config_path.is_file():
            config = json.loads(config_path.read_text())
        self._specials = {
            key: _token_text(config.get(key))
            for key in ("bos_token", "eos_token", "pad_token", "unk_token")
        }
        template = config.get("chat_template")
        self._render: Callable[..., str] | None = None
        if isinstance(template, str):
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise_template_error
            self._render = env.from_string(template).render

    def completion(self, prompt: str) -> list[int]:
        return list(self._tokenizer.encode(prompt, add_special_tokens=True).ids)

    def chat(self, messages: list[dict[str, Any]], prompt: str) -> list[int]:
        if self._render is None:
            return self.completion(prompt)
        try:
            text = self._render(messages=messages, add_generation_prompt=True, **self._specials)
        except self._template_error as exc:  # vLLM answers 400 with the template's reason
            raise PromptError(f"the chat template cannot render these messages: {exc}") from None
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)


def _raise_template_error(message: str) -> None:
    from jinja2 import TemplateError

    raise TemplateError(message)


def _token_text(value: Any) -> str:
    if isinstance(value, dict):  # AddedToken as saved by transformers
        return str(value.get("content", ""))
    return value if isinstance(value, str) else ""


def token_counter(model_path: str | None) -> TokenCounter:
    """The counter for a replica: the model folder's tokenizer if it has one."""
    if model_path is not None and (Path(model_path) / "tokenizer.json").is_file():
        return ModelTokenCounter(Path(model_path))
    return WordCounter()
