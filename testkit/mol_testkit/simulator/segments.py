"""Prompts made of segments: deterministic token ids and text for ``(segment_id, tokens)``.

A benchmark trace describes a prompt as segments in order, equal ids meaning equal
tokens (a system prompt, a previous turn). The in-process engine model hashes
:func:`prompt_token_ids`; a replica reached over HTTP (simulated or real) gets
:func:`prompt_text`, one common English word per token. Each word, with its leading
space, is one token of the demo model's byte-level BPE (``mol demo``), so a
completion prompt of N segment tokens is exactly N tokens there (its tokenizer adds no
BOS); other tokenizers are not measured (common English words, most are one token
in large vocabularies too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

from mol_platform.apps.demo.tokenizer import COMMON_WORDS

Segment = tuple[str, int]

# The demo tokenizer's common English words, up to "form" (the order the texts of
# recorded traces depend on).
WORDS = COMMON_WORDS[: COMMON_WORDS.index("form") + 1]


def _seed(segment_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(segment_id.encode(), digest_size=6).digest(), "big")


@lru_cache(maxsize=4096)
def segment_token_ids(segment_id: str, tokens: int) -> tuple[int, ...]:
    """``tokens`` ids that only this segment id produces (a prefix of a longer one's)."""
    base = _seed(segment_id) << 8
    return tuple(range(base, base + tokens))


def prompt_token_ids(segments: Sequence[Segment]) -> list[int]:
    out: list[int] = []
    for segment_id, tokens in segments:
        out.extend(segment_token_ids(segment_id, tokens))
    return out


@lru_cache(maxsize=4096)
def segment_text(segment_id: str, tokens: int) -> str:
    """``tokens`` words, each with a leading space, picked by the segment id."""
    seed = _seed(segment_id)
    n = len(WORDS)
    return "".join(" " + WORDS[(seed + i * 2654435761) % n] for i in range(tokens))


def prompt_text(segments: Sequence[Segment]) -> str:
    return "".join(segment_text(segment_id, tokens) for segment_id, tokens in segments)
