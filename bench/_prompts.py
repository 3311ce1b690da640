"""Chat requests of realistic length for the router benchmarks: a long system prompt
shared by every request, a session's context shared by its few turns, and a question
of each request's own.

A router that routes by prompt prefix does work proportional to the prompt (ours
hashes it, vllm-router's cache_aware walks and grows a radix tree of its text), so
short requests understate that cost. The body is a template with two slots, the
session number and the request number, filled in by the load generator for every
request (`wrk_post.lua`, or `fill` here), so every session adds a new branch to the
routers' prefix structures and every request a new leaf, as production traffic does.
``ACTIVE`` sessions are under way at once and their turns interleave, as concurrent
users' do: consecutive requests share the system prompt, not the session.
The text is deterministic (seeded), about ``CHARS_PER_TOKEN`` characters per token
of English, as the routers themselves estimate.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

CHARS_PER_TOKEN = 4
TURNS = 4
"""Requests per session: they share the session's context and differ in the question."""
ACTIVE = 64
"""Sessions under way at once: request n belongs to session ``session_of(n)``."""
DEFAULT_TOKENS = (1000, 4000)
SESSION, REQUEST = "\x01", "\x02"  # slots; JSON writes them as \u0001 and \u0002
_VOCABULARY = (
    "the request router engine adapter replica cache prefix model tenant token queue "
    "latency budget policy answer question context document summary review change test "
    "service cluster deploy version metric trace error retry limit stream event block "
    "memory slot load spill home order share demand session history turn system user "
    "assistant must should never always when where which because while after before "
    "each every some most first last next other same new old long short fast slow "
    "small large clear careful brief exact safe stable simple a an of to in on for with "
    "by from at as is are was be it this that these those and or but not so then"
)
_WORDS = _VOCABULARY.split(" ")


def _text(rng: random.Random, chars: int) -> str:
    """Sentences of random words, ``chars`` characters long (at least one word)."""
    out: list[str] = []
    size = 0
    while size < chars:
        n = rng.randint(6, 16)
        sentence = " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars].rstrip() or "Hello."


@dataclass(frozen=True)
class Template:
    """A request body split at its two slots: head + session + mid + request + tail."""

    head: str
    mid: str
    tail: str

    def fill(self, request: int, start: int = 0) -> bytes:
        """The body of request number ``request`` (from ``start``), as wrk_post.lua
        builds it."""
        n = start + request
        return f"{self.head}{session_of(n)}{self.mid}{n}{self.tail}".encode()

    def write(self, path: Path, start: int = 0) -> Path:
        """The file wrk_post.lua reads: a header line (requests per session, sessions
        under way, the first request's number), then the three parts, one a line
        (JSON text never holds a raw newline)."""
        path.write_text(f"mol-template {TURNS} {ACTIVE} {start}\n{self.head}\n{self.mid}\n"
                        f"{self.tail}\n")
        return path


def session_of(n: int) -> int:
    """The session of request number ``n``: ``ACTIVE`` sessions of ``TURNS`` requests
    each take turns, then the next ``ACTIVE`` start."""
    return n // (ACTIVE * TURNS) * ACTIVE + n % ACTIVE


def chat_template(tokens: int, stream: bool, *, seed: int = 7) -> Template:
    """A chat completion body of about ``tokens`` prompt tokens: a system prompt (half
    of them, the same in every request), a session's document and the assistant's
    summary of it (two fifths, the same for the session's turns), and the request's
    question (the rest)."""
    if tokens < 20:
        raise ValueError("a long prompt needs at least 20 tokens")
    chars = tokens * CHARS_PER_TOKEN
    rng = random.Random(seed)
    system = "You are the support assistant of a model-serving platform. " + _text(
        rng, chars // 2)
    document = _text(rng, chars * 3 // 10)
    summary = _text(rng, chars // 10)
    question = _text(rng, chars // 10)
    body = {
        "model": "chat", "max_tokens": 8, "stream": stream,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Session {SESSION}. The document: {document}"},
            {"role": "assistant", "content": summary},
            {"role": "user", "content": f"Question {REQUEST}: {question}"},
        ],
    }  # fmt: skip
    text = json.dumps(body)
    head, rest = text.split(json.dumps(SESSION)[1:-1], 1)
    mid, tail = rest.split(json.dumps(REQUEST)[1:-1], 1)
    return Template(head, mid, tail)


def parse_tokens(spec: str) -> tuple[int, ...]:
    """``--prompt-tokens``' value: comma-separated counts; "" or "0" for none."""
    out = tuple(int(p) for p in spec.split(",") if p.strip() and int(p) != 0)
    if any(n < 20 or n > 200_000 for n in out):
        raise ValueError("prompt token counts must be within 20..200000")
    return out
