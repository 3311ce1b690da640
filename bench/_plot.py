"""The routing benchmarks' pictures: adapter loads per policy and the TTFT tail, and
ours' loads and prefix-cache hit rate against its latency as its knobs trade one for
the other."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from _fleet import RunResult


def routing_figure(results: Sequence[RunResult], path: Path, title: str) -> None:
    """Left: adapter loads per 1,000 requests; right: share of requests whose TTFT
    exceeds x (log-log), where the policies differ most."""
    fig = Figure(figsize=(11, 4.2), dpi=110)
    left, right = fig.subplots(1, 2)
    labels = [r.label for r in results]
    colors = [f"C{i}" for i in range(len(results))]
    left.barh(labels[::-1], [r.loads_per_1000 for r in results][::-1], color=colors[::-1])
    left.set_xlabel("adapter loads per 1,000 requests (lower is better)")
    for r, c in zip(results, colors, strict=True):
        ttft = sorted(t * 1000 for t in r.ttft)
        n = len(ttft)
        right.plot(ttft, [1 - i / n for i in range(n)], color=c, label=r.label, lw=1.6)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_ylim(1e-3, 1)
    right.set_xlabel("TTFT (ms)")
    right.set_ylabel("share of requests with a longer TTFT")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    _save(fig, title, path)


Sweeps = Mapping[str, Sequence[tuple[str, RunResult]]]
"""Per swept knob, its points: (the value as labelled, the run)."""


def _sweeps(ax: Any, sweeps: Sweeps, peers: Sequence[RunResult],
            x: Callable[[RunResult], float], y: Callable[[RunResult], float]) -> None:  # fmt: skip
    """One line per swept knob (each point labelled with its value), the peers as
    single points, on ``ax`` at (``x``, ``y``) of each run."""
    for i, (knob, points) in enumerate(sweeps.items()):
        xs, ys = [x(r) for _, r in points], [y(r) for _, r in points]
        ax.plot(xs, ys, marker="o", color=f"C{i}", lw=1.4, label=f"mol-affinity, {knob}")
        for (value, _), px, py in zip(points, xs, ys, strict=True):
            ax.annotate(value, (px, py), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for j, r in enumerate(peers):
        ax.plot([x(r)], [y(r)], marker="s", ls="", color=f"C{len(sweeps) + j}", label=r.label)
    ax.grid(True, alpha=0.3)


def _save(fig: Figure, title: str, path: Path) -> None:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def tradeoff_figure(
    sweeps: Sweeps, peers: Sequence[RunResult],
    floors: Sequence[tuple[str, float, str]], goodput: Callable[[RunResult], float],
    p99_ms: Callable[[RunResult], float], path: Path, title: str,
) -> None:  # fmt: skip
    """Adapter loads per 1,000 requests (x) against goodput (left) and the TTFT p99
    (right): one line per swept knob, the peers as single points, and each floor
    ``(label, loads per 1,000, line style)`` as a vertical line."""
    fig = Figure(figsize=(12, 4.8), dpi=110)
    left, right = fig.subplots(1, 2, sharex=True)

    def loads(r: RunResult) -> float:
        return r.loads_per_1000

    _sweeps(left, sweeps, peers, loads, lambda r: 100 * goodput(r))
    _sweeps(right, sweeps, peers, loads, p99_ms)
    for ax in (left, right):
        for label, x, style in floors:
            ax.axvline(x, color="0.35", ls=style, lw=1.1, label=label)
        ax.set_xlabel("adapter loads per 1,000 requests")
    left.set_ylabel("goodput: TTFT <= 1 s (%)")
    right.set_ylabel("TTFT p99 (ms)")
    right.set_yscale("log")
    left.legend(fontsize=7, loc="lower left")
    _save(fig, title, path)


def hit_figure(
    sweeps: Sweeps, peers: Sequence[RunResult], bounds: Sequence[tuple[str, float, str]],
    goodput: Callable[[RunResult], float], path: Path, title: str,
) -> None:  # fmt: skip
    """Prefix-cache hit rate (x) against goodput: one line per swept knob, the peers as
    single points, and each bound ``(label, hit rate, line style)`` as a vertical line."""
    fig = Figure(figsize=(7.5, 5), dpi=110)
    ax = fig.subplots(1, 1)
    _sweeps(ax, sweeps, peers, lambda r: 100 * r.prefix_hit_rate, lambda r: 100 * goodput(r))
    for label, x, style in bounds:
        ax.axvline(100 * x, color="0.35", ls=style, lw=1.1, label=label)
    ax.set_xlabel("prefix-cache hit rate (% of prompt tokens)")
    ax.set_ylabel("goodput: TTFT <= 1 s (%)")
    ax.legend(fontsize=7, loc="lower left")
    _save(fig, title, path)


def seeds_figure(gaps: Mapping[str, Mapping[str, Sequence[float]]], path: Path,
                 title: str) -> None:  # fmt: skip
    """Per shape, per peer (``gaps``): each seed's goodput difference, ours less the
    peer's, in points, and their mean (bench/routing_seeds.py)."""
    from statistics import fmean

    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(4.2 * len(gaps), 3.8), dpi=110)
    axes = fig.subplots(1, len(gaps), squeeze=False)[0]
    for ax, (shape, peers) in zip(axes, gaps.items(), strict=True):
        widest = max([1.0, *(abs(d) for diffs in peers.values() for d in diffs)])
        for j, diffs in enumerate(peers.values()):
            ax.scatter(diffs, [j] * len(diffs), s=12, alpha=0.6, color=f"C{j}")
            ax.plot([fmean(diffs)], [j], marker="|", markersize=16, color="k")
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_yticks(range(len(peers)), list(peers) if ax is axes[0] else [""] * len(peers))
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(-1.6 * widest, 1.6 * widest)  # nothing clipped at the edges
        ax.set_xticks([t for t in (-100, -10, -1, 0, 1, 10, 100) if abs(t) <= 1.6 * widest])
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("ours less peer, goodput (points)")
        ax.set_title(shape, fontsize=9)
    _save(fig, title, path)
