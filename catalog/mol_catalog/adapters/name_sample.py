"""A random sample of adapter names, kept per process: is a search term rare?

A search either scans in key order (all adapters, or those of the tag, namespace or base
it filters on: cheap when the term is common there, the page fills from the next few
thousand) or asks the trigram index (cheap when it is rare: few matches to fetch and
sort). Which one is a guess, and a wrong guess costs time, never correctness: both give
exactly the page. The sample makes the guess for free, with no SQL: the share of 4,000
random adapters whose names contain the term estimates how many adapters match it, in
all and under the filter, and so what each way costs (``rare``).

The sample is read on the first search and refreshed in the background once it is older
than ``max_age`` seconds; searches meanwhile use the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from mol_catalog.adapters import listing
from mol_catalog.db import Database

log = logging.getLogger("mol_catalog")

# What the trigram index spends per match (posting lists, a heap fetch and recheck, the
# sort) in units of one id read by a key-order scan: measured ~20 on Postgres 15.
RECHECK_COST = 20.0
# Sampled matches a filter's share of the sample must promise before none there means
# the term is absent under it (at 4 the odds of none by chance are under 2%).
ABSENT = 4


class NameSample:
    def __init__(self, size: int = 4000, max_age: float = 300.0) -> None:
        self.size = size
        self.max_age = max_age
        self._text: str | None = None  # the names, one per line
        self._sampled = 0  # names in the sample
        # per filter ("tag" | "namespace" | "base", value): (its sampled names, how many)
        self._within: dict[tuple[str, str], tuple[str, int]] = {}
        self._table_size = 0  # adapters when it was taken (the highest id)
        self._loaded_at = 0.0
        self._loading: asyncio.Task[None] | None = None

    def rare(self, needle: str, window: int, limit: int,
             within: tuple[str, str] | None = None) -> bool:
        """Whether the trigram index should search for ``needle`` before any scan.

        From the sample: about ``matches`` adapters contain the term, so a scan reads
        about ``limit / selectivity`` entries (at most ``window``) and the index fetches
        and checks every match, each ~RECHECK_COST times a scanned entry. ``within``: the
        filter whose adapters the search scans (``listing.scanned_filter``; None: all). When
        it holds no more than a window, the scan reads them all and the index is never
        needed; when none of its sampled adapters has the term although the term's share
        promised ``ABSENT`` or more, the term shuns the filter (a base it was never
        trained on): a window would not fill a page, and the index would run after it
        anyway. Before the first load, and with ``size`` 0, nothing is rare: every term
        is scanned for first.
        """
        text = self._text
        if not text or self._sampled <= 0:
            return False
        # Counting stops where the scan wins whatever the count: at ``cap`` hits the
        # estimated matches already cost the index a whole window.
        cap = int(window * self._sampled / (RECHECK_COST * self._table_size)) + 1
        hits = _count(text, needle, cap)
        if hits == 0:
            return True
        index = hits / self._sampled * self._table_size * RECHECK_COST
        if within is not None:
            part, among = self._within.get(within, ("", 0))
            size = among / self._sampled * self._table_size
            if size <= window:
                return index < size
            need = -(-ABSENT * self._sampled // max(among, 1))  # hits promising ABSENT there
            if _count(text, needle, need) >= need and _count(part, needle, 1) == 0:
                return True
        return index < min(window, limit * self._sampled / hits)

    def preload(self, db: Database) -> None:
        """Start the first load now (at the app's start), so that no search waits for it
        later: the first one, a cold process's, would otherwise pay the sample's whole
        read (a few hundred ms at 1M adapters)."""
        if self.size > 0 and self._text is None and self._loading is None:
            self._start(db)

    async def ensure(self, db: Database) -> None:
        """Load the sample on first use (concurrent first searches share one load, and
        its error); refresh a stale one in the background."""
        if self.size <= 0:
            return
        if self._text is None:
            await asyncio.shield(self._loading or self._start(db))
        elif time.monotonic() - self._loaded_at > self.max_age and self._loading is None:
            self._start(db)

    def _start(self, db: Database) -> asyncio.Task[None]:
        task = self._loading = asyncio.create_task(self._load(db))
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._loading = None
        if task.cancelled():
            return
        error = task.exception()  # a first load's error reaches its waiting searches
        if error is not None and self._text is not None:  # keep the old sample; retry later
            log.warning("refreshing the search name sample failed", exc_info=error)

    async def _load(self, db: Database) -> None:
        async with db.read() as conn:
            rows, self._table_size = await listing.sample_names(conn, self.size)
        groups: dict[tuple[str, str], list[str]] = {}
        for row in rows:
            keys = [("base", row.base_name), ("namespace", row.full_name.partition("/")[0])]
            for key in keys + [("tag", t) for t in row.tags]:
                groups.setdefault(key, []).append(row.full_name)
        self._within = {key: ("\n".join(names), len(names)) for key, names in groups.items()}
        self._sampled = len(rows)
        self._text = "\n".join(r.full_name for r in rows)
        self._loaded_at = time.monotonic()

    async def close(self) -> None:
        task, self._loading = self._loading, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _count(text: str, needle: str, cap: int) -> int:
    """Occurrences of ``needle`` in ``text``, counted up to ``cap``."""
    hits, at = 0, text.find(needle)
    while at >= 0 and hits < cap:
        hits += 1
        at = text.find(needle, at + len(needle))
    return hits
