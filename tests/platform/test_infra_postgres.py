"""The throwaway PostgreSQL cluster: reachable through SQLAlchemy, pg_trgm available,
databases created and dropped, and everything gone after stop()."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from mol_testkit.net import port_open
from mol_testkit.postgres import PostgresCluster, fresh_database

pytestmark = pytest.mark.postgres


def test_fresh_database_with_trigram(postgres_cluster: PostgresCluster) -> None:
    url = fresh_database(postgres_cluster, "infra test")
    assert url.startswith("postgresql+psycopg://")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE a (name text)"))
            conn.execute(sa.text("INSERT INTO a VALUES ('support-bot'), ('coder')"))
            conn.execute(sa.text("CREATE INDEX ON a USING gin (name gin_trgm_ops)"))
            rows = conn.execute(sa.text("SELECT name FROM a WHERE name ILIKE '%port%'")).all()
            version = conn.execute(sa.text("SHOW server_version")).scalar_one()
    finally:
        engine.dispose()
    assert rows == [("support-bot",)]
    assert str(version).startswith("15")


async def test_asyncpg_driver(postgres_cluster: PostgresCluster) -> None:
    name = "asyncpg_check"
    postgres_cluster.create_database(name)
    engine = create_async_engine(postgres_cluster.url(name, driver="asyncpg"))
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(sa.text("SELECT 41 + 1"))).scalar_one() == 42
    finally:
        await engine.dispose()
        postgres_cluster.drop_database(name)
    assert name not in postgres_cluster.databases()


def test_settings_for_tests(postgres_cluster: PostgresCluster) -> None:
    with postgres_cluster.connect() as conn:
        fsync = conn.execute("SHOW fsync").fetchone()
        listen = conn.execute("SHOW listen_addresses").fetchone()
    assert fsync == ("off",)
    assert listen == ("127.0.0.1",)


def test_stop_removes_everything() -> None:
    cluster = PostgresCluster().start()
    base, port = cluster.base_dir, cluster.port
    assert base is not None
    assert port_open(port)
    cluster.stop()
    assert not base.exists()
    assert not port_open(port)
    cluster.stop()  # idempotent


def test_server_dies_with_its_owner() -> None:
    """A test process killed without cleanup leaves no server behind (pdeathsig)."""
    script = (
        "from mol_testkit.postgres import PostgresCluster\n"
        "c = PostgresCluster().start()\n"
        "print(c.port, c._proc.pid, c.base_dir, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        port, pid, base = owner.stdout.readline().split()
        assert port_open(int(port))
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    deadline = time.monotonic() + 10
    while _alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(pid))
    shutil.rmtree(base, ignore_errors=True)  # the temp dir is the only leftover


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_settings_override_the_test_defaults() -> None:
    from mol_testkit.postgres import PostgresCluster

    with PostgresCluster(settings={"work_mem": "7MB", "fsync": "on"}) as cluster:
        with cluster.connect() as conn:
            assert conn.execute("SHOW work_mem").fetchone() == ("7MB",)
            assert conn.execute("SHOW fsync").fetchone() == ("on",)
        pid_file = (cluster.data_dir / "postmaster.pid").read_text().splitlines()[0]
        assert int(pid_file) == cluster.pid
