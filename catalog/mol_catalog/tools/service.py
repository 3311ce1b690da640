"""Tools: functions a sandbox session proposes, stored as immutable versions, offered only
once a person approves a version by moving the protected ``approved`` alias.

A version is one canonical JSON document (``contract.tools``) named by its sha256,
stored with the automatic checks computed at publish (advice shown to the reviewer,
never a gate: a proposal that fails them is stored all the same), an optional
model-signing signature of the document (verified as adapters' are, against the
namespace's keys and policy) and the lineage of the session that wrote it. The same
document again is an idempotent retry. Approving is an admin's act: the session that
proposes a tool holds ``publish:<ns>`` at most, so it cannot approve its own code. The
approved-tools answer hands a loader the bytes, digest and signature it checks with
``contract.tools.verify_load`` before each load.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.errors import BadRequest, Conflict, Forbidden, NotFound, ValidationFailed
from mol_catalog.models import utcnow
from mol_catalog.signing import repository as signing_repo
from mol_catalog.signing import service as signing
from mol_catalog.tools import repository as repo
from mol_catalog.tools.example import ExampleRunner, example_check
from mol_catalog.tools.repository import Approval, VersionRow
from mol_catalog.tools.schemas import ToolPublish
from mol_catalog.util import check_json
from mol_platform.contract import tools as tc

PUBLISHED = f"{tc.EVENT_PREFIX}published"
ALIAS_SET = f"{tc.EVENT_PREFIX}alias.set"
ALIAS_DELETED = f"{tc.EVENT_PREFIX}alias.deleted"
MAX_NAMES = 64  # tools one approved-tools lookup may name


class InvalidTool(ValidationFailed):
    """A proposal the catalog cannot store (too large, unstorable JSON)."""

    error = "InvalidTool"


@dataclass(frozen=True)
class Proposal:
    """A checked publish: the bytes to store, their digest, the checks and lineage."""

    stored: bytes
    digest: str
    description: str
    checks: list[dict[str, Any]]
    lineage: dict[str, str | None]
    signature: str | None


def propose(name: str, body: ToolPublish) -> Proposal:
    """The document of a publish and its checks (422 ``InvalidTool`` when unstorable)."""
    check_json(body.parameters, "parameters", InvalidTool)
    if body.example is not None:
        check_json(body.example, "example", InvalidTool)
    if len(tc.canonical(body.parameters)) > tc.MAX_SCHEMA_BYTES:
        raise InvalidTool(f"parameters is larger than {tc.MAX_SCHEMA_BYTES} bytes")
    description = body.description
    if description is None:
        description = tc.docstring_of(body.source, name) or ""
    stored = tc.canonical(tc.document(name, description, body.parameters, body.source,
                                      body.example))
    return Proposal(stored, tc.digest_of(stored), description,
                    [c.body() for c in tc.checks(name, body.source, body.parameters)],
                    {"session_id": body.session_id, "deployment": body.deployment,
                     "expert": body.expert, "tenant": body.tenant}, body.signature)


async def stored(conn: ReadConn, namespace: str, name: str, p: Proposal) -> bool:
    """Whether the proposal's document is already a version (a retry: nothing to run)."""
    found = await repo.tool(conn, namespace, name)
    return found is not None and await repo.same_content(conn, found[0], p.digest) is not None


async def with_example(runner: ExampleRunner | None, name: str, body: ToolPublish,
                       p: Proposal) -> Proposal:
    """The proposal with its ``example_runs`` check run in a sandbox session (when a
    sandbox is configured and there is an example to run)."""
    check = await example_check(runner, name, body.source, body.example, p.checks)
    return dataclasses.replace(p, checks=[check if c["name"] == tc.EXAMPLE_CHECK else c
                                          for c in p.checks])


async def signer(conn: ReadConn, namespace: str, p: Proposal) -> str | None:
    """The key id that signed the document (None: unsigned and allowed); 422
    ``SignatureRejected`` as for adapters otherwise."""
    return await signing.check_publish(conn, namespace, {tc.DOCUMENT_FILE: p.digest},
                                       p.signature)


def version_body(v: VersionRow, approved: int | None) -> dict[str, Any]:
    doc = json.loads(v.document)
    return {"namespace": v.namespace, "name": v.name, "version": v.number,
            "digest": v.digest, "description": v.description,
            "parameters": doc.get("parameters"), "source": doc.get("source"),
            "example": doc.get("example"), "checks": v.checks,
            "signed": v.signed_by is not None, "signed_by": v.signed_by,
            "lineage": {"session_id": v.session_id, "deployment": v.deployment,
                        "expert": v.expert, "tenant": v.tenant},
            "approved": approved == v.number, "size_bytes": v.size_bytes,
            "created_by": v.created_by, "created_at": v.created_at}


def _no_tool(namespace: str, name: str) -> NotFound:
    return NotFound(f"no tool {name!r} in namespace {namespace!r}: propose one with "
                    "mol catalog tools publish FILE.py NS/NAME --parameters SCHEMA.json")


def _no_version(namespace: str, name: str, number: int) -> NotFound:
    return NotFound(f"tool {namespace}/{name} has no version {number}")


async def _approved(conn: ReadConn, namespace: str, name: str) -> int | None:
    found = (await repo.approvals(conn, namespace, tc.APPROVED)).get(name)
    return found.version if found is not None else None


async def publish(uow: UnitOfWork, namespace: str, name: str, p: Proposal,
                  signed_by: str | None, who: str | None) -> tuple[dict[str, Any], bool]:
    """Store the proposal as the tool's next version, or find the version holding the
    same bytes (a retry): (its body, created). Writes ``tool.published``."""
    now = utcnow()
    found = await repo.tool(uow.conn, namespace, name, lock=uow.postgres)
    approved = None
    if found is None:
        tool_id, latest = await repo.insert_tool(uow.conn, namespace, name, now), 0
    else:
        tool_id, latest = found
        approved = await repo.alias_version(uow.conn, tool_id, tc.APPROVED)
        same = await repo.same_content(uow.conn, tool_id, p.digest)
        if same is not None:
            row = await repo.version(uow.conn, namespace, name, same)
            assert row is not None
            return version_body(row, approved), False
    number = latest + 1
    await repo.insert_version(uow.conn, tool_id, {
        "number": number, "digest": p.digest, "description": p.description,
        "checks": p.checks, "size_bytes": len(p.stored), "document": p.stored,
        "signature": p.signature if signed_by else None, "signed_by": signed_by,
        **p.lineage, "created_by": who, "created_at": now}, now)
    uow.emit(PUBLISHED, adapter=f"{namespace}/{name}", version=number, data={
        "digest": p.digest, "by": who, **p.lineage,
        "failed_checks": [c["name"] for c in p.checks if c["ok"] is False]})
    row = await repo.version(uow.conn, namespace, name, number)
    assert row is not None
    return version_body(row, approved), True


async def tools(conn: ReadConn, namespace: str) -> list[dict[str, Any]]:
    approvals = await repo.approvals(conn, namespace, tc.APPROVED)
    out = []
    for v, updated in await repo.latest(conn, namespace):
        a = approvals.get(v.name)
        number = a.version if a is not None else None
        out.append({"namespace": namespace, "name": v.name, "latest_version": v.number,
                    "latest": version_body(v, number), "approved_version": number,
                    "updated_at": updated})
    return out


async def versions(conn: ReadConn, namespace: str, name: str) -> list[dict[str, Any]]:
    rows = await repo.versions(conn, namespace, name)
    if not rows:
        raise _no_tool(namespace, name)
    approved = await _approved(conn, namespace, name)
    return [version_body(v, approved) for v in rows]


async def version(conn: ReadConn, namespace: str, name: str, number: int) -> dict[str, Any]:
    row = await repo.version(conn, namespace, name, number)
    if row is None:
        if await repo.tool(conn, namespace, name) is None:
            raise _no_tool(namespace, name)
        raise _no_version(namespace, name, number)
    return version_body(row, await _approved(conn, namespace, name))


async def document(conn: ReadConn, namespace: str, name: str,
                   number: int) -> tuple[bytes, str]:
    row = await repo.version(conn, namespace, name, number)
    if row is None:
        if await repo.tool(conn, namespace, name) is None:
            raise _no_tool(namespace, name)
        raise _no_version(namespace, name, number)
    return row.document, row.digest


def _only_approved(alias: str) -> None:
    if alias != tc.APPROVED:
        raise BadRequest(f"a tool has one alias, {tc.APPROVED!r}, not {alias!r}")


def refusals(row: VersionRow, require_signatures: bool) -> list[dict[str, Any]]:
    """Why approving ``row`` is refused (empty: it may be approved). The automatic
    checks are not among the reasons: they advise the person who approves."""
    if require_signatures and row.signed_by is None:
        namespace = row.namespace
        return [{"code": "unsigned", "message": (
            f"{namespace}/{row.name} v{row.number} is unsigned and namespace {namespace!r} "
            "requires signatures: propose it again with a signature")}]
    return []


async def approve(uow: UnitOfWork, namespace: str, name: str, alias: str, number: int,
                  force: bool, who: str | None, admin: bool) -> dict[str, Any]:
    """Move ``approved`` to an existing version (admin only: 403 else; 404 for an
    unknown version; 409 with ``reasons`` when refused and not forced). Approving the
    version already approved changes nothing and writes no event."""
    _only_approved(alias)
    if not admin:
        raise Forbidden(f"approving a tool moves the protected alias {tc.APPROVED!r}: it "
                        "needs scope 'admin'")
    found = await repo.tool(uow.conn, namespace, name, lock=uow.postgres)
    if found is None:
        raise _no_tool(namespace, name)
    tool_id = found[0]
    row = await repo.version(uow.conn, namespace, name, number)
    if row is None:
        raise _no_version(namespace, name, number)
    policy = await signing_repo.policy(uow.conn, namespace)
    reasons = refusals(row, bool(policy is not None and policy.required))
    if reasons and not force:
        raise Conflict(f"{namespace}/{name}@{tc.APPROVED} may not move to v{number}: "
                       + "; ".join(r["message"] for r in reasons)
                       + " (force overrides, on record)", reasons=reasons)
    previous = await repo.alias_version(uow.conn, tool_id, tc.APPROVED)
    if previous != number:
        await repo.set_alias(uow.conn, tool_id, tc.APPROVED, number, previous, utcnow(),
                            updated_by=who)
        uow.emit(ALIAS_SET, adapter=f"{namespace}/{name}", version=number, alias=tc.APPROVED,
                 data={"previous": previous, "digest": row.digest, "by": who,
                       "forced": bool(reasons), "overridden": reasons})
    return {"namespace": namespace, "name": name, "alias": tc.APPROVED, "version": number,
            "previous": previous, "digest": row.digest, "forced": bool(reasons),
            "overridden": reasons}


async def withdraw(uow: UnitOfWork, namespace: str, name: str, alias: str, who: str | None,
                   admin: bool) -> dict[str, Any]:
    """Remove ``approved`` (admin): the tool is offered no more."""
    _only_approved(alias)
    if not admin:
        raise Forbidden(f"withdrawing a tool's approval moves the protected alias "
                        f"{tc.APPROVED!r}: it needs scope 'admin'")
    found = await repo.tool(uow.conn, namespace, name, lock=uow.postgres)
    if found is None:
        raise _no_tool(namespace, name)
    previous = await repo.alias_version(uow.conn, found[0], tc.APPROVED)
    if previous is None:
        raise NotFound(f"tool {namespace}/{name} has no approved version")
    await repo.delete_alias(uow.conn, found[0], tc.APPROVED, utcnow())
    uow.emit(ALIAS_DELETED, adapter=f"{namespace}/{name}", version=previous,
             alias=tc.APPROVED, data={"by": who})
    return {"namespace": namespace, "name": name, "alias": tc.APPROVED, "version": None,
            "previous": previous, "digest": None, "forced": False, "overridden": []}


def _approved_body(v: VersionRow, a: Approval, key: signing_repo.KeyRow | None
                   ) -> dict[str, Any]:
    return {"namespace": v.namespace, "name": v.name, "version": v.number,
            "digest": v.digest, "document": v.document.decode("ascii"),
            "signature": v.signature, "signed_by": v.signed_by,
            "signer_key": key.public_key if key is not None else None,
            "signer_revoked": bool(key is not None and key.revoked_at is not None),
            "approved_by": a.by, "approved_at": a.at}


async def approved(conn: ReadConn, namespace: str,
                   names: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The approved version of every tool of the namespace (or of ``names``), with what a
    loader checks; and the names asked for that have none."""
    if len(names) > MAX_NAMES:
        raise BadRequest(f"at most {MAX_NAMES} names per lookup, got {len(names)}")
    wanted = set(names)
    items = []
    for v, a in await repo.at_alias(conn, namespace, tc.APPROVED):
        if wanted and v.name not in wanted:
            continue
        key = (await signing_repo.key(conn, namespace, v.signed_by)
               if v.signed_by is not None else None)
        items.append(_approved_body(v, a, key))
    found = {i["name"] for i in items}
    return items, sorted(wanted - found)
