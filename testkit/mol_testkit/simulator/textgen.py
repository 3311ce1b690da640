"""Deterministic replies: the same (model, prompt) always gives the same words.

Tests use :func:`reply_words` to tell which adapter answered a request, without a
real model. One word is one token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

VOCABULARY = (
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor",
    "indigo", "juniper", "kelp", "lumen", "maple", "nectar", "onyx", "pebble",
    "quartz", "raven", "sierra", "tundra", "umber", "violet", "willow", "xenon",
    "yarrow", "zephyr", "aspen", "birch", "coral", "dune", "elm", "flint",
)  # fmt: skip


class PromptError(ValueError):
    """The request's prompt or messages cannot be read."""


def _stream(seed: str) -> Iterator[int]:
    counter = 0
    while True:
        digest = hashlib.sha256(f"{seed}\x00{counter}".encode()).digest()
        yield from digest
        counter += 1


def reply_words(model: str, prompt: str, count: int) -> list[str]:
    """The first ``count`` words the simulator answers ``prompt`` with on ``model``."""
    stream = _stream(f"{model}\x00{prompt}")
    return [VOCABULARY[next(stream) % len(VOCABULARY)] for _ in range(count)]


def reply_text(model: str, prompt: str, count: int) -> str:
    """:func:`reply_words` joined by spaces: the full content of a reply."""
    return " ".join(reply_words(model, prompt, count))


def pick_choice(model: str, prompt: str, choices: Sequence[str]) -> str:
    """Deterministic answer for a ``structured_outputs: {"choice": [...]}`` request."""
    byte = next(_stream(f"choice\x00{model}\x00{prompt}"))
    return choices[byte % len(choices)]


def split_tokens(text: str) -> list[str]:
    """Stream pieces whose concatenation is ``text`` (a leading space per word)."""
    words = text.split(" ")
    return [words[0], *(f" {w}" for w in words[1:])] if text else []


def chat_prompt(messages: Any) -> str:
    """The text a chat request is answered from: ``role: content`` lines."""
    if not isinstance(messages, list) or not messages:
        raise PromptError("'messages' must be a non-empty list of {role, content} objects")
    lines = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise PromptError(f"messages[{index}] must be an object with a string 'role'")
        lines.append(f"{message['role']}: {_content_text(message.get('content'), index)}")
    return "\n".join(lines)


def _content_text(content: Any, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    raise PromptError(f"messages[{index}].content must be a string or a list of parts")


def completion_prompt(prompt: Any) -> str:
    """The text a completions request is answered from (one prompt per request)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return " ".join(str(t) for t in prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    raise PromptError(
        "'prompt' must be a string, a list of token ids, or a list with one string "
        "(the simulator answers one prompt per request)"
    )


def count_tokens(text: str) -> int:
    """Prompt length in simulated tokens (words), at least 1."""
    return max(1, len(text.split()))
