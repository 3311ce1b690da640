"""SQL for namespaces, adapters, versions, tags and aliases."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Integer,
    String,
    any_,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import aliased
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_text
from mol_catalog.models import (
    Adapter,
    AdapterTag,
    Alias,
    AliasHistory,
    BaseModel,
    Namespace,
    ServingProfile,
    Verdict,
    Version,
    VersionBlob,
)


async def namespace_id(session: AsyncSession, name: str, create: bool) -> int | None:
    found = (await session.execute(select(Namespace.id).where(Namespace.name == name))).scalar()
    if found is None and create:
        row = Namespace(name=name)
        session.add(row)
        await session.flush()
        return row.id
    return found


async def adapter(session: AsyncSession, full_name: str, lock: bool = False) -> Adapter | None:
    stmt = select(Adapter).where(Adapter.full_name == full_name)
    if lock:
        stmt = stmt.with_for_update()
    return (await session.execute(stmt)).scalar_one_or_none()


async def add(session: AsyncSession, row: Any) -> None:
    session.add(row)
    await session.flush()


async def version_by_digest(session: AsyncSession, adapter_id: int, digest: str) -> Version | None:
    return (await session.execute(
        select(Version).where(Version.adapter_id == adapter_id, Version.digest == digest)
    )).scalar_one_or_none()


async def version_by_number(session: AsyncSession, adapter_id: int, number: int,
                            lock: bool = False) -> Version | None:
    stmt = select(Version).where(Version.adapter_id == adapter_id, Version.number == number)
    if lock:
        stmt = stmt.with_for_update()
    return (await session.execute(stmt)).scalar_one_or_none()


async def add_version_blobs(session: AsyncSession, version_id: int, digests: set[str]) -> None:
    await session.execute(insert(VersionBlob),
                          [{"digest": d, "version_id": version_id} for d in sorted(digests)])


async def replace_tags(session: AsyncSession, row: Adapter) -> None:
    await session.execute(delete(AdapterTag).where(AdapterTag.adapter_id == row.id))
    if row.tags:
        await session.execute(insert(AdapterTag), [
            {"tag": t, "adapter_id": row.id, "base_name": row.base_name,
             "base_model_id": row.base_model_id} for t in row.tags
        ])


async def newest_ready(session: AsyncSession, adapter_id: int) -> int | None:
    return (await session.execute(
        select(func.max(Version.number)).where(Version.adapter_id == adapter_id,
                                                Version.status == "ready")
    )).scalar()


async def aliases(session: AsyncSession, adapter_id: int) -> dict[str, int]:
    rows = await session.execute(select(Alias.name, Alias.version)
                                 .where(Alias.adapter_id == adapter_id).order_by(Alias.name))
    return {name: version for name, version in rows}


async def alias(session: AsyncSession, adapter_id: int, name: str) -> Alias | None:
    return await session.get(Alias, (adapter_id, name))


async def aliases_at(session: AsyncSession, adapter_id: int, number: int) -> list[str]:
    rows = await session.execute(select(Alias.name).where(
        Alias.adapter_id == adapter_id, Alias.version == number).order_by(Alias.name))
    return list(rows.scalars())


async def alias_history(session: AsyncSession, adapter_id: int, name: str,
                        limit: int) -> Sequence[AliasHistory]:
    return (await session.execute(
        select(AliasHistory).where(AliasHistory.adapter_id == adapter_id,
                                   AliasHistory.alias == name)
        .order_by(AliasHistory.id.desc()).limit(limit)
    )).scalars().all()


async def versions_page(session: AsyncSession, adapter_id: int, before: int | None,
                        limit: int) -> Sequence[Version]:
    stmt = select(Version).where(Version.adapter_id == adapter_id)
    if before is not None:
        stmt = stmt.where(Version.number < before)
    stmt = stmt.order_by(Version.number.desc()).limit(limit)
    return (await session.execute(stmt)).scalars().all()


async def verdicts_for_version(session: AsyncSession,
                               version_id: int) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in (await session.execute(
        select(ServingProfile.name, Verdict.compatible, Verdict.reasons,
               Verdict.profile_generation, ServingProfile.generation)
        .join(ServingProfile, ServingProfile.id == Verdict.profile_id)
        .where(Verdict.version_id == version_id).order_by(ServingProfile.name)
    )).all()]


async def base_ref(session: AsyncSession, base_model_id: int) -> str:
    row = (await session.execute(select(BaseModel.name, BaseModel.revision)
                                 .where(BaseModel.id == base_model_id))).one()
    return f"{row[0]}@{row[1]}"


# How many ids a search scans in key order before it hands over to the trigram index.
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


def _filters(tag: bool, base: str, namespaces: int) -> list[Any]:
    """The WHERE terms of a listing shape other than the search term and the cursor."""
    terms: list[Any] = []
    if tag:
        terms.append(AdapterTag.tag == bindparam("tag", type_=String))
    src: Any = AdapterTag if tag else Adapter
    if base == "id":
        terms.append(src.base_model_id == bindparam("base_id", type_=BigInteger))
    elif base == "name":
        terms.append(src.base_name == bindparam("base_name", type_=String))
    if namespaces:
        names = [bindparam(f"ns{i}", type_=String) for i in range(namespaces)]
        terms.append(Adapter.namespace_id.in_(
            select(Namespace.id).where(Namespace.name.in_(names)).scalar_subquery()))
    return terms


def _search_term() -> Any:
    """Names are lowercase ASCII, so a LIKE on the lowercased pattern is the
    case-insensitive match, at a fraction of ILIKE's per-row cost (both use the trigram
    index)."""
    return Adapter.full_name.like(bindparam("q", type_=String), escape="\\")


def _listing_statement(tag: bool, base: str, q: bool, after: bool, namespaces: int) -> Prepared:
    """Keyset page ordered by adapter id. With a tag the (tag, base, adapter) side table
    drives the scan; otherwise the adapters indexes by base or namespace. ``base`` is
    "id", "name" or "" (no base filter); ``namespaces`` is how many names to allow (0: all)."""
    stmt = select(Adapter.id, Adapter.full_name, Adapter.tags, Adapter.labels,
                  Adapter.latest_version, Adapter.updated_at, BaseModel.name,
                  BaseModel.revision)
    key: Any
    if tag:
        stmt = (stmt.select_from(AdapterTag)
                .join(Adapter, Adapter.id == AdapterTag.adapter_id))
        key = AdapterTag.adapter_id
    else:
        stmt = stmt.select_from(Adapter)
        key = Adapter.id
    stmt = stmt.join(BaseModel, BaseModel.id == Adapter.base_model_id)
    stmt = stmt.where(*_filters(tag, base, namespaces))
    if q:
        stmt = stmt.where(_search_term())
    if after:
        stmt = stmt.where(key > bindparam("after", type_=BigInteger))
    if q and not tag and after:
        # Past a search's windows (see ``_search``): skipped outright, by a one-time filter,
        # when no adapter lies beyond the cursor, where the trigram index would otherwise
        # gather every match of a common term only to drop them all.
        stmt = stmt.where(bindparam("after", type_=BigInteger)
                          < select(func.max(Adapter.id)).scalar_subquery())
    # A search without a tag orders by ``id + 0``: Postgres then always filters through the
    # trigram index and sorts the matches. Ordered by the bare key, a generic plan of this
    # prepared statement may walk the primary key instead, which reads the whole table for
    # a rare term.
    order = key + literal_column("0") if q and not tag else key
    return Prepared(stmt.order_by(order).limit(bindparam("limit", type_=Integer)))


def _window_statement(base: str, namespaces: int) -> Prepared:
    """A search's scan of the id range ``(lo, hi]`` in key order: its first ``limit`` matches.

    On Postgres the scan reads only the covering index ``ix_adapters_search_scan`` (id,
    then name, base and namespace ids; migration 0003), stops at ``limit`` matches and
    reads at most ``hi - lo`` entries; the matches' other columns are then joined by
    primary key, for at most ``limit`` rows.
    """
    w = (select(Adapter.id, Adapter.base_model_id)
         .where(Adapter.id > bindparam("lo", type_=BigInteger),
                Adapter.id <= bindparam("hi", type_=BigInteger),
                _Contains(Adapter.full_name, bindparam("needle", type_=String)),
                *_filters(False, base, namespaces))
         .order_by(Adapter.id)
         .limit(bindparam("limit", type_=Integer))).subquery("w")
    row = aliased(Adapter, name="a")
    return Prepared(
        select(w.c.id, row.full_name, row.tags, row.labels, row.latest_version, row.updated_at,
               BaseModel.name, BaseModel.revision)
        .select_from(w)
        .join(row, row.id == w.c.id)
        .join(BaseModel, BaseModel.id == w.c.base_model_id)
        .order_by(w.c.id))


_LISTINGS: dict[tuple[bool, str, bool, bool, int], Prepared] = {}
_WINDOWS: dict[tuple[str, int], Prepared] = {}


def _listing(shape: tuple[bool, str, bool, bool, int]) -> Prepared:
    stmt = _LISTINGS.get(shape)
    if stmt is None:
        stmt = _LISTINGS[shape] = _listing_statement(*shape)
    return stmt


async def _search(conn: ReadConn, params: dict[str, Any], base: str, namespaces: int,
                  window: int, rare: bool) -> list[Sequence[Any]]:
    """A search without a tag: ``window`` ids scanned in key order, then the trigram index.

    A common term fills its page from the next few thousand ids, where the trigram index
    would intersect long posting lists and sort every match; a rare term (``rare``: see
    ``adapters.sample``) goes to the index at once, which finds its few matches cheaply.
    The index takes over where the scanned range ended, so the rows are exactly the page,
    in id order, whichever way the term was taken.
    """
    limit: int = params["limit"]
    edge: int = params["after"] or 0
    rows: list[Sequence[Any]] = []
    if not rare and window > 0:
        shape = (base, namespaces)
        stmt = _WINDOWS.get(shape)
        if stmt is None:
            stmt = _WINDOWS[shape] = _window_statement(*shape)
        rows = await stmt.all(conn, **{**params, "lo": edge, "hi": edge + window})
        edge += window
    if len(rows) < limit:
        rows += await _listing((False, base, True, True, namespaces)).all(
            conn, **{**params, "after": edge, "limit": limit - len(rows)})
    return rows


_MAX_ID = Prepared(select(func.max(Adapter.id)))
_NAMES_BY_ID = Prepared(select(Adapter.full_name).where(
    Adapter.id == any_(bindparam("ids", type_=ARRAY(BigInteger)))))
_RANDOM_NAMES = Prepared(select(Adapter.full_name).order_by(func.random())
                         .limit(bindparam("count", type_=Integer)))


async def sample_names(conn: ReadConn, count: int) -> tuple[list[str], int]:
    """(about ``count`` names of adapters picked at random, the highest adapter id).

    Postgres: random ids, one index probe each, one array parameter; SQLite (small
    tables, read in the driver's thread): ``ORDER BY random()``."""
    top = int((await _MAX_ID.all(conn))[0][0] or 0)
    if top == 0:
        return [], 0
    if conn.dialect.name != "postgresql":
        return [r[0] for r in await _RANDOM_NAMES.all(conn, count=count)], top
    ids = random.sample(range(1, top + 1), min(count, top))
    return [r[0] for r in await _NAMES_BY_ID.all(conn, ids=ids)], top


async def list_adapters(conn: ReadConn, *, after: int | None, limit: int,
                        tag: str | None, base_name: str | None, base_model_id: int | None,
                        q: str | None, namespaces: set[str] | None,
                        window: int = SEARCH_WINDOW, rare: bool = False,
                        ) -> list[tuple[int, dict[str, Any]]]:
    """One keyset page: (adapter id, listing item) pairs, the items ready to encode.

    A search without a tag scans ids or asks the trigram index first (``_search``): exact
    either way.
    """
    base = "id" if base_model_id is not None else "name" if base_name is not None else ""
    ns = sorted(namespaces) if namespaces is not None else []
    if namespaces is not None and not ns:
        return []
    params: dict[str, Any] = {"tag": tag, "base_id": base_model_id, "base_name": base_name,
                              "after": after, "limit": limit}
    params.update({f"ns{i}": name for i, name in enumerate(ns)})
    if q:
        params["needle"] = q.lower()
        escaped = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params["q"] = f"%{escaped}%"
    rows: list[Sequence[Any]]
    if q and tag is None:
        rows = await _search(conn, params, base, len(ns), window, rare)
    else:
        rows = await _listing((tag is not None, base, bool(q), after is not None, len(ns))).all(
            conn, **params)
    return [(row[0], _listing_item(*row[1:])) for row in rows]


def _listing_item(full_name: str, tags: Any, labels: Any, latest_version: int | None,
                  updated_at: Any, base_name: str, revision: str) -> dict[str, Any]:
    """A listing item as the API returns it. The stored JSON of tags and labels goes out
    as it is (``orjson.Fragment``), never decoded and encoded again."""
    namespace, _, name = full_name.partition("/")
    return {"adapter": full_name, "namespace": namespace, "name": name,
            "base": f"{base_name}@{revision}", "tags": json_text(tags, "[]"),
            "labels": json_text(labels, "{}"), "latest_version": latest_version,
            "updated_at": datetime_value(updated_at)}


async def touch_adapter(session: AsyncSession, adapter_id: int, **values: Any) -> None:
    await session.execute(update(Adapter).where(Adapter.id == adapter_id).values(**values))



async def delete_version(session: AsyncSession, adapter_id: int, version_id: int,
                         number: int) -> list[str]:
    """Remove a version with its verdicts, blob references and the aliases at it; the
    names of those aliases, sorted. Its blobs stay for gc."""
    removed = await aliases_at(session, adapter_id, number)
    await session.execute(delete(Alias).where(Alias.adapter_id == adapter_id,
                                              Alias.version == number))
    await session.execute(delete(Verdict).where(Verdict.version_id == version_id))
    await session.execute(delete(VersionBlob).where(VersionBlob.version_id == version_id))
    await session.execute(delete(Version).where(Version.id == version_id))
    return removed
