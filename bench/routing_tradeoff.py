"""mol-affinity's adapter loads against its latency: the knobs that trade one for the
other, swept, beside the peers and the adapter-load floors.

One command (`python bench/routing_tradeoff.py`): bench/routing.py's default workload
and fleet, on its virtual clock, one router (its workload and fleet options are taken
too, e.g. `--trace FILE --utilisation 0.7`, and `--ours-knobs` sets the point the
sweep starts from). Fewer loads means concentrating each adapter's traffic on fewer
replicas, which queues it; each swept knob moves alone away from ours' defaults:
`slack` and `load_factor` set the bound under which an adapter's traffic piles onto its
home before spilling down its order (larger: fewer copies, longer queues), `hot_share`
the demand share above which an adapter is never evicted for a colder one.
`load_tokens` (step 0's price of a load that evicts) and `queue_tokens` (step 0's price
of a request ahead in a replica's queue: lower keeps sessions where their prefixes are
cached longer, piling them up) act only on prompts with shared prefixes, so they change
nothing on the default workload and are swept only when given (`--load-tokens`,
`--queue-tokens`). The peers run once. Prints a table and where ours' loads meet
`--goal` (1.10) times the online floor; on a trace with shared prefixes also where
ours' prefix-cache hit rate meets llm-d's precise prefix scorer's, beside what the trace
allows (bench/_prefix_bound.py), and at what goodput. `--write` writes the
`routing-tradeoff` section of docs/benchmarks.md (`--section` names another) and its
figures in docs/img/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fleet import FleetShape, RunResult, run_policy
from _machine import machine_info
from _prefix_bound import HitRate
from _report import write_section
from _routing_goals import BASELINE, LLMD, OURS, PRECISE, Floors, longest_wait, prefix_bounds
from _routing_rows import goodput, ms
from mol_router.replicas.policy.mol import MolAffinity
from routing import ROOT, parse_args, setup

SECTION = "routing-tradeoff"
SWEPT = {"slack": "slacks", "load_factor": "load_factors", "hot_share": "hot_shares",
         "load_tokens": "load_tokens", "queue_tokens": "queue_tokens"}
"""Each swept knob of ours and the option (its ``argparse`` name) that lists its values."""
PEERS = (PRECISE, LLMD, BASELINE, "least-loaded", "round-robin")


def _values(text: str) -> list[float]:
    try:
        out = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"numbers separated by commas, not {text!r}") from None
    return out


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    """This benchmark's options, and bench/routing.py's for the rest (its HTTP leg off)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slacks", type=_values, default=_values("0,1,2,4,8,16"))
    p.add_argument("--load-factors", type=_values, default=_values("1,1.1,1.25,1.5,2,3"))
    p.add_argument("--hot-shares", type=_values, default=_values("0.001,0.003,0.01,0.03,0.1"))
    p.add_argument("--load-tokens", type=_values, default=[],
                   help="also sweep load_tokens (acts on prompts with shared prefixes only)")
    p.add_argument("--queue-tokens", type=_values, default=[],
                   help="also sweep queue_tokens (acts on prompts with shared prefixes only)")
    p.add_argument("--section", default=SECTION,
                   help=f"the docs/benchmarks.md section to write (default {SECTION})")
    p.add_argument("--goal", type=float, default=1.10,
                   help="loads goal, times the online floor (default 1.10)")
    p.add_argument("--write", action="store_true",
                   help=f"write docs/benchmarks.md's {SECTION} section and its figure")
    own, rest = p.parse_known_args(argv)
    if own.goal < 1:
        p.error("--goal must be >= 1")
    if re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", own.section) is None:
        p.error(f"--section must be lowercase words joined by '-', not {own.section!r}")
    routing = parse_args([*rest, "--no-http"])
    for knob, values in families(own).items():
        try:  # the policy's own range checks, before minutes of runs
            for v in values:
                MolAffinity({**routing.ours_knobs, knob: v})
        except ValueError as exc:
            p.error(str(exc))
    return own, routing


def sweeps(
    own: argparse.Namespace, base: Mapping[str, Any]
) -> dict[str, list[tuple[float, dict[str, Any]]]]:
    """Per knob, its line: each value with ours' starting point, that knob moved to it
    (the starting point itself where the value is its own)."""
    start = MolAffinity(base)
    return {k: [(v, dict(base) if v == getattr(start, k) else {**base, k: v})
                for v in sorted(vs)] for k, vs in families(own).items() if vs}  # fmt: skip


def families(own: argparse.Namespace) -> dict[str, list[float]]:
    """Each swept knob's values, as the options give them."""
    return {knob: getattr(own, option) for knob, option in SWEPT.items()}


def _fmt(v: float) -> str:
    return f"{v:g}"


def start_knobs(knobs: Mapping[str, Any]) -> str:
    """The swept knobs' values where the sweep starts: ``knobs`` over ours' defaults."""
    policy = MolAffinity(knobs)
    return ", ".join(f"`{k}` {_fmt(getattr(policy, k))}"
                     for k in SWEPT)


def main(argv: list[str] | None = None) -> int:
    own, args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shape, arrivals, described = setup(args)
    if not arrivals:
        print("no requests to replay", file=sys.stderr)
        return 2
    started = time.monotonic()
    model = Floors(shape, arrivals)
    online0 = model.online(0.0)
    if online0.per_1000 is None:
        print(f"the online floor: {online0.describe()}", file=sys.stderr)
        return 2
    floor = online0.per_1000
    base = dict(args.ours_knobs)
    runs: dict[str, RunResult] = {}

    def ours(knobs: dict[str, Any]) -> RunResult:
        key = json.dumps(knobs, sort_keys=True)
        if key not in runs:
            label = ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(knobs.items())) or "defaults"
            t0 = time.monotonic()
            runs[key] = run_policy(label, OURS, 1, arrivals, shape, knobs)
            print(f"{row(runs[key], floor, model, shape)}  ({time.monotonic() - t0:.1f} s)",
                  flush=True)  # fmt: skip
        return runs[key]

    print("\n".join(HEADER), flush=True)
    start = ours(base)
    lines = {knob: [(_fmt(v), ours(k)) for v, k in sets]
             for knob, sets in sweeps(own, base).items()}  # fmt: skip
    peers = []
    for name in PEERS:
        peers.append(r := run_policy(name, name, 1, arrivals, shape))
        print(row(r, floor, model, shape), flush=True)
    points = list(runs.values())
    verdict = judge(points, start, peers, model, shape, own.goal)
    bounds = None
    if any(a.segments is not None for a in arrivals):  # shared prefixes: the hit rate too
        best, bound, _, _ = prefix_bounds(arrivals, shape, None)
        bounds = (best, bound)
        verdict += hit_judge(points, start, peers, best, bound, shape)
    print("\n".join(verdict))
    if own.write:
        write(own, args, described, shape, points, peers, lines, model, verdict, started,
              bounds)  # fmt: skip
    return 0


HEADER = [
    "| run | adapter loads / 1,000 | x online floor, no wait | x online floor at its "
    "longest wait | goodput TTFT <= 1 s | goodput TTFT <= 2 s | TTFT p99 ms "
    "| longest wait s | prefix hit rate |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
]


def row(r: RunResult, floor: float, model: Floors, shape: FleetShape) -> str:
    wait = longest_wait(r, shape)
    at_wait = model.online(wait).per_1000
    ratio = f"{r.loads_per_1000 / at_wait:.2f}x" if at_wait else "infeasible"
    return (
        f"| {r.label} | {r.loads_per_1000:.0f} | {r.loads_per_1000 / floor:.2f}x | {ratio} "
        f"| {goodput(r, 1.0):.1%} | {goodput(r, 2.0):.1%} | {ms(r, 99):.0f} | {wait:.2f} "
        f"| {r.prefix_hit_rate:.1%} |"
    )


def judge(
    points: list[RunResult], start: RunResult, peers: list[RunResult], model: Floors,
    shape: FleetShape, goal: float,
) -> list[str]:  # fmt: skip
    """Where ours' curve meets ``goal`` x the online floor, if anywhere, and at what
    goodput; its frontier (no point with fewer loads has a higher goodput)."""
    floor = model.online(0.0).per_1000 or 0.0
    frontier, best = [], -1.0
    for r in sorted(points, key=lambda r: (r.loads_per_1000, -goodput(r, 1.0))):
        if goodput(r, 1.0) > best:
            frontier.append(r)
            best = goodput(r, 1.0)

    def at_wait(r: RunResult) -> float:
        return model.online(longest_wait(r, shape)).per_1000 or 0.0

    met = [r for r in points if r.loads_per_1000 <= goal * floor]
    met_wait = [r for r in points if at_wait(r) and r.loads_per_1000 <= goal * at_wait(r)]
    fewest = min(points, key=lambda r: r.loads_per_1000)
    if met:
        top = max(met, key=lambda r: goodput(r, 1.0))
        meets = (f"met at {len(met)} of {len(points)} points; the best of them: "
                 f"{top.label}, {top.loads_per_1000:.0f} per 1,000 at {goodput(top, 1.0):.1%} "
                 "goodput (TTFT <= 1 s)")  # fmt: skip
    else:
        meets = (f"**nowhere**: the fewest loads, {fewest.loads_per_1000:.0f} per 1,000 "
                 f"({fewest.label}), are {fewest.loads_per_1000 / floor:.2f}x it, at "
                 f"{goodput(fewest, 1.0):.1%} goodput (TTFT <= 1 s)")  # fmt: skip
    peer = min(peers, key=lambda r: r.loads_per_1000)
    good = [r for r in points if goodput(r, 1.0) >= 0.9]
    if good:
        cheap = min(good, key=lambda r: r.loads_per_1000)
        keeping = (f"{cheap.loads_per_1000:.0f} per 1,000 ({cheap.label}, "
                   f"{cheap.loads_per_1000 / floor:.2f}x the online floor, "
                   f"{goodput(cheap, 1.0):.1%})")  # fmt: skip
    else:
        keeping = "none of the points keeps 90%"
    return [
        f"- online floor at no wait: {model.online(0.0).describe()}; {goal:.2f}x it: "
        f"{goal * floor:.0f}; offline floor at no wait: {model.offline(0.0).describe()}",
        f"- ours' curve against {goal:.2f}x the online floor at no wait: {meets}",
        f"- the fewest loads that keep goodput at TTFT <= 1 s at 90% or more: {keeping}",
        f"- judged at each point's own longest wait (the floor falls as the wait grows, as "
        f"bench/routing.py judges): met at {len(met_wait)} of {len(points)} points",
        f"- ours' starting point ({start.label}): {start.loads_per_1000:.0f} per 1,000, "
        f"{start.loads_per_1000 / floor:.2f}x, {goodput(start, 1.0):.1%} goodput; the "
        f"peer with the fewest loads, {peer.label}: {peer.loads_per_1000:.0f} per 1,000 at "
        f"{goodput(peer, 1.0):.1%}",
        "- frontier (no point with fewer loads has a higher goodput at TTFT <= 1 s): "
        + "; ".join(f"{r.label}: {r.loads_per_1000:.0f}, {goodput(r, 1.0):.1%}"
                    for r in frontier),
    ]


def hit_judge(
    points: list[RunResult], start: RunResult, peers: list[RunResult], best: HitRate,
    bound: HitRate, shape: FleetShape,
) -> list[str]:  # fmt: skip
    """Where ours' points reach llm-d's precise prefix scorer's hit rate, and at what
    goodput; the highest hit rate at the best peer's goodput or more; the frontier (no
    point with a higher hit rate has a higher goodput), beside what the trace allows."""
    precise = next(r for r in peers if r.label == PRECISE)
    target = precise.prefix_hit_rate
    reach = [r for r in points if r.prefix_hit_rate >= target - 1e-12]
    if reach:
        top = max(reach, key=lambda r: goodput(r, 1.0))
        meets = (f"met at {len(reach)} of {len(points)} points; the best goodput of them: "
                 f"{top.label}, {top.prefix_hit_rate:.1%} at {goodput(top, 1.0):.1%}")
    else:
        most = max(points, key=lambda r: r.prefix_hit_rate)
        meets = (f"**nowhere**: ours' highest, {most.prefix_hit_rate:.1%} ({most.label}), "
                 f"at {goodput(most, 1.0):.1%} goodput")
    peer = max(peers, key=lambda r: goodput(r, 1.0))
    keep = [r for r in points if goodput(r, 1.0) >= goodput(peer, 1.0)]
    if keep:
        hit = max(keep, key=lambda r: r.prefix_hit_rate)
        keeping = f"{hit.prefix_hit_rate:.1%} ({hit.label}, {goodput(hit, 1.0):.1%})"
    else:
        keeping = "no point of ours reaches it"
    frontier, top_goodput = [], -1.0
    for r in sorted(points, key=lambda r: (-r.prefix_hit_rate, -goodput(r, 1.0))):
        if goodput(r, 1.0) > top_goodput:
            frontier.append(r)
            top_goodput = goodput(r, 1.0)
    return [
        f"- prefix hit rate the trace allows (bench/_prefix_bound.py): ideal (one unbounded "
        f"cache) {best.rate:.1%}; placement bound (every session whole on one of "
        f"{shape.replicas} replicas, balanced, each an LRU cache of "
        f"{shape.kv_cache_blocks:,} blocks) {bound.rate:.1%}",
        f"- ours' curve against llm-d's precise prefix scorer's hit rate ({target:.1%} at "
        f"{goodput(precise, 1.0):.1%} goodput, TTFT <= 1 s): {meets}",
        f"- ours' highest hit rate at the best peer's goodput or more ({peer.label}, "
        f"{goodput(peer, 1.0):.1%}): {keeping}; ours' starting point ({start.label}): "
        f"{start.prefix_hit_rate:.1%} at {goodput(start, 1.0):.1%}",
        "- frontier (no point with a higher hit rate has a higher goodput at TTFT <= 1 s): "
        + "; ".join(f"{r.label}: {r.prefix_hit_rate:.1%}, {goodput(r, 1.0):.1%}"
                    for r in frontier),
    ]


def write(
    own: argparse.Namespace, args: argparse.Namespace, described: str, shape: FleetShape,
    points: list[RunResult], peers: list[RunResult],
    lines: dict[str, list[tuple[str, RunResult]]], model: Floors, verdict: list[str],
    started: float, bounds: tuple[HitRate, HitRate] | None = None,
) -> None:  # fmt: skip
    from _plot import hit_figure, tradeoff_figure

    floor = model.online(0.0).per_1000 or 0.0
    marks = [("online floor, no wait", floor, "-"),
             (f"{own.goal:.2f}x online floor", own.goal * floor, ":"),
             ("offline floor, no wait", model.offline(0.0).per_1000 or 0.0, "--"),
             ("online floor, 2 s wait", model.online(2.0).per_1000 or 0.0, "-.")]  # fmt: skip
    title = f"{shape.replicas} simulated replicas, {described}"
    tradeoff_figure(lines, peers, marks, lambda r: goodput(r, 1.0), lambda r: ms(r, 99),
                    ROOT / f"docs/img/{own.section}.png", title)  # fmt: skip
    figures = [f"![Adapter loads against goodput and TTFT p99](img/{own.section}.png)"]
    if bounds is not None:
        hit_figure(lines, peers, [("ideal (one unbounded cache)", bounds[0].rate, "-"),
                                  ("placement bound", bounds[1].rate, "--")],
                   lambda r: goodput(r, 1.0), ROOT / f"docs/img/{own.section}-prefix.png",
                   title)  # fmt: skip
        figures.append(f"![Prefix-cache hit rate against goodput](img/{own.section}-prefix.png)")
    command = "python bench/routing_tradeoff.py " + " ".join(sys.argv[1:])
    heading = "Routing: adapter loads against latency"
    if bounds is not None:
        heading = "Routing: adapter loads and prefix-cache hits against latency"
    if args.trace is not None:
        heading += f" on `{args.trace.name}`"
    body = "\n".join([
        f"## {heading} (`bench/routing_tradeoff.py`)",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine_info().markdown()}; "
        f"`{command.strip()}` ({time.monotonic() - started:.0f} s wall, on a virtual clock).",
        "",
        f"Fleet: {shape.replicas} replicas, max_loras {shape.max_loras}, max_num_seqs "
        f"{shape.max_num_seqs}, metrics read every {shape.scrape_interval * 1000:g} ms; "
        f"one router. Workload: {described}. Each of ours' rows moves one knob away from "
        f"its starting point ({start_knobs(args.ours_knobs)}); the peers run once, at "
        "their defaults.",
        "",
        *HEADER,
        *(row(r, floor, model, shape) for r in [*points, *peers]),
        "",
        *verdict,
        "",
        *figures,
    ])  # fmt: skip
    write_section(ROOT / "docs/benchmarks.md", own.section, body)


if __name__ == "__main__":
    raise SystemExit(main())
