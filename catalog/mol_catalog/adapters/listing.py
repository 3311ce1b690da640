"""Reads behind the adapter listing and its search: keyset pages under every filter,
the search's two plans (a scan in key order, or the trigram index first) and the name
sample the search guesses its plan from. ``Prepared`` statements, as in ``repository``
(which holds the reads of one adapter, its versions and aliases).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Integer,
    String,
    any_,
    bindparam,
    func,
    literal_column,
    select,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import aliased
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_text, json_value
from mol_catalog.models import Adapter, AdapterTag, BaseLLM, Namespace

_FULL_NAME = Adapter.full_name == bindparam("full_name", type_=String)


# How many entries a search scans in key order before it hands over to the trigram index.
SEARCH_WINDOW = 20_000


class _Contains(FunctionElement[bool]):
    """``haystack`` contains ``needle`` (plain, case-sensitive): ``strpos`` on Postgres,
    ``instr`` on SQLite. No index serves it, on purpose: a window scan must walk the key
    order, and a LIKE here would tempt the planner into the trigram index instead."""

    type = Boolean()
    inherit_cache = True
    name = "mol_contains"


@compiles(_Contains)
def _contains_strpos(element: _Contains, compiler: SQLCompiler, **kw: Any) -> str:
    haystack, needle = (compiler.process(c, **kw) for c in element.clauses)
    return f"strpos({haystack}, {needle}) > 0"


@compiles(_Contains, "sqlite")
def _contains_instr(element: _Contains, compiler: SQLCompiler, **kw: Any) -> str:
    haystack, needle = (compiler.process(c, **kw) for c in element.clauses)
    return f"instr({haystack}, {needle}) > 0"


def _filters(tag: bool, base: str, namespaces: int, row: Any = Adapter) -> list[Any]:
    """The WHERE terms of a listing shape other than the search term and the cursor
    (``row``: the adapters table, or an alias of it)."""
    terms: list[Any] = []
    if tag:
        terms.append(AdapterTag.tag == bindparam("tag", type_=String))
    src: Any = AdapterTag if tag else row
    if base == "id":
        terms.append(src.base_model_id == bindparam("base_id", type_=BigInteger))
    elif base == "name":
        terms.append(src.base_name == bindparam("base_name", type_=String))
    if namespaces:
        # Ids, not a subquery on names: the planner then knows how few adapters one
        # namespace holds and walks its (namespace_id, id) index, instead of scanning a
        # tag's or a base's adapters in id order until the namespace's first ones.
        terms.append(row.namespace_id.in_(
            [bindparam(f"ns{i}", type_=BigInteger) for i in range(namespaces)]))
    return terms


_NAMESPACE_IDS: dict[int, Prepared] = {}


async def namespace_ids(conn: ReadConn, names: list[str]) -> list[int]:
    """The ids of the namespaces of these names that exist, in id order."""
    stmt = _NAMESPACE_IDS.get(len(names))
    if stmt is None:
        stmt = _NAMESPACE_IDS[len(names)] = Prepared(
            select(Namespace.id).where(Namespace.name.in_(
                [bindparam(f"name{i}", type_=String) for i in range(len(names))]))
            .order_by(Namespace.id))
    return [int(r[0]) for r in await stmt.all(conn, **{f"name{i}": n
                                                       for i, n in enumerate(names)})]


# At most this many words of a search term go to the trigram index (the longest).
TRIGRAM_WORDS = 4


def trigram_patterns(needle: str) -> list[str]:
    """The LIKE patterns the trigram index looks a search term up by: ``%word%`` for each
    of its longest runs of 3 or more letters or digits (pg_trgm's words); else the whole
    term, escaped.

    Names are lowercase ASCII, so a LIKE on the lowercased pattern is the case-insensitive
    match, at a fraction of ILIKE's per-row cost. Word by word, each pattern gives only
    its inner trigrams: the whole term would add padded ones at its separators (a word
    starting with "t" is in every name whose namespace starts with "team-"), whose long
    posting lists cost most of the index scan. The term itself is checked on the rows.
    """
    words = sorted({w for w in re.findall(r"[a-z0-9]+", needle) if len(w) >= 3},
                   key=lambda w: (-len(w), w))[:TRIGRAM_WORDS]
    if words:
        return [f"%{w}%" for w in words]
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return [f"%{escaped}%"]


def _item_columns(row: Any = Adapter) -> list[Any]:
    """The columns ``_listing_item`` takes, after the adapter id."""
    return [row.full_name, row.tags, row.labels, row.latest_version, row.updated_at,
            BaseLLM.name, BaseLLM.revision]


def _listing_statement(tag: bool, base: str, after: bool, namespaces: int) -> Prepared:
    """Keyset page ordered by adapter id. With a tag the (tag, base, adapter) side table
    drives the scan; otherwise the adapters indexes by base or namespace. ``base`` is
    "id", "name" or "" (no base filter); ``namespaces`` is how many names to allow (0: all)."""
    stmt = select(Adapter.id, *_item_columns())
    key: Any
    if tag:
        stmt = (stmt.select_from(AdapterTag)
                .join(Adapter, Adapter.id == AdapterTag.adapter_id))
        key = AdapterTag.adapter_id
    else:
        stmt = stmt.select_from(Adapter)
        key = Adapter.id
    stmt = stmt.join(BaseLLM, BaseLLM.id == Adapter.base_model_id)
    stmt = stmt.where(*_filters(tag, base, namespaces))
    if after:
        stmt = stmt.where(key > bindparam("after", type_=BigInteger))
        if tag:
            # On both sides of the join: a merge join would otherwise walk the adapters'
            # primary key from the first id up to the cursor.
            stmt = stmt.where(Adapter.id > bindparam("after", type_=BigInteger))
    return Prepared(stmt.order_by(key).limit(bindparam("limit", type_=Integer)))


def _trigram_statement(tag: bool, base: str, namespaces: int, patterns: int) -> Prepared:
    """A search's matches past ``after`` from the trigram index (``patterns``: how many
    ``trigram_patterns``), in id order.

    The matches come from the trigram index alone (a subquery behind OFFSET 0, which the
    planner plans on its own): the other filters apply to the fetched rows (a tag by its
    key), never as a second bitmap ANDed with the index's, which reads a base's or a
    namespace's index in full, nor as a walk of a tag's rows or the primary key in id
    order, which reads them all for a rare term.
    """
    m = (select(Adapter.id, Adapter.full_name, Adapter.tags, Adapter.labels,
                Adapter.latest_version, Adapter.updated_at, Adapter.base_model_id,
                Adapter.base_name, Adapter.namespace_id)
         .where(*[Adapter.full_name.like(bindparam(f"q{i}", type_=String), escape="\\")
                  for i in range(patterns)],
                _Contains(Adapter.full_name, bindparam("needle", type_=String)))
         .offset(literal_column("0"))).subquery("m")
    stmt = select(m.c.id, m.c.full_name, m.c.tags, m.c.labels, m.c.latest_version,
                  m.c.updated_at, BaseLLM.name, BaseLLM.revision).select_from(m)
    if tag:
        stmt = stmt.join(AdapterTag, AdapterTag.adapter_id == m.c.id)
    stmt = (stmt.join(BaseLLM, BaseLLM.id == m.c.base_model_id)
            .where(*_filters(tag, base, namespaces, m.c),
                   m.c.id > bindparam("after", type_=BigInteger)))
    return Prepared(stmt.order_by(m.c.id).limit(bindparam("limit", type_=Integer)))


def _scan(tag: bool, base: str, namespaces: int) -> str:
    """Which index a search scans in key order: the tag's rows, else the one namespace's
    adapters, else the base's, else all adapters. On Postgres each is a covering index
    (``ix_adapter_tags_tag_adapter_id_name``, ``ix_adapters_namespace_id_id``,
    ``ix_adapters_base_name_id`` / ``..._base_model_id_id``, ``ix_adapters_search_scan``),
    read index-only."""
    return ("tag" if tag else "namespace" if namespaces == 1 else "base" if base else "all")


def _scan_source(scan: str, base: str) -> tuple[Any, Any, list[Any]]:
    """(key, name, WHERE terms) of the scanned index."""
    if scan == "tag":
        return (AdapterTag.adapter_id, AdapterTag.full_name,
                [AdapterTag.tag == bindparam("tag", type_=String)])
    terms: list[Any] = []
    if scan == "namespace":
        terms = [Adapter.namespace_id == bindparam("ns0", type_=BigInteger)]
    elif scan == "base":
        terms = _filters(False, base, 0)
    return Adapter.id, Adapter.full_name, terms


def _window_statement(tag: bool, base: str, namespaces: int) -> Prepared:
    """A search's scan: the first ``limit`` matches among the next ``window`` entries of
    the scanned index (``_scan``) past ``lo``, in key order.

    The window is a count of entries, so it bounds the work whichever filter drives the
    scan. Only the matches are joined to their adapter rows (by primary key), where the
    other filters apply: outside the window's LIMIT, so that it counts entries, not
    matches.
    """
    scan = _scan(tag, base, namespaces)
    key, name, terms = _scan_source(scan, base)
    w = (select(key.label("id"), name.label("full_name"))
         .where(*terms, key > bindparam("lo", type_=BigInteger))
         .order_by(key)
         .limit(bindparam("window", type_=Integer))).subquery("w")
    row = aliased(Adapter, name="a")
    rest = _filters(False, base if scan in ("tag", "namespace") else "",
                    0 if scan == "namespace" else namespaces, row)
    return Prepared(
        select(w.c.id, *_item_columns(row))
        .select_from(w)
        .join(row, row.id == w.c.id)
        .join(BaseLLM, BaseLLM.id == row.base_model_id)
        .where(_Contains(w.c.full_name, bindparam("needle", type_=String)), *rest)
        .order_by(w.c.id)
        .limit(bindparam("limit", type_=Integer)))


def _window_end_statement(scan: str, base: str) -> Prepared:
    """The last key of a full window past ``lo`` (its ``window``-th entry), none when
    fewer entries are left: where the trigram index takes over."""
    key, _, terms = _scan_source(scan, base)
    return Prepared(select(key).where(*terms, key > bindparam("lo", type_=BigInteger))
                    .order_by(key).offset(bindparam("skip", type_=Integer)).limit(1))


_LISTINGS: dict[tuple[bool, str, bool, int], Prepared] = {}
_TRIGRAMS: dict[tuple[bool, str, int, int], Prepared] = {}
_WINDOWS: dict[tuple[bool, str, int], Prepared] = {}
_WINDOW_ENDS: dict[tuple[str, str], Prepared] = {}


async def _search(conn: ReadConn, params: dict[str, Any], tag: bool, base: str,
                  namespaces: int, window: int, rare: bool) -> list[Sequence[Any]]:
    """A search: ``window`` entries scanned in key order, then the trigram index.

    A common term fills its page from the next few thousand entries, where the trigram
    index would intersect long posting lists and sort every match; a rare term (``rare``:
    see ``adapters.name_sample``) goes to the index at once, which finds its few matches
    cheaply. The index takes over where the scanned window ended (nothing is left when
    the window reached the end), so the rows are exactly the page, in id order, whichever
    way the term was taken.
    """
    limit: int = params["limit"]
    edge: int = params["after"] or 0
    rows: list[Sequence[Any]] = []
    if not rare and window > 0:
        shape = (tag, base, namespaces)
        stmt = _WINDOWS.get(shape)
        if stmt is None:
            stmt = _WINDOWS[shape] = _window_statement(*shape)
        rows = await stmt.all(conn, **{**params, "lo": edge, "window": window})
        if len(rows) >= limit:
            return rows
        scan = (_scan(tag, base, namespaces), base)
        end = _WINDOW_ENDS.get(scan)
        if end is None:
            end = _WINDOW_ENDS[scan] = _window_end_statement(*scan)
        last = await end.first(conn, **{**params, "lo": edge, "skip": window - 1})
        if last is None:
            return rows
        edge = int(last[0])
    patterns = trigram_patterns(params["needle"])
    index_shape = (tag, base, namespaces, len(patterns))
    trigram = _TRIGRAMS.get(index_shape)
    if trigram is None:
        trigram = _TRIGRAMS[index_shape] = _trigram_statement(*index_shape)
    rows += await trigram.all(conn, **{**params, "after": edge, "limit": limit - len(rows)},
                              **{f"q{i}": p for i, p in enumerate(patterns)})
    return rows


_MAX_ID = Prepared(select(func.max(Adapter.id)))
_SAMPLED = (Adapter.full_name, Adapter.base_name, Adapter.tags)
_NAMES_BY_ID = Prepared(select(*_SAMPLED).where(
    Adapter.id == any_(bindparam("ids", type_=ARRAY(BigInteger)))))
_RANDOM_NAMES = Prepared(select(*_SAMPLED).order_by(func.random())
                         .limit(bindparam("count", type_=Integer)))


@dataclass(frozen=True)
class Sampled:
    """An adapter of the search's name sample: its name and what a search filters on."""

    full_name: str
    base_name: str
    tags: list[str]


async def sample_names(conn: ReadConn, count: int) -> tuple[list[Sampled], int]:
    """(about ``count`` adapters picked at random, the highest adapter id).

    Postgres: random ids, one index probe each, one array parameter; SQLite (small
    tables, read in the driver's thread): ``ORDER BY random()``."""
    top = int((await _MAX_ID.all(conn))[0][0] or 0)
    if top == 0:
        return [], 0
    if conn.dialect.name != "postgresql":
        rows = await _RANDOM_NAMES.all(conn, count=count)
    else:
        ids = random.sample(range(1, top + 1), min(count, top))
        rows = await _NAMES_BY_ID.all(conn, ids=ids)
    return [Sampled(r[0], r[1], list(json_value(r[2]) or [])) for r in rows], top


def scanned_filter(tag: str | None, base: str | None, namespaces: set[str] | None,
                   ) -> tuple[str, str] | None:
    """The filter whose adapters a search scans in key order (see ``_scan``): ("tag",
    name), ("namespace", name), ("base", name), or None for all adapters."""
    if tag is not None:
        return "tag", tag
    if namespaces is not None and len(namespaces) == 1:
        return "namespace", next(iter(namespaces))
    if base:
        return "base", base.partition("@")[0]
    return None


async def list_adapters(conn: ReadConn, *, after: int | None, limit: int,
                        tag: str | None, base_name: str | None, base_model_id: int | None,
                        q: str | None, namespaces: set[str] | None,
                        window: int = SEARCH_WINDOW, rare: bool = False,
                        ) -> list[tuple[int, dict[str, Any]]]:
    """One keyset page: (adapter id, listing item) pairs, the items ready to encode.

    A search scans in key order or asks the trigram index first (``_search``): exact
    either way.
    """
    base = "id" if base_model_id is not None else "name" if base_name is not None else ""
    ns: list[int] = []
    if namespaces is not None:
        ns = await namespace_ids(conn, sorted(namespaces)) if namespaces else []
        if not ns:
            return []
    params: dict[str, Any] = {"tag": tag, "base_id": base_model_id, "base_name": base_name,
                              "after": after, "limit": limit}
    params.update({f"ns{i}": ns_id for i, ns_id in enumerate(ns)})
    if q:
        params["needle"] = q.lower()
    rows: list[Sequence[Any]]
    if q:
        rows = await _search(conn, params, tag is not None, base, len(ns), window, rare)
    else:
        shape = (tag is not None, base, after is not None, len(ns))
        stmt = _LISTINGS.get(shape)
        if stmt is None:
            stmt = _LISTINGS[shape] = _listing_statement(*shape)
        rows = await stmt.all(conn, **params)
    return [(row[0], _listing_item(*row[1:])) for row in rows]


_ITEM = Prepared(select(Adapter.id, *_item_columns())
                 .join(BaseLLM, BaseLLM.id == Adapter.base_model_id).where(_FULL_NAME))


async def adapter_item(conn: ReadConn, full_name: str) -> tuple[int, dict[str, Any]] | None:
    """(adapter id, the adapter as listings show it)."""
    row = await _ITEM.first(conn, full_name=full_name)
    return (int(row[0]), _listing_item(*row[1:])) if row is not None else None


def _listing_item(full_name: str, tags: Any, labels: Any, latest_version: int | None,
                  updated_at: Any, base_name: str, revision: str) -> dict[str, Any]:
    """A listing item as the API returns it. The stored JSON of tags and labels goes out
    as it is (``orjson.Fragment``), never decoded and encoded again."""
    namespace, _, name = full_name.partition("/")
    return {"adapter": full_name, "namespace": namespace, "name": name,
            "base": f"{base_name}@{revision}", "tags": json_text(tags, "[]"),
            "labels": json_text(labels, "{}"), "latest_version": latest_version,
            "updated_at": datetime_value(updated_at)}
