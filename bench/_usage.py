"""Bytes the usage roll-ups (``version_usage``) take per version per day, on Postgres and
SQLite: rows for ``versions`` versions over ``days`` days inserted into a catalog schema
at head (one statement per day, stopped when the time box runs out), then the table and
its key index measured after VACUUM. Foreign keys are not checked while loading (the
version ids need not exist): the figure is the storage of the rows, not of versions."""

from __future__ import annotations

import random
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from _pg import libpq

FIRST_DAY = 20_000  # 2024-10-04: any day works, rows only need distinct keys


@dataclass(frozen=True)
class UsageSize:
    backend: str
    versions: int
    days: int  # days inserted (the time box may stop before the days asked for)
    rows: int
    table_bytes: int
    # Postgres: the primary key; SQLite: none (WITHOUT ROWID: the key is the table)
    index_bytes: int
    seconds: float

    @property
    def per_row(self) -> float:
        return (self.table_bytes + self.index_bytes) / self.rows if self.rows else 0.0

    def line(self) -> str:
        return (f"{self.backend}: {self.per_row:,.1f} bytes per version per day "
                f"(table {self.table_bytes / self.rows:,.1f} + index "
                f"{self.index_bytes / self.rows:,.1f}) over {self.rows:,} rows "
                f"({self.versions:,} versions x {self.days} days, loaded in "
                f"{self.seconds:.0f} s); at 1M versions: "
                f"{self.per_row * 1e6 / 2**20:,.0f} MiB a day of use")


def measure_postgres(url: str, versions: int, days: int, budget: float) -> UsageSize:
    """On a migrated catalog database (``url``); the rows are removed afterwards."""
    started = time.monotonic()
    done = 0
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET session_replication_role = replica")  # no FK triggers
        conn.execute("TRUNCATE version_usage")
        for day in range(FIRST_DAY, FIRST_DAY + days):
            if done and time.monotonic() - started > budget:
                break
            conn.execute(
                "INSERT INTO version_usage (version_id, day, requests, input_tokens, "
                "output_tokens, last_used) SELECT v, %s, 1 + (random() * 5000)::bigint, "
                "(random() * 2e6)::bigint, (random() * 5e5)::bigint, "
                "now() - random() * interval '1 day' FROM generate_series(1, %s) v",
                (day, versions))
            done += 1
        seconds = time.monotonic() - started
        conn.execute("VACUUM ANALYZE version_usage")
        row = conn.execute("SELECT pg_table_size('version_usage'), "
                           "pg_indexes_size('version_usage'), "
                           "(SELECT count(*) FROM version_usage)").fetchone()
        conn.execute("TRUNCATE version_usage")
    assert row is not None
    return UsageSize("PostgreSQL", versions, done, int(str(row[2])), int(str(row[0])),
                     int(str(row[1])), seconds)


def measure_sqlite(path: Path, versions: int, days: int, budget: float) -> UsageSize:
    """On a migrated SQLite catalog file; growth of the file after VACUUM."""
    rng = random.Random(7)
    started = time.monotonic()
    done = 0
    conn = sqlite3.connect(path)
    try:
        conn.execute("VACUUM")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        before = conn.execute("PRAGMA page_count").fetchone()[0] * page
        now = datetime.now(UTC).isoformat(sep=" ")
        for day in range(FIRST_DAY, FIRST_DAY + days):
            if done and time.monotonic() - started > budget:
                break
            conn.executemany(
                "INSERT INTO version_usage (version_id, day, requests, input_tokens, "
                "output_tokens, last_used) VALUES (?, ?, ?, ?, ?, ?)",
                ((v, day, 1 + rng.randrange(5000), rng.randrange(2_000_000),
                  rng.randrange(500_000), now) for v in range(1, versions + 1)))
            conn.commit()
            done += 1
        seconds = time.monotonic() - started
        rows = conn.execute("SELECT count(*) FROM version_usage").fetchone()[0]
        conn.execute("VACUUM")
        after = conn.execute("PRAGMA page_count").fetchone()[0] * page
    finally:
        conn.close()
    return UsageSize("SQLite", versions, done, int(rows), int(after - before), 0, seconds)
