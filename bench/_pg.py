"""Postgres for the benchmark: a tuned throwaway cluster and the bulk-load path.

Bulk path, used for both catalogs: the schema is created by the product itself
(our Alembic migrations, `mlflow db upgrade`), then for the loaded tables the foreign
keys, primary/unique constraints and secondary indexes are dropped (their definitions
saved from the catalog tables), rows are streamed with COPY (text format) in chunks,
constraints and indexes are rebuilt after the load, and VACUUM (ANALYZE) sets the
visibility map (index-only scans) and refreshes statistics, as after any bulk load, so
autovacuum does not start on the fresh tables in the middle of a measurement.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from mol_testkit.postgres import PostgresCluster

# A deployment-like configuration for a 2-core / 24 GiB box: durable commits (fsync,
# synchronous_commit and full_page_writes back on), memory sized for the data set, no JIT
# (it only slows the short queries an API issues).
TUNING = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_buffers": "4GB",
    "effective_cache_size": "12GB",
    "work_mem": "16MB",
    "maintenance_work_mem": "1GB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
    "wal_buffers": "64MB",
    "random_page_cost": "1.1",
    "effective_io_concurrency": "200",
    "jit": "off",
    "max_connections": "200",
    "max_parallel_maintenance_workers": "2",
    "max_worker_processes": "8",
    "autovacuum": "on",
}


class BenchPostgres(PostgresCluster):
    """The test cluster with TUNING in place of its test-only settings."""

    def __init__(self) -> None:
        super().__init__(settings=TUNING)


def libpq(url: str) -> str:
    """A libpq URL from a SQLAlchemy one (drops the +driver part)."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgresql") else url


@dataclass
class SavedSchema:
    """What was dropped before a load, in the order it must come back."""

    keys: list[tuple[str, str, str]]  # (table, name, definition): PRIMARY KEY / UNIQUE
    indexes: list[str]  # CREATE INDEX statements
    foreign: list[tuple[str, str, str]]  # (table, name, definition)


Conn = psycopg.Connection[tuple[object, ...]]


def drop_for_load(conn: Conn, tables: Sequence[str]) -> SavedSchema:
    """Drop FKs touching `tables`, then their PK/unique constraints and other indexes."""
    names = list(tables)
    fks = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE contype = 'f' AND (conrelid::regclass::text = ANY(%s) "
        "OR confrelid::regclass::text = ANY(%s))",
        (names, names),
    ).fetchall()
    keys = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE contype IN ('p', 'u') AND conrelid::regclass::text = ANY(%s)",
        (names,),
    ).fetchall()
    key_names = {str(row[1]) for row in keys}
    idx = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
        "AND tablename = ANY(%s)",
        (names,),
    ).fetchall()
    plain = [(str(n), str(d)) for n, d in idx if str(n) not in key_names]
    saved = SavedSchema(
        keys=[(str(t), str(n), str(d)) for t, n, d in keys],
        indexes=[d for _, d in plain],
        foreign=[(str(t), str(n), str(d)) for t, n, d in fks],
    )
    for table, name, _ in saved.foreign:
        conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    for table, name, _ in saved.keys:
        conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    for name, _ in plain:
        conn.execute(f'DROP INDEX "{name}"')
    return saved


def restore_after_load(conn: psycopg.Connection[tuple[object, ...]], saved: SavedSchema,
                       tables: Sequence[str]) -> None:
    """Rebuild keys, then indexes, then FKs; VACUUM (ANALYZE) the tables; print timings."""
    for table, name, definition in saved.keys:
        _timed(conn, f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    for statement in saved.indexes:
        _timed(conn, statement)
    for table, name, definition in saved.foreign:
        _timed(conn, f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    for table in tables:
        _timed(conn, f"VACUUM (ANALYZE) {table}")


def _timed(conn: psycopg.Connection[tuple[object, ...]], statement: str) -> None:
    start = time.monotonic()
    conn.execute(statement)
    short = statement if len(statement) < 90 else statement[:87] + "..."
    progress(f"  {time.monotonic() - start:6.1f}s  {short}")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def copy_text(conn: psycopg.Connection[tuple[object, ...]], table: str, columns: Sequence[str],
              chunks: Iterable[str], total: int) -> None:
    """COPY chunks of text-format lines into `table`, printing rows/s as it goes."""
    cols = ", ".join(f'"{c}"' for c in columns)
    start = last = time.monotonic()
    rows = 0
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
        for chunk in chunks:
            copy.write(chunk)
            rows += chunk.count("\n")
            now = time.monotonic()
            if now - last >= 5.0:
                last = now
                rate = rows / (now - start)
                progress(f"  {table}: {rows:,}/{total:,} rows, {rate:,.0f} rows/s")
    took = time.monotonic() - start
    progress(f"  {table}: {rows:,} rows in {took:.1f}s ({rows / max(took, 1e-9):,.0f} rows/s)")


def chunked(lines: Iterator[str], size: int = 20000) -> Iterator[str]:
    """Join lines into chunks of `size` lines (COPY writes fewer, larger buffers)."""
    buf: list[str] = []
    for line in lines:
        buf.append(line)
        if len(buf) >= size:
            yield "".join(buf)
            buf = []
    if buf:
        yield "".join(buf)


def esc(value: str) -> str:
    """Escape a value for COPY's text format."""
    return (value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


@contextmanager
def bulk_connection(url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection set up for loading (asynchronous commit, big sort memory)."""
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '1GB'")
        yield conn


def data_size(url: str) -> str:
    with psycopg.connect(libpq(url)) as conn:
        row = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))").fetchone()
    return str(row[0]) if row else "?"



@dataclass(frozen=True)
class Storage:
    """Bytes on disk of a database's tables, per row of the table that counts versions."""

    versions: int
    table_bytes: dict[str, int]  # pg_table_size: heap + TOAST (+ free-space/visibility maps)
    index_bytes: dict[str, int]  # pg_indexes_size

    @property
    def table_per_version(self) -> float | None:
        return sum(self.table_bytes.values()) / self.versions if self.versions else None

    @property
    def index_per_version(self) -> float | None:
        return sum(self.index_bytes.values()) / self.versions if self.versions else None

    def largest(self, n: int = 4) -> str:
        """The n tables holding most data, with their share per version."""
        top = sorted(self.table_bytes.items(), key=lambda kv: -kv[1])[:n]
        return ", ".join(f"{name} {size / max(self.versions, 1):,.0f}" for name, size in top)


def storage(url: str, versions_table: str) -> Storage:
    """Table and index bytes of every table in the public schema (Alembic's bookkeeping
    aside) and the row count of ``versions_table``. Run after VACUUM (ANALYZE)."""
    with psycopg.connect(libpq(url)) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "AND c.relkind = 'r' AND c.relname <> 'alembic_version'").fetchall()
        count = conn.execute(f'SELECT count(*) FROM "{versions_table}"').fetchone()
    return Storage(int(str(count[0])) if count else 0,
                   {str(r[0]): int(str(r[1])) for r in rows},
                   {str(r[0]): int(str(r[2])) for r in rows})
