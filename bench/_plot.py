"""The routing benchmark's picture: adapter loads per policy and the TTFT tail."""

from __future__ import annotations

from collections.abc import Sequence
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
