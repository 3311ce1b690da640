"""Signing keys, the signature policy, and the signature check of a publish.

A namespace's keys are public keys (elliptic curve, PEM) named by the hint model-signing
writes into each signature. A publish that carries a signature is accepted only when
the signature verifies with one of the namespace's unrevoked keys and covers exactly
the uploaded files; with ``require_signatures`` set, a publish without one is refused.
The check runs before any blob is stored, so a refused publish leaves nothing behind.
"""

from __future__ import annotations

from typing import Any

from mol_catalog.adapters import writes
from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.errors import BadRequest, Conflict, NotFound, SignatureRejected
from mol_catalog.models import utcnow
from mol_catalog.signing import repository
from mol_catalog.signing.repository import KeyRow
from mol_catalog.signing.schemas import KeyAdd, PolicyPut
from mol_catalog.util import valid_name
from mol_platform.contract import model_signature as ms
from mol_platform.contract.blob_files import digest_hex


def key_record(namespace: str, row: KeyRow) -> dict[str, Any]:
    return {"namespace": namespace, "key_id": row.key_id, "name": row.name,
            "public_key": row.public_key, "created_by": row.created_by,
            "created_at": row.created_at, "revoked_at": row.revoked_at}


async def add_key(uow: UnitOfWork, namespace: str, body: KeyAdd, who: str | None,
                  namespaces: dict[str, int]) -> dict[str, Any]:
    """Register a public key (the namespace row is created when missing); 409 when the
    key is registered already, revoked or not."""
    valid_name(namespace, "namespace")
    try:
        key = ms.load_public_key(body.public_key)
    except ms.SignatureError as exc:
        raise BadRequest(f"public_key: {exc.message}") from None
    pem = ms.public_pem(key)
    kid = ms.key_id(pem)
    found = await repository.key(uow.conn, namespace, kid)
    if found is not None:
        state = "revoked" if found.revoked_at is not None else "registered"
        raise Conflict(f"key {kid} is already {state} in namespace {namespace!r} "
                       f"as {found.name!r}" + (" (a revoked key stays revoked)"
                                               if found.revoked_at is not None else ""))
    ns_id = await writes.namespace_id(uow.conn, namespace, namespaces)
    row = KeyRow(kid, body.name, pem, who, utcnow(), None)
    await repository.insert_key(uow.conn, ns_id, row)
    return key_record(namespace, row)


async def list_keys(conn: ReadConn, namespace: str) -> list[dict[str, Any]]:
    valid_name(namespace, "namespace")
    return [key_record(namespace, r) for r in await repository.keys(conn, namespace)]


async def revoke_key(uow: UnitOfWork, namespace: str, key_id: str) -> dict[str, Any]:
    """Revoke a key for good: publishes signed by it are refused from now on, and engines
    that require signatures stop loading versions it signed. Revoking twice is a no-op."""
    valid_name(namespace, "namespace")
    found = await repository.key(uow.conn, namespace, key_id)
    pol = await repository.policy(uow.conn, namespace)
    if found is None or pol is None:
        raise NotFound(f"namespace {namespace!r} has no key {key_id!r} (see mol catalog "
                       f"keys ls {namespace})")
    if found.revoked_at is None:
        now = utcnow()
        await repository.revoke_key(uow.conn, pol.namespace_id, key_id, now)
        found = KeyRow(found.key_id, found.name, found.public_key, found.created_by,
                       found.created_at, now)
    return key_record(namespace, found)


def policy_record(namespace: str, pol: repository.NamespacePolicy | None) -> dict[str, Any]:
    return {"namespace": namespace, "require_signatures": pol.required if pol else False,
            "keys": pol.keys if pol else None}


async def get_policy(conn: ReadConn, namespace: str) -> dict[str, Any]:
    valid_name(namespace, "namespace")
    return policy_record(namespace, await repository.policy(conn, namespace))


async def set_policy(uow: UnitOfWork, namespace: str, body: PolicyPut,
                     namespaces: dict[str, int]) -> dict[str, Any]:
    """Set the policy; every listed key must be registered in the namespace and not
    revoked (400 otherwise), and a policy that requires signatures needs one such key."""
    valid_name(namespace, "namespace")
    active = {r.key_id for r in await repository.keys(uow.conn, namespace)
              if r.revoked_at is None}
    listed = sorted(set(body.keys)) if body.keys is not None else None
    unknown = sorted(set(listed or ()) - active)
    if unknown:
        raise BadRequest(f"not an active key of namespace {namespace!r}: {', '.join(unknown)} "
                         f"(register it first: mol catalog keys add {namespace} NAME KEY.pub)")
    if body.require_signatures and not (listed if listed is not None else active):
        raise BadRequest(f"namespace {namespace!r} has no active signing key: register one "
                         f"(mol catalog keys add {namespace} NAME KEY.pub) before requiring "
                         "signatures")
    ns_id = await writes.namespace_id(uow.conn, namespace, namespaces)
    await repository.set_policy(uow.conn, ns_id, body.require_signatures, listed)
    return {"namespace": namespace, "require_signatures": body.require_signatures,
            "keys": listed}


def _reject(code: str, message: str) -> SignatureRejected:
    return SignatureRejected(message, reason=code)


async def check_publish(conn: ReadConn, namespace: str, files: dict[str, str],
                        signature: str | None) -> str | None:
    """The id of the key that signed ``files`` (path -> ``sha256:<hex>``), None for an
    unsigned publish the namespace allows; SignatureRejected (422, ``reason``) else."""
    pol = await repository.policy(conn, namespace)
    if signature is None:
        if pol is not None and pol.required:
            raise _reject("missing_signature", f"namespace {namespace!r} requires a "
                          "model-signing signature: publish with --sign-key KEY.pem (or "
                          "--signature FILE)")
        return None
    try:
        bundle = ms.parse_bundle(signature)
    except ms.SignatureError as exc:
        raise _reject(exc.code, exc.message) from None
    if bundle.key_hint is None:
        raise _reject("malformed_signature", "the signature names no key (sign with "
                      "model-signing 1.x: its bundles carry the key's hint)")
    kid = bundle.key_hint
    key = await repository.key(conn, namespace, kid)
    if key is None:
        raise _reject("unknown_key", f"key {kid} is not registered in namespace "
                      f"{namespace!r} (mol catalog keys add {namespace} NAME KEY.pub)")
    if key.revoked_at is not None:
        raise _reject("revoked_key", f"key {kid} ({key.name!r}) of namespace {namespace!r} "
                      f"was revoked at {key.revoked_at.isoformat()}")
    if pol is not None and pol.keys is not None and kid not in pol.keys:
        raise _reject("key_not_allowed", f"namespace {namespace!r} accepts signatures only "
                      f"by {', '.join(pol.keys)}; key {kid} ({key.name!r}) is not one of them")
    try:
        signed = ms.verify(signature, key.public_key)
        ms.check_files(signed, {p: digest_hex(d) for p, d in files.items()})
    except ms.SignatureError as exc:
        raise _reject(exc.code, exc.message) from None
    return kid
