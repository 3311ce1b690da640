"""Prompt segments: deterministic token ids for the engine model, text for HTTP replicas."""

from __future__ import annotations

from mol_platform.apps.demo.tokenizer import train_tokenizer
from mol_testkit.simulator.segments import (
    prompt_text,
    prompt_token_ids,
    segment_text,
    segment_token_ids,
)


def test_equal_ids_give_equal_tokens_and_others_differ() -> None:
    assert segment_token_ids("sys-a", 50) == segment_token_ids("sys-a", 50)
    assert segment_token_ids("sys-a", 80)[:50] == segment_token_ids("sys-a", 50)
    assert not set(segment_token_ids("sys-a", 50)) & set(segment_token_ids("sys-b", 50))
    ids = prompt_token_ids([("sys-a", 5), ("m", 3)])
    assert ids == [*segment_token_ids("sys-a", 5), *segment_token_ids("m", 3)]
    assert max(ids) < 2**63  # fits the hash's 64-bit encoding


def test_segment_text_is_one_demo_token_a_word() -> None:
    tokenizer = train_tokenizer(0, 2048)  # the demo model's (mol demo --seed 0)
    segments = [("sys-chat", 300), ("s1-m0", 17), ("s1-r0", 40)]
    text = prompt_text(segments)
    assert text == "".join(segment_text(s, n) for s, n in segments)
    assert text != prompt_text([("sys-code", 300), ("s1-m0", 17), ("s1-r0", 40)])
    assert len(tokenizer.encode(text, add_special_tokens=False).ids) == 357
    for sid, n in segments:
        assert len(tokenizer.encode(segment_text(sid, n), add_special_tokens=False).ids) == n
