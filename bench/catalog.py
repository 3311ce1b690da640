"""Catalog benchmark: our catalog against MLflow Model Registry, on the same Postgres.

    .venv/bin/python bench/catalog.py                 # the full run (1M adapters, 100k models)
    .venv/bin/python bench/catalog.py --quick         # smoke run, a few minutes
    .venv/bin/python bench/catalog.py --skip-mlflow   # ours only

Seeds both registries in bulk (COPY, indexes after, VACUUM ANALYZE), then measures through
HTTP with wrk: resolve `ns/name@alias` (latency at 4 connections, throughput at 16),
listing by base+tag (first and deep keyset page), substring search, and publish
throughput (S3 on loopback, compatibility check included). Writes the "catalog"
section of docs/benchmarks.md. See `--help` for every knob.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _mlflow
import _ours
import _seed
import _shapes
import _usage
from _load import LoadResult, PublishResult, publish_loop, require_wrk, run_wrk
from _machine import Proc, busy_seconds, own_seconds, quiet_check, tree_cpu
from _pg import BenchPostgres, Storage, data_size, progress, storage
from _report import render_table, write_section
from mol_testkit.net import free_port
from mol_testkit.postgres import find_pg_bin

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--adapters", type=int, default=1_000_000, help="adapters to seed (x3 versions)")
    p.add_argument("--mlflow-models", type=int, default=100_000, help="MLflow models to load")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per measured run")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of warm-up per endpoint")
    p.add_argument("--publish-seconds", type=float, default=20.0)
    p.add_argument("--publish-concurrency", type=int, default=8)
    p.add_argument("--latency-connections", type=int, default=4)
    p.add_argument("--throughput-connections", type=int, default=16)
    p.add_argument("--page-connections", type=int, default=1,
                   help="connections for the console list pages (1: server time per page)")
    p.add_argument("--workers", type=int, default=2, help="our catalog's uvicorn workers")
    p.add_argument("--mlflow-workers", type=int, default=4, help="mlflow server workers")
    p.add_argument("--wrk-cores", default="0", help="taskset cores for wrk ('' = unpinned)")
    p.add_argument("--server-cores", default="", help="taskset cores for the servers")
    p.add_argument("--deep-items", type=int, default=10_000, help="depth of the deep page")
    p.add_argument("--sample", type=int, default=100_000, help="distinct names wrk picks from")
    p.add_argument("--skip-mlflow", action="store_true")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 20k adapters, 5k MLflow models, 5 s runs")
    p.add_argument("--busy-limit", type=float, default=0.3,
                   help="refuse to run when other processes use more cores than this")
    p.add_argument("--allow-busy", action="store_true",
                   help="run anyway on a busy machine (the report says so)")
    p.add_argument("--usage-versions", type=int, default=200_000,
                   help="versions whose daily usage rows are inserted to size version_usage")
    p.add_argument("--usage-days", type=int, default=7, help="days of usage rows per version")
    p.add_argument("--usage-seconds", type=float, default=120.0,
                   help="time box of each backend's usage load (stops after the day in flight)")
    p.add_argument("--usage-only", action="store_true",
                   help="only size the usage roll-ups (Postgres and SQLite), a minute or two")
    p.add_argument("--console-list-only", action="store_true",
                   help="only the console adapter list, on the catalog database --catalog-db "
                        "seeded before (by an earlier run's seed: bench/_seed.py); no report")
    p.add_argument("--catalog-db", default="",
                   help="SQLAlchemy URL of that seeded, migrated catalog database")
    p.add_argument("--postgres-pid", type=int, default=0,
                   help="its postmaster's pid (CPU per page includes Postgres when given)")
    p.add_argument("--no-report", action="store_true", help="do not write docs/benchmarks.md")
    p.add_argument("--report", type=Path, default=DOCS)
    args = p.parse_args(argv)
    if args.quick:
        args.adapters = min(args.adapters, 20_000)
        args.mlflow_models = min(args.mlflow_models, 5_000)
        args.duration = min(args.duration, 5.0)
        args.warmup = min(args.warmup, 2.0)
        args.publish_seconds = min(args.publish_seconds, 5.0)
        args.deep_items = min(args.deep_items, 200)
    if args.console_list_only and not args.catalog_db:
        p.error("--console-list-only needs --catalog-db")
    if args.adapters < 100 or args.mlflow_models < 10:
        p.error("--adapters must be >= 100 and --mlflow-models >= 10")
    return args


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.procs: list[Proc] = []
        self.results: dict[str, LoadResult] = {}
        self.publish: PublishResult | None = None
        self.notes: list[str] = []
        self.usage: list[_usage.UsageSize] = []
        self.versions: dict[str, str] = {}
        self.seed_seconds: dict[str, float] = {}
        self.sizes: dict[str, str] = {}
        self.storage: dict[str, Storage] = {}  # bytes per version, right after the load
        self.cpu_ms: dict[str, float] = {}  # CPU ms per request: servers + Postgres
        self.cpu_roots: dict[str, int] = {}  # name -> root pid of a measured process tree
        self.cpu_split: dict[str, dict[str, float]] = {}
        self.by_filter: dict[str, tuple[float, float, int]] = {}  # kind -> p50, max, count

    def wrk(self, key: str, base_url: str, paths: Path, connections: int,
            headers: tuple[str, ...] = ()) -> LoadResult:
        a = self.args
        cores = a.wrk_cores or None
        endpoint = key.rsplit(":", 1)[0]
        if a.warmup > 0 and not any(k.startswith(endpoint + ":") for k in self.results):
            run_wrk(base_url, paths, connections=connections, seconds=a.warmup,
                    headers=headers, cores=cores)
        cpu0, busy0, own0 = self.cpu_now(), busy_seconds(), own_seconds()
        res = run_wrk(base_url, paths, connections=connections, seconds=a.duration,
                      headers=headers, cores=cores)
        self.cpu_since(key, cpu0, res.requests)
        measured = sum(self.cpu_split.get(key, {}).values()) * res.requests / 1000
        foreign = busy_seconds() - busy0 - (own_seconds() - own0) - measured
        if res.seconds > 0 and foreign / res.seconds > a.busy_limit:
            self.notes.append(f"{key}: other processes used {foreign / res.seconds:.2f} cores "
                              "during the run")
        progress(f"{key:32s} {res.line()}  {self.cpu_line(key)}")
        if res.errors > max(1, res.requests // 100):
            raise RuntimeError(f"{key}: {res.errors} of {res.requests} requests failed (non-2xx "
                               "or socket errors); figures of failing requests are not reported")
        if res.errors:
            self.notes.append(f"{key}: {res.errors} errors (non-2xx or socket) in "
                              f"{res.requests} requests")
        self.results[key] = res
        return res

    def cpu_now(self) -> dict[str, float]:
        return {name: tree_cpu([pid]) for name, pid in self.cpu_roots.items()}

    def cpu_since(self, key: str, before: dict[str, float], count: int) -> None:
        if count <= 0:
            return
        after = self.cpu_now()
        split = {name: (after[name] - before[name]) * 1000 / count for name in before}
        self.cpu_split[key] = split
        self.cpu_ms[key] = sum(split.values())

    def cpu_line(self, key: str) -> str:
        split = self.cpu_split.get(key, {})
        parts = ", ".join(f"{name} {ms:.2f}" for name, ms in split.items())
        return f"cpu {self.cpu_ms.get(key, 0.0):.2f} ms/req ({parts})"

    # -- MLflow ------------------------------------------------------------------

    def run_mlflow(self, pg: BenchPostgres) -> None:
        a = self.args
        python = _mlflow.ensure_venv()
        self.versions["MLflow"] = _mlflow.mlflow_version()
        pg.create_database("mlflow")
        url = pg.url("mlflow", driver="psycopg2")
        progress("MLflow: creating its schema (mlflow db upgrade)")
        _mlflow.upgrade_schema(python, url)
        port = free_port()
        server = _mlflow.start_server(python, url, port, a.mlflow_workers,
                                      self.workdir / "mlflow", a.server_cores or None)
        self.procs.append(server)
        self.cpu_roots = {"mlflow": server.popen.pid, "postgres": postmaster(pg)}
        base = f"http://127.0.0.1:{port}"
        _mlflow.create_probe(base)
        progress(f"MLflow: bulk-loading {a.mlflow_models:,} models x {_mlflow.VERSIONS} versions")
        start = time.monotonic()
        _mlflow.bulk_load(url, a.mlflow_models)
        self.seed_seconds["MLflow"] = time.monotonic() - start
        self.sizes["MLflow"] = data_size(url)
        self.storage["MLflow"] = storage(url, "model_versions")
        for i in (1, a.mlflow_models):
            got = _mlflow.resolve_once(base, _mlflow.model_name(i))
            if got != str(_mlflow.ALIAS_VERSION):
                raise RuntimeError(f"MLflow resolved {_mlflow.model_name(i)} to {got}")
        paths = _mlflow.paths_file(self.workdir / "mlflow-paths.txt", a.mlflow_models, a.sample)
        close = ("Connection: close",)  # keep-alive stalls ~40 ms per request in MLflow
        self.wrk("mlflow:resolve:latency", base, paths, a.latency_connections, close)
        self.wrk("mlflow:resolve:throughput", base, paths, a.throughput_connections, close)
        server.stop()
        self.procs.remove(server)

    # -- ours --------------------------------------------------------------------

    def run_usage(self, pg: BenchPostgres, url: str | None = None) -> None:
        """Size the usage roll-ups on Postgres (``url``: the seeded catalog, else a new
        database) and on SQLite."""
        from mol_catalog.db import migrate

        a = self.args
        if url is None:
            pg.create_database("usage", extensions=["pg_trgm"])
            url = pg.url("usage", driver="asyncpg")
            migrate(url)
        progress(f"usage: {a.usage_versions:,} versions x {a.usage_days} days "
                 f"(time box {a.usage_seconds:.0f} s per backend)")
        self.usage.append(_usage.measure_postgres(url, a.usage_versions, a.usage_days,
                                                  a.usage_seconds))
        lite = self.workdir / "usage.db"
        migrate(f"sqlite:///{lite}")
        self.usage.append(_usage.measure_sqlite(lite, a.usage_versions, a.usage_days,
                                                a.usage_seconds))
        lite.unlink()
        for size in self.usage:
            progress("usage: " + size.line())

    def run_ours(self, pg: BenchPostgres) -> None:
        from mol_catalog.db import migrate

        a = self.args
        cores = a.server_cores or None
        pg.create_database("catalog", extensions=["pg_trgm"])
        url = pg.url("catalog", driver="asyncpg")
        migrate(url)
        s3_port, port = free_port(), free_port()
        s3 = _ours.start_s3(s3_port, self.workdir, cores)
        self.procs.append(s3)
        token = "mol_" + secrets.token_urlsafe(32)
        server = _ours.start_catalog(url, s3_port, port, a.workers, token, self.workdir, cores)
        self.procs.append(server)
        base_url = f"http://127.0.0.1:{port}"
        api = _ours.Api(base_url, token)
        _ours.register_bases(api, len(_seed.BASE_NAMES))
        server.stop()
        self.procs.remove(server)

        progress(f"ours: bulk-seeding {a.adapters:,} adapters x {_seed.VERSIONS} versions")
        start = time.monotonic()
        _seed.seed(url, a.adapters)
        self.seed_seconds["ours"] = time.monotonic() - start
        self.sizes["ours"] = data_size(url)
        self.storage["ours"] = storage(url, "versions")
        used = self.storage["ours"]
        progress(f"ours: {used.table_per_version:,.0f} bytes of table data and "
                 f"{used.index_per_version:,.0f} of indexes per version ({used.largest(9)})")
        self.run_usage(pg, url)

        server = _ours.start_catalog(url, s3_port, port, a.workers, token, self.workdir, cores)
        self.procs.append(server)
        self.cpu_roots = {"catalog": server.popen.pid, "postgres": postmaster(pg)}
        bases = _seed.read_bases(url)
        self.check_resolve(api, bases)
        auth = (f"Authorization: Bearer {token}",)
        w = self.workdir
        resolve = _seed.resolve_paths(w / "resolve.txt", a.adapters, bases, a.sample)
        self.wrk("ours:resolve:latency", base_url, resolve, a.latency_connections, auth)
        self.wrk("ours:resolve:throughput", base_url, resolve, a.throughput_connections, auth)
        first = _seed.listing_paths(w / "list-first.txt", bases, 50)
        self.wrk("ours:list-first:latency", base_url, first, a.latency_connections, auth)
        deep = _ours.deep_cursors(api, [b.name for b in bases], a.deep_items, 50)
        if deep:
            (w / "list-deep.txt").write_text("".join(p + "\n" for p, _ in deep))
            self.notes.append(f"deep pages start {min(d for _, d in deep):,}-"
                              f"{max(d for _, d in deep):,} items into a base+tag listing")
            self.wrk("ours:list-deep:latency", base_url, w / "list-deep.txt",
                     a.latency_connections, auth)
        search = _seed.search_paths(w / "search.txt", a.adapters, 2000, 50)
        self.wrk("ours:search:latency", base_url, search, a.latency_connections, auth)
        # The console's pages, logged in as a browser is (the token in its cookie).
        console = _seed.console_paths(w / "console.txt", a.adapters, bases, 2000)
        self.wrk("ours:console:latency", base_url, console, a.latency_connections,
                 (f"Cookie: mol_console={token}",))
        self.run_console_list(api, base_url, bases, token)
        self.cpu_roots["s3"] = s3.popen.pid  # moto: the S3 writes belong to publishing
        cpu0 = self.cpu_now()
        small = next(b for b in bases if b.name != _shapes.BIG_BASE)
        self.publish = self.run_publish(base_url, token, small)
        self.cpu_since("ours:publish", cpu0, self.publish.published)
        progress(f"{'ours:publish':32s} {self.cpu_line('ours:publish')}")

    def run_console_list(self, api: _ours.Api, base_url: str, bases: list[_seed.SeedBase],
                         token: str) -> None:
        """The console's adapter list under every filter and pair of filters, one page at
        a time: first pages, then keyset pages deep into each listing (the cursor of its
        "more" link)."""
        a, w = self.args, self.workdir
        cookie = (f"Cookie: mol_console={token}",)
        filters = _seed.console_filters(a.adapters, bases, 200)
        first = _seed.console_list_paths(w / "console-list-first.txt", filters)
        self.wrk("ours:console-list-first:latency", base_url, first, a.page_connections, cookie)
        deep = _ours.deep_pages(api, filters[:40], a.deep_items)
        if deep:
            depths = [d for _, d in deep]
            self.notes.append(f"console deep pages: {len(deep)} filter sets, "
                              f"{min(depths):,}-{max(depths):,} items into their listing")
            paths = _seed.console_list_paths(w / "console-list-deep.txt", [q for q, _ in deep])
            self.wrk("ours:console-list-deep:latency", base_url, paths, a.page_connections,
                     cookie)
            filters += [q for q, _ in deep]
        self.by_filter = _ours.time_by_filter(base_url, token, filters)
        for kind, (p50, worst, count) in self.by_filter.items():
            progress(f"  console list {kind:26s} p50 {p50:7.2f} ms  max {worst:7.2f} ms  "
                     f"({count} pages, one at a time)")

    def check_resolve(self, api: _ours.Api, bases: list[_seed.SeedBase]) -> None:
        """The seeded rows must resolve like published ones before anything is timed."""
        for i in (1, self.args.adapters // 2, self.args.adapters):
            ref = f"{_seed.Layout.namespace(i)}/{_seed.Layout.name(i)}@{_seed.ALIAS}"
            profile = _seed.base_of(bases, i).profile
            body = api.call("GET", f"/v1/resolve/{ref}?profile={urllib.parse.quote(profile)}")
            if body["version"] != _seed.ALIAS_VERSION or not body["verdict"]["compatible"]:
                raise RuntimeError(f"seeded {ref} resolved wrongly: {json.dumps(body)[:500]}")

    def run_publish(self, base_url: str, token: str, base: _seed.SeedBase) -> PublishResult:
        a = self.args
        family = _shapes.SMALL_FAMILIES[0]  # q/v r8 of a small base
        res = asyncio.run(publish_loop(
            base_url, token, namespace="bench-publish", prefix=f"p{secrets.token_hex(3)}",
            base=f"{base.name}@{base.revision}",
            config=_shapes.adapter_config(base.name, family.rank, family.targets),
            shapes=_shapes.lora_shapes(family), concurrency=a.publish_concurrency,
            seconds=a.publish_seconds))
        progress(f"{'ours:publish':32s} {res.per_second:8.1f} adapters/s  p50 {res.pct(50):.1f} ms"
                 f"  p99 {res.pct(99):.1f} ms  failures {sum(res.failures.values())}")
        for key, count in res.failures.items():
            self.notes.append(f"publish: {count} x {key}")
        if res.published == 0:
            raise RuntimeError(f"no adapter could be published: {res.failures}")
        return res

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.usage_only:
        return usage_only(args)
    require_wrk()
    if args.console_list_only:
        return console_list_only(args)
    ok, seen = quiet_check(args.busy_limit)
    progress(f"machine check: {seen}")
    busy_note = None
    if not ok:
        if not args.allow_busy:
            print(f"refusing to measure: {seen} (limit {args.busy_limit} cores). Stop other work "
                  "or pass --allow-busy (the report will say the figures are noisy).",
                  file=sys.stderr)
            return 2
        busy_note = f"the machine was busy before the run ({seen}): figures are noisy"
    # SIGTERM must unwind through the finally below so no server outlives the run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="mol-bench-"))
    pg = BenchPostgres()
    bench = Bench(args, workdir)
    started = time.monotonic()
    try:
        pg.start()
        if not args.skip_mlflow:
            bench.run_mlflow(pg)
        bench.run_ours(pg)
    finally:
        bench.stop()
        pg.stop()
        for path in workdir.glob("*.txt"):
            path.unlink()
        shutil.rmtree(workdir / "mlflow" / "artifacts", ignore_errors=True)
        progress(f"server logs kept in {workdir}")
    if busy_note:
        bench.notes.insert(0, busy_note)
    elapsed = time.monotonic() - started
    from _summary import rows_for, section

    rows = rows_for(bench)
    print(render_table(rows))
    if not args.no_report:
        write_section(args.report, "catalog", section(bench, rows, argv, elapsed, pg_version()))
        write_section(args.report, "catalog-usage", usage_section(bench, argv))
        progress(f"wrote {args.report}")
    return 0


def console_list_only(args: argparse.Namespace) -> int:
    """``--console-list-only``: the console list part of ``run_ours`` on a database seeded
    before (seeding 1M adapters is most of a full run). Prints the figures."""
    import psycopg

    from _pg import libpq

    progress(f"machine check: {quiet_check(args.busy_limit)[1]}")
    url = args.catalog_db
    with psycopg.connect(libpq(url)) as conn:
        row = conn.execute("SELECT max(id) FROM adapters").fetchone()
    args.adapters = int(str(row[0])) if row and row[0] is not None else 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="mol-bench-list-"))
    bench = Bench(args, workdir)
    try:
        s3_port, port = free_port(), free_port()
        s3 = _ours.start_s3(s3_port, workdir, args.server_cores or None)
        bench.procs.append(s3)
        token = "mol_" + secrets.token_urlsafe(32)
        server = _ours.start_catalog(url, s3_port, port, args.workers, token, workdir,
                                     args.server_cores or None)
        bench.procs.append(server)
        bench.cpu_roots = {"catalog": server.popen.pid}
        if args.postgres_pid:
            bench.cpu_roots["postgres"] = args.postgres_pid
        base_url = f"http://127.0.0.1:{port}"
        bench.run_console_list(_ours.Api(base_url, token), base_url, _seed.read_bases(url),
                               token)
    finally:
        bench.stop()
        for path in workdir.glob("*.txt"):
            path.unlink()
        progress(f"server logs kept in {workdir}")
    for key in ("ours:console-list-first:latency", "ours:console-list-deep:latency"):
        if key in bench.results:
            print(f"{key:34s} {bench.results[key].line()}  {bench.cpu_line(key)}")
    for note in bench.notes:
        print(f"note: {note}")
    return 0


def usage_only(args: argparse.Namespace) -> int:
    """``--usage-only``: size the usage roll-ups on a fresh Postgres and SQLite."""
    workdir = Path(tempfile.mkdtemp(prefix="mol-bench-usage-"))
    pg = BenchPostgres()
    bench = Bench(args, workdir)
    try:
        pg.start()
        bench.run_usage(pg)
    finally:
        pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if not args.no_report:
        write_section(args.report, "catalog-usage",
                      usage_section(bench, usage_argv(args)))
        progress(f"wrote {args.report}")
    return 0


def usage_argv(args: argparse.Namespace) -> list[str]:
    return ["--usage-only", "--usage-versions", str(args.usage_versions), "--usage-days",
            str(args.usage_days)]


def usage_section(bench: Bench, argv: list[str]) -> str:
    from _machine import machine_info

    lines = ["## Catalog: usage roll-ups on disk (`bench/catalog.py`)", "",
             f"`python bench/catalog.py {' '.join(argv)}` on {machine_info().markdown()}, "
             f"{time.strftime('%Y-%m-%d', time.gmtime())}, PostgreSQL {pg_version()}. One "
             "`version_usage` row per version per UTC day (requests, input and output "
             "tokens, last use), its key `(version_id, day)`; measured after VACUUM. A day "
             "of use by 1M versions costs 1M times the per-row figure (a version unused on a day "
             "has no row that day); retention "
             "(`MOL_CATALOG_USAGE_RETENTION_DAYS`, default 90) bounds the days kept.", "",
             "| backend | rows loaded | table B/row | index B/row | **bytes per version per "
             "day** | 1M versions, one day | 1M versions, 90 days |",
             "|---|---|---|---|---|---|---|"]
    for u in bench.usage:
        lines.append(f"| {u.backend} | {u.rows:,} ({u.versions:,} x {u.days} d) | "
                     f"{u.table_bytes / u.rows:,.1f} | {u.index_bytes / u.rows:,.1f} | "
                     f"**{u.per_row:,.1f}** | {u.per_row * 1e6 / 2**20:,.0f} MiB | "
                     f"{u.per_row * 90e6 / 2**30:,.1f} GiB |")
    return "\n".join(lines)


def postmaster(pg: BenchPostgres) -> int:
    return pg.pid


def pg_version() -> str:
    done = subprocess.run([str(find_pg_bin() / "postgres"), "--version"], capture_output=True,
                          text=True, check=False)
    found = re.search(r"\d+\.\d+", done.stdout)
    return found.group(0) if found else "?"


if __name__ == "__main__":
    sys.exit(main())
