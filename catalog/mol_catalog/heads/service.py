"""Router heads: publishing trained heads as immutable versions, their aliases, reading
them back.

A head is one JSON document (``mol.router.head/v1``). The catalog checks the rules a
router would otherwise find only when it loads the head (``contract.router_heads``),
stores the canonical bytes, and names them by their sha256: the digest a router reports
with each decision it made with the head, so that labels score the head that picked.
Publishing the same document again is an idempotent retry (the existing version, 200).
Aliases move like adapters' (no protection rules: a head is canaried by the router,
beside the serving one); every change writes an event on the feed, which routers
follow to refetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.errors import NotFound, ValidationFailed
from mol_catalog.heads import repository as repo
from mol_catalog.heads.repository import VersionRow
from mol_catalog.models import utcnow
from mol_catalog.util import check_json
from mol_platform.contract import router_heads as rh

PUBLISHED = f"{rh.EVENT_PREFIX}published"
ALIAS_SET = f"{rh.EVENT_PREFIX}alias.set"
ALIAS_DELETED = f"{rh.EVENT_PREFIX}alias.deleted"


class InvalidRouterHead(ValidationFailed):
    """A published document that is not a router head the router could load."""

    error = "InvalidRouterHead"


@dataclass(frozen=True)
class Checked:
    """A document that passed: the bytes to store, their digest and its facts."""

    stored: bytes
    digest: str
    facts: rh.HeadDocument


def check(raw: bytes) -> Checked:
    """The body of a publish, checked (422 ``InvalidRouterHead`` naming the rule)."""
    try:
        doc = rh.parse_document(raw)
        facts = rh.check_document(doc)
    except rh.HeadDocumentError as exc:
        raise InvalidRouterHead(f"not a router head: {exc}") from None
    # Then what every stored JSON document must be: storable strings, bounded nesting.
    check_json(doc, "not a router head: the head", InvalidRouterHead)
    stored = rh.canonical(doc)
    return Checked(stored, rh.digest_of(stored), facts)


def version_body(v: VersionRow) -> dict[str, Any]:
    return {"namespace": v.namespace, "name": v.name, "version": v.number,
            "digest": v.digest, "experts": v.experts, "embedding_model": v.embedding_model,
            "dims": v.dims, "ngram_dims": v.ngram_dims, "data_digest": v.data_digest,
            "source": v.source, "cross_validation": v.cross_validation,
            "size_bytes": v.size_bytes, "created_by": v.created_by,
            "created_at": v.created_at}


def _no_head(namespace: str, name: str) -> NotFound:
    return NotFound(f"no router head {name!r} in namespace {namespace!r}: publish one with "
                    "mol catalog head publish FILE NS/NAME (head names are DNS labels)")


def _no_version(namespace: str, name: str, number: int) -> NotFound:
    return NotFound(f"router head {namespace}/{name} has no version {number}")


async def publish(uow: UnitOfWork, namespace: str, name: str, doc: Checked,
                  who: str | None) -> tuple[dict[str, Any], bool]:
    """Store the document as the head's next version, or find the version that holds
    the same bytes (an idempotent retry): (its body, created). Two first publishes of a
    name at once: one inserts the name, the other's IntegrityError makes
    ``Database.transact`` run it again, when it finds the name."""
    now = utcnow()
    found = await repo.head(uow.conn, namespace, name, lock=uow.postgres)
    if found is None:
        head_id, latest = await repo.insert_head(uow.conn, namespace, name, now), 0
    else:
        head_id, latest = found
        same = await repo.same_content(uow.conn, head_id, doc.digest)
        if same is not None:
            row = await repo.version(uow.conn, namespace, name, same)
            assert row is not None
            return version_body(row), False
    number = latest + 1
    f = doc.facts
    await repo.insert_version(uow.conn, head_id, {
        "number": number, "digest": doc.digest, "experts": list(f.experts),
        "embedding_model": f.embedding_model, "dims": f.dims, "ngram_dims": f.ngram_dims,
        "data_digest": f.data_digest, "source": f.source,
        "cross_validation": f.cross_validation, "size_bytes": len(doc.stored),
        "document": doc.stored, "created_by": who, "created_at": now}, now)
    uow.emit(PUBLISHED, adapter=f"{namespace}/{name}", version=number,
             data={"digest": doc.digest, "by": who})
    row = await repo.version(uow.conn, namespace, name, number)
    assert row is not None
    return version_body(row), True


async def heads(conn: ReadConn, namespace: str) -> list[dict[str, Any]]:
    aliases = await repo.namespace_aliases(conn, namespace)
    return [{"namespace": namespace, "name": v.name, "latest_version": v.number,
             "latest": version_body(v), "aliases": aliases.get(v.name, {}),
             "updated_at": updated} for v, updated in await repo.latest(conn, namespace)]


async def versions(conn: ReadConn, namespace: str, name: str) -> list[dict[str, Any]]:
    rows = await repo.versions(conn, namespace, name)
    if not rows:
        raise _no_head(namespace, name)
    return [version_body(v) for v in rows]


async def version(conn: ReadConn, namespace: str, name: str, number: int) -> dict[str, Any]:
    row = await repo.version(conn, namespace, name, number)
    if row is None:
        raise await _missing(conn, namespace, name, number)
    return version_body(row)


async def _missing(conn: ReadConn, namespace: str, name: str, number: int) -> NotFound:
    """404 that says whether the head or only the version is missing."""
    if await repo.head(conn, namespace, name) is None:
        return _no_head(namespace, name)
    return _no_version(namespace, name, number)


async def document(conn: ReadConn, namespace: str, name: str,
                   number: int) -> tuple[bytes, str]:
    found = await repo.document(conn, namespace, name, number)
    if found is None:
        raise await _missing(conn, namespace, name, number)
    return found


async def alias(conn: ReadConn, namespace: str, name: str, alias_name: str) -> dict[str, Any]:
    row = await repo.at_alias(conn, namespace, name, alias_name)
    if row is None:
        if await repo.head(conn, namespace, name) is None:
            raise _no_head(namespace, name)
        raise NotFound(f"router head {namespace}/{name} has no alias {alias_name!r}")
    return {**version_body(row), "alias": alias_name}


async def aliases(conn: ReadConn, namespace: str, name: str) -> list[dict[str, Any]]:
    if await repo.head(conn, namespace, name) is None:
        raise _no_head(namespace, name)
    return [{"alias": a, "version": n, "updated_at": at}
            for a, n, at in await repo.aliases(conn, namespace, name)]


async def set_alias(uow: UnitOfWork, namespace: str, name: str, alias_name: str, number: int,
                    who: str | None) -> dict[str, Any]:
    """Point the alias at an existing version (404 otherwise); setting it where it
    points already changes nothing and writes no event."""
    found = await repo.head(uow.conn, namespace, name, lock=uow.postgres)
    if found is None:
        raise _no_head(namespace, name)
    head_id = found[0]
    row = await repo.version(uow.conn, namespace, name, number)
    if row is None:
        raise _no_version(namespace, name, number)
    previous = await repo.alias_version(uow.conn, head_id, alias_name)
    if previous != number:
        await repo.set_alias(uow.conn, head_id, alias_name, number, previous, utcnow())
        uow.emit(ALIAS_SET, adapter=f"{namespace}/{name}", version=number, alias=alias_name,
                 data={"previous": previous, "digest": row.digest, "by": who})
    return {**version_body(row), "alias": alias_name, "previous": previous}


async def delete_alias(uow: UnitOfWork, namespace: str, name: str, alias_name: str,
                       who: str | None) -> dict[str, Any]:
    found = await repo.head(uow.conn, namespace, name, lock=uow.postgres)
    if found is None:
        raise _no_head(namespace, name)
    head_id = found[0]
    previous = await repo.alias_version(uow.conn, head_id, alias_name)
    if previous is None:
        raise NotFound(f"router head {namespace}/{name} has no alias {alias_name!r}")
    await repo.delete_alias(uow.conn, head_id, alias_name, utcnow())
    uow.emit(ALIAS_DELETED, adapter=f"{namespace}/{name}", version=previous,
             alias=alias_name, data={"by": who})
    return {"namespace": namespace, "name": name, "alias": alias_name, "version": previous}
