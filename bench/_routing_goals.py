"""What `bench/routing.py` judges its runs against: the adapter-load floors at each
allowed wait, the prefix hit rates a trace allows, and the issue's goal lines (shared
with `bench/routing_tradeoff.py`)."""

from __future__ import annotations

import argparse

from _fleet import FleetShape, OursWithKvEvents, RunResult
from _floor import Fleet, Floor, load_floor, online_floor
from _prefix_bound import HitRate, ideal, placement_bound, trace_hashes
from _routing_rows import SLOS, goodput, hit_rate
from _workload import Arrival

BASELINE = "gie-lora-affinity"
LLMD = "llmd-lora-load-state"
PRECISE = "llmd-precise-prefix"
OURS = "mol-affinity"
OURS_KV = OursWithKvEvents.name
"""Ours told what is cached by the engines' KV events (bench-only variant)."""


def longest_wait(r: RunResult, shape: FleetShape) -> float:
    """The longest a request of the run waited before it started (TTFT less the
    engine's own time to first token)."""
    return max((t - shape.ttft_s for t in r.ttft), default=0.0)


class Floors:
    """Both adapter-load floors of a workload on a fleet, at any allowed wait:
    ``offline`` (no schedule loads less, even one that knows the future; a bound on
    any trace) and ``online`` (the best router that does not know the future, in
    expectation, on stationary Poisson traffic at the trace's rates)."""

    def __init__(self, shape: FleetShape, arrivals: list[Arrival]) -> None:
        self.shape, self.arrivals = shape, arrivals
        self.fleet = Fleet(shape.replicas * shape.max_loras, shape.max_num_seqs,
                           shape.lora_load_s, shape.replicas)  # fmt: skip
        self.mean_service = sum(map(self.service, arrivals)) / len(arrivals)

    def service(self, a: Arrival) -> float:
        return self.shape.ttft_s + (a.max_tokens - 1) * self.shape.itl_s

    def offline(self, wait_s: float) -> Floor:
        return load_floor(self.arrivals, self.fleet, self.service, wait_s=wait_s)

    def online(self, wait_s: float) -> Floor:
        return online_floor(self.arrivals, self.fleet, self.mean_service, wait_s=wait_s)


def floors(
    args: argparse.Namespace, shape: FleetShape, arrivals: list[Arrival],
    results: dict[str, RunResult],
) -> tuple[Floor, Floor, list[str]]:  # fmt: skip
    """The offline floor and the online one at ours' longest wait, and lines with both
    at each of ``--floor-waits``."""
    model = Floors(shape, arrivals)
    waits = [float(w) for w in args.floor_waits.split(",") if w.strip()]
    wait = longest_wait(results[OURS], shape)
    lines = [
        "Adapter-load floors (bench/_floor.py), at each allowed wait before a request starts: "
        "**offline** (no schedule, even one that knows the future, loads less; a bound on "
        "any trace) "
        + "; ".join(model.offline(w).describe() for w in waits)
        + ". **Online** (the best router that does not know the future, in expectation, if "
        "the traffic is stationary Poisson at the trace's rates) "
        + "; ".join(model.online(w).describe() for w in waits) + ".",
        "Longest wait before a request started: "
        + ", ".join(f"{k} {longest_wait(v, shape):.2f} s" for k, v in results.items()) + ".",
    ]
    return model.offline(wait), model.online(wait), lines


def goals(
    results: dict[str, RunResult], routers: int, offline: Floor, online: Floor,
    bound: HitRate, *, stationary: bool = True,
) -> list[str]:
    """The report's goal lines; the loads goal is judged on stationary traffic only
    (``stationary``: the built-in Poisson workload, not a replayed trace)."""
    ours, gie, precise = results[OURS], results[BASELINE], results[PRECISE]
    many = results[f"{OURS} x{routers}"]
    others = {k: v for k, v in results.items() if not k.startswith(OURS)}

    def mark(ok: bool) -> str:
        return "met" if ok else "**not met**"

    agree = (many.loads_per_1000 <= 1.15 * ours.loads_per_1000
             and hit_rate(many) >= 0.95 * hit_rate(ours))
    lines = []
    for slo in SLOS:
        best = max(others, key=lambda k: goodput(others[k], slo))
        ok = goodput(ours, slo) >= goodput(others[best], slo)
        lines.append(f"- highest goodput at TTFT <= {slo:g} s: {goodput(ours, slo):.1%} vs "
                     f"{best} {goodput(others[best], slo):.1%}: {mark(ok)}")
    return [
        *lines,
        f"- prefix hit rate >= llm-d's precise prefix scorer's ({PRECISE}, from the "
        f"engines' KV events): {hit_rate(ours):.1%} vs {hit_rate(precise):.1%}: "
        f"{mark(hit_rate(ours) >= hit_rate(precise))}",
        f"- prefix hit rate >= 90% of the placement bound: {hit_rate(ours):.1%} vs "
        f"{bound.rate:.1%} (x0.9 = {0.9 * bound.rate:.1%}): "
        f"{mark(hit_rate(ours) >= 0.9 * bound.rate - 1e-12)}",
        f"- adapter loads <= 1.10x the online floor at ours' longest wait (stationary "
        f"traffic): {ours.loads_per_1000:.0f} vs {online.describe()}: "
        + (mark(False) + " (no schedule fits)" if online.per_1000 is None else
           f"{ours.loads_per_1000 / max(online.per_1000, 1e-9):.2f}x: "
           + (mark(ours.loads_per_1000 <= 1.10 * online.per_1000) if stationary else
              "not judged (the goal is set for stationary traffic; a trace's sessions "
              "and bursts are not)"))
        + f"; offline floor {offline.describe()}; {BASELINE}: {gie.loads_per_1000:.0f}",
        f"- {routers} independent routers <= 1.15x the loads and >= 0.95x the prefix hit "
        f"rate of one: {many.loads_per_1000 / max(ours.loads_per_1000, 1e-9):.2f}x, "
        f"{hit_rate(many) / max(hit_rate(ours), 1e-9):.2f}x: "
        f"{mark(agree)}",
        "- the routers' adapter-load estimate (`mol_router_adapter_loads_total`, summed) "
        "within 10% of the engines' own count (`mol_engine_adapter_loads_total`, which "
        "the dashboards read where engines export it): one router "
        f"{estimate_error(ours)}, {routers} routers {estimate_error(many)}: "
        + mark(all(abs(r.estimated_loads - r.adapter_loads) <= 0.10 * r.adapter_loads
                   for r in (ours, many))),
    ]


def estimate_error(r: RunResult) -> str:
    """The routers' load estimate against the engines' count, as a signed share."""
    if not r.adapter_loads:
        return f"{r.estimated_loads} against none"
    share = r.estimated_loads / r.adapter_loads - 1
    return f"{share:+.0%} ({r.estimated_loads} / {r.adapter_loads})"


def prefix_bounds(
    arrivals: list[Arrival], shape: FleetShape, half: FleetShape | None
) -> tuple[HitRate, HitRate, HitRate | None, str]:  # fmt: skip
    """The trace's ideal hit rate, the placement bound at ``shape``'s KV (and at
    ``half``'s), and a line that says both."""
    hashes = trace_hashes(arrivals, shape.block_size)
    best = ideal(arrivals, shape.block_size, hashes)

    def bound(s: FleetShape) -> HitRate:
        return placement_bound(arrivals, s.replicas, s.kv_cache_blocks, s.block_size, hashes)

    full = bound(shape)
    low = bound(half) if half is not None else None
    line = (
        f"Prefix hit rate the trace allows (bench/_prefix_bound.py, requests in arrival "
        f"order through the simulator's block hashing): **ideal** (one unbounded cache) "
        f"{best.rate:.1%}; **placement bound** (every session whole on one of "
        f"{shape.replicas} replicas, balanced by prompt tokens, each an LRU prefix cache "
        f"of {shape.kv_cache_blocks:,} blocks) {full.rate:.1%}"
        + (f"; at half the KV ({half.kv_cache_blocks:,} blocks) {low.rate:.1%}"
           if half is not None and low is not None else "") + "."
    )  # fmt: skip
    return best, full, low, line
