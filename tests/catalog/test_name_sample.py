"""The name sample that routes searches, and the two routes it picks.

A rare term goes straight to the trigram index (one statement, no scan); a common one
is scanned for in key order and needs no index when the scan fills the page. The sample
loads on first use, refreshes in the background once stale, and survives a failed
refresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.dialects import sqlite

from mol_catalog.adapters import listing
from mol_catalog.adapters.name_sample import NameSample
from mol_catalog.db import Database, Reader, migrate
from mol_catalog.models import Adapter, BaseLLM, Namespace


class NoDatabase:
    """Stands for the database when ``listing.sample_names`` is faked: reads yield nothing."""

    @asynccontextmanager
    async def read(self) -> AsyncIterator[None]:
        yield None


class _Recorder:
    """A raw connection that records statements and answers from a script."""

    def __init__(self, answers: list[list[Sequence[Any]]]) -> None:
        self.sql: list[str] = []
        self.answers = answers

    async def fetch(self, sql: str, *_args: Any) -> list[Sequence[Any]]:
        self.sql.append(sql)
        return self.answers.pop(0)


def _row(i: int) -> tuple[Any, ...]:
    return (i, f"ns/n{i}", "[]", "{}", 1, "2026-01-01T00:00:00", "base", "r1")


async def _search(rare: bool, answers: list[list[Sequence[Any]]]) -> tuple[list[int], list[str]]:
    raw = _Recorder(answers)
    rows = await listing.list_adapters(Reader(sqlite.dialect(), raw=raw), after=None, limit=3,
                                    tag=None, base_name=None, base_model_id=None, q="n",
                                    namespaces=None, window=100, rare=rare)
    return [i for i, _ in rows], raw.sql


async def test_rare_terms_skip_the_scan_and_common_ones_the_index() -> None:
    ids, sql = await _search(True, [[_row(7)]])
    assert ids == [7]
    assert len(sql) == 1
    assert "LIKE" in sql[0]
    assert " AS w " not in sql[0]  # no window scan
    ids, sql = await _search(False, [[_row(1), _row(2), _row(3)]])
    assert ids == [1, 2, 3]
    assert len(sql) == 1
    assert " AS w " in sql[0]
    assert "LIKE" not in sql[0]
    # A scan that does not fill the page hands over to the index, after the window's end.
    ids, sql = await _search(False, [[_row(1)], [(140,)], [_row(150), _row(160)]])
    assert ids == [1, 150, 160]
    assert len(sql) == 3
    assert "OFFSET" in sql[1]
    assert "LIKE" in sql[2]
    # A window that reached the last entry leaves nothing for the index.
    ids, sql = await _search(False, [[_row(1)], []])
    assert ids == [1]
    assert len(sql) == 2
    assert "LIKE" not in "".join(sql)


async def _db_with(tmp_path: Path, names: list[str]) -> Database:
    url = f"sqlite:///{tmp_path}/c.db"
    migrate(url)
    db = Database(url)
    await _add(db, names)
    return db


async def _add(db: Database, names: list[str]) -> None:
    async with db.unit() as uow:
        base_id = (await uow.conn.execute(insert(BaseLLM).returning(BaseLLM.id), {
            "name": "b", "revision": f"r{len(names)}", "architecture": "x", "config": {},
            "tensors": {}, "shapes": {}, "content_digest": "sha256:" + "0" * 64})).scalar_one()
        ns = f"ns{len(names)}"
        ns_id = (await uow.conn.execute(insert(Namespace).returning(Namespace.id),
                                        {"name": ns})).scalar_one()
        await uow.conn.execute(insert(Adapter), [
            {"namespace_id": ns_id, "name": n, "full_name": f"{ns}/{n}",
             "base_model_id": base_id, "base_name": "b"} for n in names])


async def test_sample_loads_refreshes_and_survives_failures(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            ) -> None:
    db = await _db_with(tmp_path, ["alpha", "beta"])
    sample = NameSample(size=100, max_age=0.05)

    def rare(term: str) -> bool:  # window 1: a term in the sample is scanned for first
        return sample.rare(term, window=1, limit=51)

    try:
        assert not rare("zzz")  # before the first load nothing is taken as rare
        await sample.ensure(db)
        assert rare("zzz")
        assert not rare("alph")
        assert not rare("ns2/be")
        await _add(db, ["gamma"])
        assert rare("gamma")
        await asyncio.sleep(0.1)
        await sample.ensure(db)  # stale: refreshed in the background
        for _ in range(100):
            if not rare("gamma"):
                break
            await asyncio.sleep(0.02)
        assert not rare("gamma")

        async def broken(*_args: Any) -> list[listing.Sampled]:
            raise RuntimeError("db down")

        monkeypatch.setattr(listing, "sample_names", broken)
        await asyncio.sleep(0.1)
        await sample.ensure(db)
        await asyncio.sleep(0.05)
        assert not rare("gamma")
        assert rare("zzz")
    finally:
        await sample.close()
        await db.dispose()


async def test_no_sample_scans_every_term(tmp_path: Path) -> None:
    db = await _db_with(tmp_path, ["alpha"])
    sample = NameSample(size=0)
    try:
        await sample.ensure(db)
        assert not sample.rare("zzz", 20_000, 51)
    finally:
        await sample.close()
        await db.dispose()


async def test_the_cheaper_way_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """4,000 sampled names of a million: the sample's hits estimate the matches; the
    index goes first when fetching every match costs less than scanning for a page."""
    names = ["x-acme"] * 20 + ["x-bolt"] * 2 + ["x-core"] * 5 + ["x-other"] * 3973

    async def fake(_conn: Any, count: int) -> tuple[list[listing.Sampled], int]:
        assert count == 4000
        return [listing.Sampled(f"ns/{n}", "b", []) for n in names], 1_000_000

    monkeypatch.setattr(listing, "sample_names", fake)

    sample = NameSample()
    await sample.ensure(NoDatabase())  # type: ignore[arg-type]
    assert sample.rare("zzz", 20_000, 51)  # no hit: few matches, the index finds them
    assert not sample.rare("acme", 20_000, 51)  # ~5,000 matches: a page in ~10,000 ids
    assert sample.rare("bolt", 20_000, 51)  # ~500 matches: cheaper than 20,000 ids
    assert not sample.rare("core", 20_000, 51)  # ~1,250 matches: dearer than the scan
    assert sample.rare("core", 20_000, 51) != sample.rare("core", 30_000, 51)
    assert not sample.rare("x-", 20_000, 51)


async def test_a_filter_changes_the_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a filter the scan reads that filter's adapters: all of them when they are no
    more than a window (no index needed); none fill a page when the term, common
    elsewhere, never shows up there in the sample, so the index goes first."""
    rows = ([listing.Sampled(f"team-a/x-acme-{i}", "llama", ["chat"]) for i in range(200)]
            + [listing.Sampled(f"team-b/x-other-{i}", "qwen", ["chat"]) for i in range(3790)]
            + [listing.Sampled(f"tiny/x-acme-{i}", "llama", ["code"]) for i in range(10)])

    async def fake(_conn: Any, count: int) -> tuple[list[listing.Sampled], int]:
        return rows, 1_000_000

    monkeypatch.setattr(listing, "sample_names", fake)


    sample = NameSample()
    await sample.ensure(NoDatabase())  # type: ignore[arg-type]
    assert not sample.rare("acme", 20_000, 26)  # ~52,000 matches: a page in ~500 ids
    assert not sample.rare("acme", 20_000, 26, ("base", "llama"))
    assert sample.rare("acme", 20_000, 26, ("base", "qwen"))  # none of 3,790 (210 promised)
    assert not sample.rare("acme", 20_000, 26, ("tag", "chat"))
    assert not sample.rare("acme", 20_000, 26, ("tag", "unknown"))  # no sampled rows: scan
    # ~2,500 adapters in namespace tiny: the scan reads them all, cheaper than the index
    assert not sample.rare("acme", 20_000, 26, ("namespace", "tiny"))
    assert not sample.rare("acme", 20_000, 26, ("namespace", "unknown"))
    assert sample.rare("zzz", 20_000, 26, ("namespace", "tiny"))  # no match anywhere


async def test_concurrent_first_searches_share_one_load(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    gate = asyncio.Event()

    async def slow(_conn: Any, _count: int) -> tuple[list[listing.Sampled], int]:
        nonlocal calls
        calls += 1
        await gate.wait()
        return [listing.Sampled("ns/x-acme", "b", [])], 1


    monkeypatch.setattr(listing, "sample_names", slow)
    sample = NameSample()
    waiting = [asyncio.create_task(sample.ensure(NoDatabase())) for _ in range(5)]  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(*waiting)
    assert calls == 1
    assert sample.rare("zzz", 20_000, 51)


async def test_the_app_start_loads_the_sample_so_no_search_pays_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0

    async def fake(_conn: Any, _count: int) -> tuple[list[listing.Sampled], int]:
        nonlocal calls
        calls += 1
        return [listing.Sampled("ns/x-acme", "b", [])], 1

    monkeypatch.setattr(listing, "sample_names", fake)
    sample = NameSample()
    sample.preload(NoDatabase())  # type: ignore[arg-type]
    sample.preload(NoDatabase())  # type: ignore[arg-type]  # one load in flight at most
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert calls == 1
    await sample.ensure(NoDatabase())  # type: ignore[arg-type]  # loaded: no second read
    assert calls == 1
    assert sample.rare("zzz", 20_000, 51)
    NameSample(size=0).preload(NoDatabase())  # type: ignore[arg-type]  # sampling off
    await asyncio.sleep(0)
    assert calls == 1
