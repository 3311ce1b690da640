"""Turn a finished run into the comparison rows and the Markdown section."""

from __future__ import annotations

import argparse
import shlex
import subprocess
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

from _load import LoadResult, PublishResult
from _machine import machine_info
from _pg import Storage
from _report import Row, render_table

TARGET_RESOLVE_P99_MS = 10.0
TARGET_RESOLVE_RPS = 1200.0
TARGET_LIST_P99_MS = 25.0
TARGET_CONSOLE_P99_MS = 50.0  # a server-rendered page: the listing plus its HTML
TARGET_PUBLISH_PER_S = 50.0
GOAL_RATIO = 10.0
TARGET_TABLE_BYTES_PER_VERSION = 2048.0


class FinishedRun(Protocol):
    """What the summary reads of a finished run (``catalog.Bench`` is one)."""

    args: argparse.Namespace
    results: dict[str, LoadResult]
    publish: PublishResult | None
    notes: list[str]
    versions: dict[str, str]
    seed_seconds: dict[str, float]
    sizes: dict[str, str]
    cpu_ms: dict[str, float]
    cpu_split: dict[str, dict[str, float]]
    storage: dict[str, Storage]


def rows_for(bench: FinishedRun) -> list[Row]:
    r = bench.results

    def get(key: str, attr: str) -> float | None:
        res = r.get(key)
        return None if res is None else float(getattr(res, attr))

    c_lat = bench.args.latency_connections
    c_thr = bench.args.throughput_connections
    rows = [
        Row(f"resolve `ns/name@alias` p50 (c={c_lat})", "ms",
            get("ours:resolve:latency", "p50_ms"), get("mlflow:resolve:latency", "p50_ms")),
        Row(f"resolve `ns/name@alias` p99 (c={c_lat})", "ms",
            get("ours:resolve:latency", "p99_ms"), get("mlflow:resolve:latency", "p99_ms"),
            TARGET_RESOLVE_P99_MS),
        Row(f"resolve max throughput (c={c_thr})", "req/s",
            get("ours:resolve:throughput", "rps"), get("mlflow:resolve:throughput", "rps"),
            TARGET_RESOLVE_RPS, better="higher"),
        Row(f"resolve p99 at max throughput (c={c_thr})", "ms",
            get("ours:resolve:throughput", "p99_ms"), get("mlflow:resolve:throughput", "p99_ms")),
    ]
    rows.append(Row("resolve CPU per request (server + Postgres)", "ms",
                    bench.cpu_ms.get("ours:resolve:throughput"),
                    bench.cpu_ms.get("mlflow:resolve:throughput")))
    for key, label, target in (
            ("list-first", "list by base+tag, first page", TARGET_LIST_P99_MS),
            ("list-deep", "list by base+tag, deep keyset page", TARGET_LIST_P99_MS),
            ("search", "substring search, first page", TARGET_LIST_P99_MS),
            ("console", "console page (search, adapter, version; HTML)",
             TARGET_CONSOLE_P99_MS)):
        rows.append(Row(f"{label} p50 (c={c_lat})", "ms", get(f"ours:{key}:latency", "p50_ms")))
        rows.append(Row(f"{label} p99 (c={c_lat})", "ms", get(f"ours:{key}:latency", "p99_ms"),
                        target=target))
    c_page = bench.args.page_connections
    for key, label in (("console-list-first", "console adapter list, filtered, first page"),
                       ("console-list-deep", "console adapter list, filtered, deep page")):
        rows.append(Row(f"{label} p50 (c={c_page})", "ms", get(f"ours:{key}:latency", "p50_ms")))
        rows.append(Row(f"{label} p99 (c={c_page})", "ms", get(f"ours:{key}:latency", "p99_ms"),
                        target=TARGET_CONSOLE_P99_MS))
    ours, mlflow = bench.storage.get("ours"), bench.storage.get("MLflow")
    rows.append(Row("table data per version (heap + TOAST, all tables)", "bytes",
                    ours.table_per_version if ours else None,
                    mlflow.table_per_version if mlflow else None,
                    TARGET_TABLE_BYTES_PER_VERSION))
    rows.append(Row("index bytes per version (all tables)", "bytes",
                    ours.index_per_version if ours else None,
                    mlflow.index_per_version if mlflow else None))
    pub = bench.publish
    if pub is not None:
        c_pub = bench.args.publish_concurrency
        rows.append(Row(f"publish small adapters (c={c_pub}, S3 + compat)", "adapters/s",
                        pub.per_second, target=TARGET_PUBLISH_PER_S, better="higher"))
        rows.append(Row("publish latency p50", "ms", pub.pct(50)))
        rows.append(Row("publish latency p99", "ms", pub.pct(99)))
        rows.append(Row("publish CPU per adapter (server + Postgres + S3)", "ms",
                        bench.cpu_ms.get("ours:publish")))
    return rows


def goals(rows: list[Row]) -> list[str]:
    """The comparison goals: >= 10x MLflow's throughput at a p99 under a tenth of its."""
    out = []
    by = {row.metric.split(" (")[0]: row for row in rows}
    thr = by.get("resolve max throughput")
    p99 = by.get("resolve `ns/name@alias` p99")
    for row, what in ((thr, "throughput"), (p99, "p99 latency")):
        if row is None or row.ratio is None:
            out.append(f"- {what} vs MLflow: not measured")
            continue
        met = "met" if row.ratio >= GOAL_RATIO else "**not met**"
        out.append(f"- {what} vs MLflow: {row.ratio:.1f}x better (goal >= {GOAL_RATIO:.0f}x): "
                   f"{met}")
    return out


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _wrk_version() -> str:
    done = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    first = (done.stdout or done.stderr).strip().splitlines()
    return first[0].split()[1] if first and len(first[0].split()) > 1 else "?"


def section(bench: FinishedRun, rows: list[Row], argv: list[str], elapsed: float,
            pg_version: str) -> str:
    a = bench.args
    cmd = f"make bench  # .venv/bin/python bench/catalog.py {shlex.join(argv)}".rstrip()
    m = machine_info()
    soft = [f"PostgreSQL {pg_version}", f"mol-platform {_version('mol-platform')}",
            f"uvicorn {_version('uvicorn')}", f"SQLAlchemy {_version('sqlalchemy')}",
            f"asyncpg {_version('asyncpg')}", f"wrk {_wrk_version()}"]
    if "MLflow" in bench.versions:
        soft.insert(1, f"MLflow {bench.versions['MLflow']}")
    seeds = ", ".join(f"{k} {v:,.0f} s" for k, v in bench.seed_seconds.items())
    sizes = ", ".join(f"{k} {v}" for k, v in bench.sizes.items())
    lines = [
        "## Catalog",
        "",
        *(["**Smoke run (`--quick`): small data and short runs, not the reference figures.**",
            ""] if a.quick else []),
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {elapsed / 60:.0f} min in all, with:",
        "",
        f"    {cmd}",
        "",
        f"- Machine: {m.markdown()}",
        f"- Software: {', '.join(soft)}",
        f"- Data: ours {a.adapters:,} adapters x 3 versions (4 bases, 20 tags, 2 tags each, "
        f"`stable` -> v2, stored verdicts; a third Llama-3-8B all-linear r16 LoRAs with 448 "
        f"tensors, the rest small/medium LoRAs of small bases); MLflow {a.mlflow_models:,} "
        f"registered models x 3 versions with alias `stable`"
        + (" (skipped)" if a.skip_mlflow else "")
        + f"; both in one PostgreSQL cluster. Bulk load: {seeds or 'n/a'}; "
        f"sizes: {sizes or 'n/a'}.",
        "- Bulk path: schema created by each product (Alembic / `mlflow db upgrade`), FKs, keys"
        " and indexes of the loaded tables dropped, rows streamed with COPY, keys/indexes/FKs"
        " rebuilt, then VACUUM (ANALYZE).",
        f"- Servers: ours `mol catalog serve --workers {a.workers}` (auth on: every request "
        f"carries a bearer token; S3 blobs on a moto server); MLflow `mlflow server --workers "
        f"{a.mlflow_workers} --no-serve-artifacts`, job runner off, requests with "
        "`Connection: close` (with keep-alive it stalls ~40 ms per request).",
        f"- Load: wrk, 1 thread{' pinned to core ' + a.wrk_cores if a.wrk_cores else ''}, "
        f"random names from {a.sample:,}; servers and Postgres "
        f"{'pinned to ' + a.server_cores if a.server_cores else 'free on both cores'} "
        f"(a pinned wrk uses a few % of its core; Postgres and the servers need both). "
        f"{a.duration:.0f} s per run after {a.warmup:.0f} s warm-up; publish: "
        f"{a.publish_concurrency} aiohttp uploaders for {a.publish_seconds:.0f} s.",
        "",
        render_table(rows),
        "",
        *goals(rows),
    ]
    if bench.cpu_split:
        lines += ["", "CPU per request by process tree (ms; measured from /proc, so other load on "
                  "the machine does not inflate it the way it inflates latencies):", ""]
        for key, split in bench.cpu_split.items():
            parts = ", ".join(f"{name} {ms:.2f}" for name, ms in split.items())
            lines.append(f"- {key}: {parts}")
    if "ours" in bench.storage:
        lines += ["", "Table data per version by table (bytes; pg_table_size right after the "
                  f"load, before publishing): {bench.storage['ours'].largest()}."]
    if bench.notes:
        lines += ["", "Notes:", "", *(f"- {note}" for note in bench.notes)]
    return "\n".join(lines)
