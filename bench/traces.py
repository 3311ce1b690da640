"""Write a JSONL trace with prompt segments for `bench/routing.py --trace`.

Three shapes where what is already in a replica's prefix cache matters:

- `chat`: multi-turn chat sessions on a few experts, each expert with a long system
  prompt; turn k repeats turn k-1's prompt and its reply, then a new message.
- `agents`: agent runs whose context grows step by step (tool results and replies
  appended) to tens of thousands of tokens.
- `tenants`: hundreds of tenant adapters, each with its own system prompt,
  single-turn requests with Zipf popularity over the tenants.

`python bench/traces.py chat --out chat.jsonl` (see `--help`); every generator is
deterministic for its `--seed`. Kept free of imports from the rest of bench/ but
`_workload` so that a unit test can load it by path.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import Arrival, to_line, zipf_weights


def _sessions(rng: random.Random, rate: float, duration: float) -> list[float]:
    """Start times of sessions: Poisson at ``rate`` per second for ``duration`` s."""
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append(t)


def multi_turn_chat(
    *, experts: int = 4, system_tokens: int = 2000, sessions_per_s: float = 2.0,
    duration: float = 120.0, turns: tuple[int, int] = (2, 8), think_s: float = 8.0,
    message_tokens: tuple[int, int] = (20, 200), reply_tokens: int = 150, seed: int = 1,
) -> list[Arrival]:  # fmt: skip
    """Chat sessions, each on one of ``experts`` adapters (Zipf(1) popularity) whose
    system prompt (``system_tokens``) starts every turn."""
    rng = random.Random(seed)
    names = [f"chat/expert{i}@v1" for i in range(experts)]
    weights = zipf_weights(experts, 1.0)
    out: list[Arrival] = []
    for s, start in enumerate(_sessions(rng, sessions_per_s, duration)):
        adapter = rng.choices(names, weights)[0]
        session = f"chat-s{s}"
        segments: list[tuple[str, int]] = [(f"sys-{adapter}", system_tokens)]
        t = start
        for k in range(rng.randint(*turns)):
            if k:
                segments.append((f"{session}-r{k - 1}", reply_tokens))
                t += rng.expovariate(1 / think_s)
            segments.append((f"{session}-m{k}", rng.randint(*message_tokens)))
            out.append(_arrival(t, adapter, f"user-{s}", session, segments, reply_tokens))
    out.sort(key=lambda a: a.t)
    return out


def agents(
    *, adapters: int = 3, tools_tokens: int = 3000, runs_per_s: float = 0.5,
    duration: float = 120.0, steps: tuple[int, int] = (5, 30),
    observation_tokens: tuple[int, int] = (300, 3000), reply_tokens: int = 200,
    step_s: float = 2.0, max_context: int = 60_000, seed: int = 1,
) -> list[Arrival]:  # fmt: skip
    """Agent runs: a tools prompt, then per step the previous reply and a tool result;
    the context grows to tens of thousands of tokens (capped at ``max_context``)."""
    rng = random.Random(seed)
    names = [f"agent/tool-user{i}@v1" for i in range(adapters)]
    out: list[Arrival] = []
    for r, start in enumerate(_sessions(rng, runs_per_s, duration)):
        adapter = names[r % adapters]
        session = f"agent-r{r}"
        segments: list[tuple[str, int]] = [(f"tools-{adapter}", tools_tokens),
                                           (f"{session}-task", rng.randint(50, 400))]  # fmt: skip
        t = start
        for k in range(rng.randint(*steps)):
            if k:
                segments.append((f"{session}-r{k - 1}", reply_tokens))
                segments.append((f"{session}-o{k}", rng.randint(*observation_tokens)))
                t += rng.expovariate(1 / step_s)
            if sum(n for _, n in segments) + reply_tokens > max_context:
                break
            out.append(_arrival(t, adapter, f"agent-{r}", session, segments, reply_tokens))
    out.sort(key=lambda a: a.t)
    return out


def tenants(
    *, tenants: int = 300, zipf: float = 1.0, rate: float = 50.0, duration: float = 120.0,
    system_tokens: tuple[int, int] = (500, 2500), message_tokens: tuple[int, int] = (30, 300),
    reply_tokens: int = 100, seed: int = 1,
) -> list[Arrival]:  # fmt: skip
    """Single-turn requests to ``tenants`` adapters, each with its own system prompt."""
    rng = random.Random(seed)
    names = [f"tenant{i:04d}/app@v1" for i in range(tenants)]
    system = {n: rng.randint(*system_tokens) for n in names}
    weights = zipf_weights(tenants, zipf)
    out: list[Arrival] = []
    for i, t in enumerate(_sessions(rng, rate, duration)):
        adapter = rng.choices(names, weights)[0]
        segments = [(f"sys-{adapter}", system[adapter]), (f"q{i}", rng.randint(*message_tokens))]
        out.append(_arrival(t, adapter, f"user-{rng.randrange(5000)}", None, segments,
                            reply_tokens))  # fmt: skip
    return out


def _arrival(
    t: float, adapter: str | None, user: str, session: str | None,
    segments: list[tuple[str, int]], max_tokens: int,
) -> Arrival:  # fmt: skip
    frozen = tuple(segments)
    return Arrival(t, adapter, user, sum(n for _, n in frozen), max_tokens, frozen, session)


SHAPES: dict[str, Callable[..., list[Arrival]]] = {
    "chat": multi_turn_chat, "agents": agents, "tenants": tenants,
}  # fmt: skip


def write(path: Path, arrivals: list[Arrival]) -> list[Arrival]:
    """``arrivals`` as a JSONL trace at ``path`` (``--trace``'s input); returns them."""
    with path.open("w", encoding="utf-8") as f:
        for a in arrivals:
            f.write(json.dumps(to_line(a)) + "\n")
    return arrivals


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shape", choices=sorted(SHAPES), help="which workload")
    p.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    p.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.duration <= 0:
        p.error("--duration must be > 0")
    arrivals = write(args.out, SHAPES[args.shape](duration=args.duration, seed=args.seed))
    tokens = sum(a.prompt_tokens for a in arrivals)
    print(f"{args.out}: {len(arrivals):,} requests, {tokens:,} prompt tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
