"""The routing benchmarks' pictures: adapter loads per policy and the TTFT tail, and
ours' loads against its latency as its knobs trade one for the other."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

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
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def tradeoff_figure(
    sweeps: Mapping[str, Sequence[tuple[str, RunResult]]], peers: Sequence[RunResult],
    floors: Sequence[tuple[str, float, str]], goodput: Callable[[RunResult], float],
    p99_ms: Callable[[RunResult], float], path: Path, title: str,
) -> None:  # fmt: skip
    """Adapter loads per 1,000 requests (x) against goodput (left) and the TTFT p99
    (right): one line per swept knob (each point labelled with its value), the peers
    as single points, and each floor ``(label, loads per 1,000, line style)`` as a
    vertical line."""
    fig = Figure(figsize=(12, 4.8), dpi=110)
    left, right = fig.subplots(1, 2, sharex=True)
    for i, (knob, points) in enumerate(sweeps.items()):
        xs = [r.loads_per_1000 for _, r in points]
        for ax, ys in ((left, [100 * goodput(r) for _, r in points]),
                       (right, [p99_ms(r) for _, r in points])):  # fmt: skip
            ax.plot(xs, ys, marker="o", color=f"C{i}", lw=1.4, label=f"mol-affinity, {knob}")
            for (value, _), x, y in zip(points, xs, ys, strict=True):
                ax.annotate(value, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for j, r in enumerate(peers):
        for ax, y in ((left, 100 * goodput(r)), (right, p99_ms(r))):
            ax.plot([r.loads_per_1000], [y], marker="s", ls="", color=f"C{len(sweeps) + j}",
                    label=r.label)  # fmt: skip
    for ax in (left, right):
        for label, x, style in floors:
            ax.axvline(x, color="0.35", ls=style, lw=1.1, label=label)
        ax.set_xlabel("adapter loads per 1,000 requests")
        ax.grid(True, alpha=0.3)
    left.set_ylabel("goodput: TTFT <= 1 s (%)")
    right.set_ylabel("TTFT p99 (ms)")
    right.set_yscale("log")
    left.legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
