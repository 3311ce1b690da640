"""The routing benchmark's tables: a row per policy run (bench/routing.py)."""

from __future__ import annotations

from _fleet import RunResult
from _report import percentile


def ms(r: RunResult, q: float) -> float:
    """TTFT percentile in ms (infinite when no request got a first token)."""
    return percentile(r.ttft, q) * 1000 if r.ttft else float("inf")


SLOS = (1.0, 2.0)
"""TTFT bounds (s) whose goodput the table shows; ``--slo-ttft`` adds more."""


def goodput(r: RunResult, slo: float) -> float:
    """Share of the run's requests whose first token came within ``slo`` seconds."""
    return sum(t <= slo for t in r.ttft) / max(r.requests, 1)


def hit_rate(r: RunResult) -> float:
    """Prompt tokens found in the replicas' prefix caches over prompt tokens looked up."""
    return r.prefix_hits / r.prefix_queries if r.prefix_queries else 0.0


def header(slos: tuple[float, ...]) -> list[str]:
    good = " | ".join(f"goodput TTFT <= {s:g} s" for s in slos)
    return [
        f"| policy | {good} | TTFT p50 ms | TTFT p99 ms | prefix hit rate | adapter loads "
        "/ 1,000 req (disk) | router's estimate / 1,000 | replicas per adapter "
        "| throughput req/s |",
        "|---|" + "---:|" * (len(slos) + 7),
    ]


def row(r: RunResult, slos: tuple[float, ...] = SLOS) -> str:
    """A row of the in-process table."""
    good = " | ".join(f"{goodput(r, s):.1%}" for s in slos)
    return (
        f"| {r.label} | {good} | {ms(r, 50):.0f} | {ms(r, 99):.0f} | {hit_rate(r):.1%} "
        f"| {r.loads_per_1000:.0f} ({1000 * r.disk_loads / max(r.requests, 1):.0f}) "
        f"| {1000 * r.estimated_loads / r.requests:.0f} | {r.replicas_per_adapter:.2f} "
        f"| {r.throughput:.1f} |"
    )


HTTP_HEADER = [
    "| router | adapter loads / 1,000 req | prefix hit rate | failed requests "
    "| TTFT p50 ms | TTFT p99 ms | throughput req/s |",
    "|---|---:|---:|---:|---:|---:|---:|",
]


def http_row(r: RunResult) -> str:
    """A row of the HTTP table."""
    return (
        f"| {r.label} | {r.loads_per_1000:.0f} | {hit_rate(r):.1%} | {r.errors} "
        f"| {ms(r, 50):.0f} | {ms(r, 99):.0f} | {r.throughput:.1f} |"
    )


def half_table(results: dict[str, RunResult], slos: tuple[float, ...]) -> list[str]:
    """The compact table of the half-KV runs (its header alone for no results)."""
    good = " | ".join(f"goodput TTFT <= {s:g} s" for s in slos)
    return [
        f"| policy | {good} | prefix hit rate | adapter loads / 1,000 req (disk) |",
        "|---|" + "---:|" * (len(slos) + 2),
        *(half_row(r, slos) for r in results.values()),
    ]


def half_row(r: RunResult, slos: tuple[float, ...]) -> str:
    """A row of the half-KV table."""
    good = " | ".join(f"{goodput(r, s):.1%}" for s in slos)
    return (f"| {r.label} | {good} | {hit_rate(r):.1%} | {r.loads_per_1000:.0f} "
            f"({1000 * r.disk_loads / max(r.requests, 1):.0f}) |")  # fmt: skip
