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

Segment = tuple[str, int]

_TEXT = (
    "the a an of to and in is it you that he was for on are with as his they be at one "
    "have this from or had by hot word but what some we can out other were all there when "
    "up use your how said each she which do their time if will way about many then them "
    "write would like so these her long make thing see him two has look more day could go "
    "come did number sound no most people my over know water than call first who may down "
    "side been now find any new work part take get place made live where after back little "
    "only round man year came show every good me give our under name very through just form"
)
WORDS = tuple(_TEXT.split())


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


def segment_text(segment_id: str, tokens: int) -> str:
    """``tokens`` words, each with a leading space, picked by the segment id."""
    seed = _seed(segment_id)
    n = len(WORDS)
    return "".join(" " + WORDS[(seed + i * 2654435761) % n] for i in range(tokens))


def prompt_text(segments: Sequence[Segment]) -> str:
    return "".join(segment_text(segment_id, tokens) for segment_id, tokens in segments)
