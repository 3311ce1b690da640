"""The deployments' catalog read tokens: named after their owner, and swept.

A token is minted before the Secret that holds it is written, so an operator that dies
(or a write that fails) in between leaves a live token no Secret holds. Every token is
therefore named ``mol-operator/<uid>/<namespace>/<name>`` (cut to the catalog's 128
characters; the uid alone identifies the owner) and found again by that prefix:

- before a mint, the owner's tokens other than the one its Secret holds are revoked
  (leftovers of a mint whose Secret write never happened: at most one is ever unbound);
- after the Secret holds a new token, every other token of the owner is revoked;
- on delete, every token of the owner;
- at startup and then periodically, every token whose owner no longer exists
  (a deployment deleted while its finalizer was bypassed, or by an older operator).

Tokens named ``mol-operator/<namespace>/<name>`` (older operators) are swept when no
deployment of that namespace and name exists.

The router's sandbox token (a deployment with the code harness and no API keys) is no
catalog token: 256 random bits made here once, then kept in its Secret.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import secrets
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mol_operator.builders import Facts, uses_router_token
from mol_operator.builders.common import TOKEN_KEY
from mol_operator.catalog import Retry, revoke_token
from mol_platform.clients.catalog import CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.clients.kube import KubeApi, KubeError
from mol_platform.contract.spec import API_VERSION, PLURAL

log = logging.getLogger(__name__)
PREFIX = "mol-operator/"
MAX_TOKEN_NAME = 128  # the catalog's limit
MOLD_API, MOLD_PLURAL = API_VERSION, PLURAL
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def token_name(uid: str, namespace: str, name: str) -> str:
    """The name a deployment's token carries: its owner, uid first."""
    return f"{PREFIX}{uid}/{namespace}/{name}"[:MAX_TOKEN_NAME]


def sandbox_token(facts: Facts, secret: Mapping[str, Any] | None) -> str:
    """The router's sandbox token: the one its Secret holds (running pods use it), else
    a new one; empty when the deployment needs none."""
    if not uses_router_token(facts):
        return ""
    try:
        held = base64.b64decode((secret or {})["data"][TOKEN_KEY]).decode()
    except (KeyError, TypeError, ValueError):
        held = ""
    return held or secrets.token_urlsafe(32)


def owner_prefix(uid: str) -> str:
    return f"{PREFIX}{uid}/"


async def _list(client: AsyncCatalogClient, prefix: str, delay: float) -> list[tuple[int, str]]:
    try:
        return [(t.id, t.name) for t in await client.list_tokens(prefix, active=True)]
    except CatalogError as exc:
        if exc.status == 0:
            raise Retry("CatalogUnreachable", f"{exc.detail}; retrying in {delay:g}s", delay
                        ) from None
        raise Retry("CatalogTokenFailed", f"listing catalog tokens failed: {exc}", delay
                    ) from None


async def revoke_owner_tokens(client: AsyncCatalogClient, uid: str, *,
                              keep: Collection[int] = (), delay: float) -> list[int]:
    """Revoke every active token of the deployment ``uid`` except ``keep``; their ids."""
    gone = [i for i, _ in await _list(client, owner_prefix(uid), delay) if i not in keep]
    for token_id in gone:
        await revoke_token(client, token_id, delay=delay)
    return gone


def _owner(name: str) -> tuple[str | None, str, str] | None:
    """(uid or None for an older name, namespace, name) of an operator token's name."""
    parts = name.removeprefix(PREFIX).split("/")
    if len(parts) >= 3 and _UID.fullmatch(parts[0]):
        return parts[0], parts[1], "/".join(parts[2:])
    if len(parts) == 2:
        return None, parts[0], parts[1]
    return None


async def sweep_orphans(client: AsyncCatalogClient, kube: KubeApi, namespaces: Sequence[str],
                        *, delay: float) -> list[int]:
    """Revoke the operator's tokens whose deployment no longer exists, in the watched
    ``namespaces`` (empty: all); their ids. Tokens are listed before deployments, so a
    token minted meanwhile belongs to a deployment the second list sees."""
    tokens = await _list(client, PREFIX, delay)
    uids: set[str] = set()
    names: set[tuple[str, str]] = set()
    scopes: list[str | None] = [*namespaces] or [None]
    for scope in scopes:
        try:
            listed = await kube.list(MOLD_API, MOLD_PLURAL, scope)
        except KubeError as exc:
            raise Retry("KubeUnreachable", f"listing MoLDeployments failed: {exc}", delay
                        ) from None
        if listed is None:  # not served (yet): no list to trust, so nothing is revoked
            raise Retry("CrdNotServed", "the MoLDeployment API is not served", delay)
        for item in listed[0]:
            meta = item.get("metadata") or {}
            uids.add(str(meta.get("uid")))
            names.add((str(meta.get("namespace")), str(meta.get("name"))))
    gone = []
    for token_id, name in tokens:
        owner = _owner(name)
        if owner is None or (namespaces and owner[1] not in namespaces):
            continue
        uid, ns, mold = owner
        if (uid not in uids) if uid is not None else ((ns, mold) not in names):
            await revoke_token(client, token_id, delay=delay)
            gone.append(token_id)
    return gone


async def sweep_forever(client: AsyncCatalogClient, kube: KubeApi, namespaces: Sequence[str],
                        *, every: float, delay: float) -> None:
    """:func:`sweep_orphans` now and every ``every`` seconds; failures are logged and
    the sweep tried again after ``delay``."""
    while True:
        try:
            gone = await sweep_orphans(client, kube, namespaces, delay=delay)
        except Retry as exc:
            log.warning("catalog token sweep failed: %s", exc.message)
            await asyncio.sleep(delay)
            continue
        if gone:
            log.info("revoked %d catalog token(s) of deleted MoLDeployments: %s", len(gone),
                     gone)
        await asyncio.sleep(every)
