"""Percentiles, the comparison table and the docs/benchmarks.md section writer.

Kept free of imports from the rest of bench/ so that a unit test can load it by path
and check the arithmetic and the Markdown without Postgres, MLflow or a server.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks.

    Same definition as numpy's default ("linear"), so figures match other tools.
    """
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(ordered[lo])
    frac = pos - lo
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * frac)


@dataclass(frozen=True)
class Row:
    """One metric of the table.

    `better` says which direction wins ("lower" for latencies, "higher" for rates), which
    decides both how the ratio is formed (always "how many times better we are") and how
    the target is checked. `target` None means no target for that line.
    """

    metric: str
    unit: str
    ours: float | None
    mlflow: float | None = None
    target: float | None = None
    better: str = "lower"

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"better must be 'lower' or 'higher', got {self.better!r}")

    @property
    def ratio(self) -> float | None:
        """How many times better ours is than MLflow (> 1 means ours wins)."""
        if self.ours is None or self.mlflow is None or self.ours <= 0 or self.mlflow <= 0:
            return None
        return self.mlflow / self.ours if self.better == "lower" else self.ours / self.mlflow

    @property
    def met(self) -> bool | None:
        if self.target is None or self.ours is None:
            return None
        return self.ours <= self.target if self.better == "lower" else self.ours >= self.target


def _num(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _target(row: Row) -> str:
    if row.target is None:
        return "-"
    sign = "<=" if row.better == "lower" else ">="
    return f"{sign} {_num(row.target)} {row.unit}"


def _met(row: Row) -> str:
    met = row.met
    return "-" if met is None else ("yes" if met else "**no**")


def render_table(rows: Sequence[Row]) -> str:
    """The Markdown table: metric, ours, MLflow, ratio, target, met?"""
    lines = [
        "| metric | ours | MLflow | ratio (x better) | target | met? |",
        "|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        ours = f"{_num(row.ours)} {row.unit}" if row.ours is not None else "n/a"
        theirs = f"{_num(row.mlflow)} {row.unit}" if row.mlflow is not None else "-"
        ratio = f"{row.ratio:.1f}x" if row.ratio is not None else "-"
        lines.append(
            f"| {row.metric} | {ours} | {theirs} | {ratio} | {_target(row)} | {_met(row)} |"
        )
    return "\n".join(lines)


def markers(name: str) -> tuple[str, str]:
    """The comment lines that delimit one benchmark's section in docs/benchmarks.md."""
    if not re.fullmatch(r"[a-z0-9-]+", name):
        raise ValueError(f"section name must be lowercase letters, digits or '-': {name!r}")
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) the section `name` of the file, leaving every other byte intact."""
    begin, end = markers(name)
    block = f"{begin}\n{body.strip()}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = text.find(begin)
    if start >= 0:
        stop = text.find(end, start)
        if stop < 0:
            raise ValueError(f"{path}: found {begin!r} but not {end!r}; fix the file by hand")
        text = text[:start] + block + text[stop + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
