"""Requests to replay: a synthetic Zipf workload or a JSONL trace.

Kept free of imports from the rest of bench/ so that a unit test can load it by path.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float
    """Seconds from the start of the run."""
    adapter: str | None
    user: str
    prompt_tokens: int
    max_tokens: int


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


def load_trace(path: Path, speed: float = 1.0) -> list[Arrival]:
    """One request a line: ``{"t", "adapter", "user", "prompt_tokens", "max_tokens"}``;
    ``t`` (seconds from start) is divided by ``speed``. Sorted by time."""
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
            if not isinstance(row, dict):
                raise ValueError(f"trace line {i}: expected an object")
            t = row.get("t")
            if not isinstance(t, int | float) or isinstance(t, bool) or t < 0:
                raise ValueError(f"trace line {i}: 't' must be a number >= 0, got {t!r}")
            adapter = row.get("adapter")
            if adapter is not None and (not isinstance(adapter, str) or not adapter):
                raise ValueError(f"trace line {i}: 'adapter' must be a name or null")
            user = row.get("user", "")
            prompt = _int_field(row, "prompt_tokens", i)
            max_tokens = _int_field(row, "max_tokens", i)
            if prompt < 0 or max_tokens < 1:
                raise ValueError(f"trace line {i}: prompt_tokens >= 0 and max_tokens >= 1")
            out.append(Arrival(float(t) / speed, adapter, str(user), prompt, max_tokens))
    out.sort(key=lambda a: a.t)
    return out
