"""Requests to replay: a synthetic Zipf workload or a JSONL trace.

Kept free of imports from the rest of bench/ so that a unit test can load it by path.
Trace lines (one JSON object each)::

    {"t": 1.5, "adapter": "ns/a@v1" or null, "user": "u1", "session": "s1",
     "segments": [["sys-a", 1200], ["s1-m1", 40]], "prompt_tokens": 1240, "max_tokens": 64}

``segments`` (optional) is the prompt as ``[segment_id, tokens]`` in order; equal ids
mean equal tokens, so a session's turn k carries turn k-1's segments, then the reply
to it, then the new message; ``prompt_tokens`` must be their sum. A line without
``segments`` is one segment of its own (it shares no prefix). ``session`` is optional.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

Segments = tuple[tuple[str, int], ...]
_SEGMENT_ID = re.compile(r"[A-Za-z0-9._:@/-]{1,200}")


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float
    """Seconds from the start of the run."""
    adapter: str | None
    user: str
    prompt_tokens: int
    max_tokens: int
    segments: Segments | None = None
    """The prompt as (segment id, tokens) in order; None: one segment of its own."""
    session: str | None = None


def zipf_weights(n: int, s: float) -> list[float]:
    """Popularity of ranks 1..n under Zipf(s), normalised to sum to 1."""
    raw = [1.0 / (k**s) for k in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def synthetic(
    *, adapters: int, zipf: float, rate: float, duration: float, seed: int,
    prompt_tokens: int, max_tokens: int, users: int = 1000,
) -> list[Arrival]:  # fmt: skip
    """Open-loop Poisson arrivals at ``rate`` per second for ``duration`` seconds, each
    for an adapter drawn by Zipf popularity (names ``bench/a0001@v1``...)."""
    rng = random.Random(seed)
    names = [f"bench/a{i:04d}@v1" for i in range(1, adapters + 1)]
    cum = []
    acc = 0.0
    for w in zipf_weights(adapters, zipf):
        acc += w
        cum.append(acc)
    out: list[Arrival] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        u = rng.random() * acc
        lo, hi = 0, len(cum) - 1
        while lo < hi:  # first index with cum >= u
            mid = (lo + hi) // 2
            if cum[mid] < u:
                lo = mid + 1
            else:
                hi = mid
        out.append(Arrival(t, names[lo], f"user-{rng.randrange(users)}", prompt_tokens, max_tokens))


def _int_field(row: dict[str, object], name: str, line: int) -> int:
    value = row.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"trace line {line}: {name!r} must be an integer, got {value!r}")
    return value


def _segments(row: dict[str, object], line: int) -> Segments | None:
    raw = row.get("segments")
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"trace line {line}: 'segments' must be a non-empty list")
    out = []
    for k, seg in enumerate(raw):
        ok = isinstance(seg, list) and len(seg) == 2
        sid, tokens = (seg[0], seg[1]) if ok else (None, None)
        if not isinstance(sid, str) or not _SEGMENT_ID.fullmatch(sid):
            raise ValueError(
                f"trace line {line}: segments[{k}] must be [id, tokens] with an id of 1-200 "
                f"letters, digits or ._:@/-, got {seg!r}"
            )
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= 10**7:
            raise ValueError(
                f"trace line {line}: segments[{k}] tokens must be an integer 1..10^7"
            )
        out.append((sid, tokens))
    return tuple(out)


def parse_line(row: object, line: int, speed: float = 1.0) -> Arrival:
    """One trace line, validated (ValueError naming the line and the field)."""
    if not isinstance(row, dict):
        raise ValueError(f"trace line {line}: expected an object")
    t = row.get("t")
    if not isinstance(t, int | float) or isinstance(t, bool) or not 0 <= t < math.inf:
        raise ValueError(f"trace line {line}: 't' must be a number >= 0, got {t!r}")
    adapter = row.get("adapter")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise ValueError(f"trace line {line}: 'adapter' must be a name or null")
    user = row.get("user", "")
    session = row.get("session")
    if session is not None and not isinstance(session, str):
        raise ValueError(f"trace line {line}: 'session' must be a string or absent")
    prompt = _int_field(row, "prompt_tokens", line)
    max_tokens = _int_field(row, "max_tokens", line)
    if prompt < 0 or max_tokens < 1:
        raise ValueError(f"trace line {line}: prompt_tokens >= 0 and max_tokens >= 1")
    segments = _segments(row, line)
    if segments is not None and sum(n for _, n in segments) != prompt:
        total = sum(n for _, n in segments)
        raise ValueError(
            f"trace line {line}: prompt_tokens ({prompt}) must equal the segments' sum ({total})"
        )
    return Arrival(float(t) / speed, adapter, str(user), prompt, max_tokens, segments, session)


def load_trace(path: Path, speed: float = 1.0) -> list[Arrival]:
    """One request a line (see the module docstring); ``t`` (seconds from start) is
    divided by ``speed``. Sorted by time."""
    if not speed > 0 or math.isinf(speed):
        raise ValueError("--speed must be a positive number")
    out: list[Arrival] = []
    with path.open(encoding="utf-8") as f:
        for i, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"trace line {i}: not JSON ({e.msg})") from None
            out.append(parse_line(row, i, speed))
    out.sort(key=lambda a: a.t)
    return out


def to_line(a: Arrival) -> dict[str, object]:
    """The trace line of an arrival (``load_trace``'s input)."""
    row: dict[str, object] = {"t": round(a.t, 6), "adapter": a.adapter, "user": a.user}
    if a.session is not None:
        row["session"] = a.session
    if a.segments is not None:
        row["segments"] = [list(s) for s in a.segments]
    row["prompt_tokens"] = a.prompt_tokens
    row["max_tokens"] = a.max_tokens
    return row
