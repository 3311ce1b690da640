"""The write style: units of work on one connection, and ``Database.transact``'s retry of
a unit that lost a race on a unique key (real SQLite and Postgres)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import String, bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from mol_catalog.db import Database, Prepared, UnitOfWork, json_value, migrate
from mol_catalog.events import repository as events
from mol_catalog.models import Namespace

_ID = Prepared(select(Namespace.id).where(Namespace.name == bindparam("name", type_=String)))


async def _names(db: Database) -> list[str]:
    async with db.read() as conn:
        rows = await Prepared(select(Namespace.name).order_by(Namespace.name)).all(conn)
    return [r[0] for r in rows]


async def test_transact_retries_a_unit_that_lost_a_unique_race(db_url: str) -> None:
    db = Database(db_url, pool_size=2)
    try:
        async with db.unit() as uow:
            await uow.conn.execute(insert(Namespace), {"name": "acme"})
        calls = 0

        async def work(uow: UnitOfWork) -> int:
            """First call: as if it had read before the winner committed "acme"."""
            nonlocal calls
            calls += 1
            uow.emit("base.registered", data={"attempt": calls})
            found = await _ID.first(uow.conn, name="acme")
            if calls == 1:
                await uow.conn.execute(insert(Namespace), {"name": "zeta"})
                await uow.conn.execute(insert(Namespace), {"name": "acme"})
            assert found is not None
            return int(found[0])

        assert await db.transact(work) == 1
        assert calls == 2
        # The lost attempt left nothing: neither its rows nor its events.
        assert await _names(db) == ["acme"]
        async with db.read() as conn:
            rows = await events.after(conn, 0, 10)
        assert [json_value(r[5]) for r in rows] == [{"attempt": 2}]
    finally:
        await db.dispose()


async def test_transact_gives_up_after_its_attempts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    migrate(url)
    db = Database(url)
    calls = 0

    async def work(uow: UnitOfWork) -> None:
        nonlocal calls
        calls += 1
        await uow.conn.execute(insert(Namespace), [{"name": "dup"}, {"name": "dup"}])

    try:
        with pytest.raises(IntegrityError):
            await db.transact(work, attempts=3)
        assert calls == 3
        assert await _names(db) == []
    finally:
        await db.dispose()


async def test_a_units_events_hold_the_feed_lock_until_it_commits(db_url: str) -> None:
    """Event ids come in commit order: a unit that has appended its events holds the
    outbox lock (Postgres: an advisory lock) until it commits, so a second unit's events
    wait, and are numbered after the first's. SQLite serializes writers anyway."""
    import asyncio

    db = Database(db_url, pool_size=4)
    first_appended = asyncio.Event()
    release = asyncio.Event()
    try:
        async def first() -> None:
            async with db.unit() as uow:
                uow.emit("base.registered", data={"unit": "first"})
                await uow.append_events()  # as the unit's exit does, before COMMIT
                first_appended.set()
                await release.wait()

        async def second() -> None:
            await first_appended.wait()
            async with db.unit() as uow:
                uow.emit("base.registered", data={"unit": "second"})

        task_first = asyncio.create_task(first())
        task_second = asyncio.create_task(second())
        await first_appended.wait()
        await asyncio.sleep(0.5)
        if db.postgres:  # the second unit waits for the lock the first holds
            assert not task_second.done()
            async with db.read() as conn:
                assert await events.after(conn, 0, 10) == []  # nothing committed yet
        release.set()
        await asyncio.gather(task_first, task_second)
        async with db.read() as conn:
            rows = await events.after(conn, 0, 10)
        assert [json_value(r[5])["unit"] for r in rows] == ["first", "second"]
    finally:
        release.set()
        await db.dispose()
