"""What the operator asks the catalog: the serving profile, expert refs, read tokens.

All catalog work of a reconcile happens before the first Kubernetes write, so a
catalog failure leaves every child as it was. Failures become :class:`Retry` (try
again later: the catalog is down, an adapter is not published yet) with a message
that says what to do.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mol_platform.clients.catalog import CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract.refs import AdapterRef
from mol_platform.contract.spec import MoLDeployment

_VERSION_TAG = re.compile(r"v?([0-9]+\.[0-9]+(?:\.[0-9]+)?(?:[.+-][0-9A-Za-z.+-]*)?)")


class Retry(Exception):
    """A temporary failure: retry after ``delay`` s; ``reason`` names the condition reason."""

    def __init__(self, reason: str, message: str, delay: float | None = None,
                 condition: str = "AdaptersResolved") -> None:
        self.reason = reason
        self.message = message
        self.delay = delay
        self.condition = condition
        super().__init__(message)


@dataclass(frozen=True)
class Resolved:
    """A resolved ref: version, digest and the profile's verdict."""

    ref: str
    version: int
    digest: str
    compatible: bool
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CatalogFacts:
    profile: str
    base: str  # name@revision
    experts: dict[str, Resolved]
    canaries: dict[str, Resolved]


BASE_TTL = 10.0  # seconds a base model's current revision is reused between reconciles


@dataclass
class BaseRevisions:
    """Each unpinned base model's current revision, asked of the catalog at most every
    ``ttl`` seconds: a thousand deployments on one base ask once, not a thousand times,
    and a newly registered revision is still picked up within seconds."""

    ttl: float = BASE_TTL
    _seen: dict[str, tuple[float, str]] = field(default_factory=dict)

    async def current(self, client: AsyncCatalogClient, name: str) -> str:
        now = time.monotonic()
        held = self._seen.get(name)
        if held is not None and now - held[0] < self.ttl:
            return held[1]
        revision = (await client.get_base(name)).current
        self._seen[name] = (now, revision)
        return revision


def engine_label(image: str) -> str:
    """``vllm/vllm-openai:v0.11.0`` -> ``vllm==0.11.0``; other images by name."""
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
    m = _VERSION_TAG.fullmatch(tag)
    return f"vllm=={m[1]}" if m else f"vllm ({image})"[:128]


def token_scopes(obj: MoLDeployment) -> tuple[str, ...]:
    """Read scopes for every catalog namespace the deployment's engines and router use,
    and the matching ``usage:<ns>`` scopes: the router reports per-version usage with
    the same token (a usage scope writes usage and nothing else)."""
    spaces = set(obj.spec.adapter_namespaces)
    for e in obj.spec.experts:
        spaces.add(AdapterRef.parse(e.adapter).namespace)
        if e.canary is not None:
            spaces.add(AdapterRef.parse(e.canary.adapter).namespace)
    return tuple(sorted(f"{kind}:{ns}" for ns in spaces for kind in ("read", "usage")))


def _unreachable(client: AsyncCatalogClient, exc: CatalogError, delay: float) -> Retry:
    return Retry("CatalogUnreachable",
                 f"{exc.detail}; retrying in "
                 f"{delay:g}s (check the catalog Service and --catalog-url)", delay)




def _failure(client: AsyncCatalogClient, exc: CatalogError, delay: float, reason: str,
             message: str, missing: tuple[str, str] | None = None) -> Retry:
    """The Retry for a failed catalog call: unreachable, not found (``missing``: reason and
    message, retried after at least a minute), or anything else (``reason``/``message``)."""
    if exc.status == 0:
        return _unreachable(client, exc, delay)
    if exc.status == 404 and missing is not None:
        return Retry(missing[0], missing[1], max(delay, 60.0))
    return Retry(reason, f"{message}: {exc}", delay)


async def _resolve(client: AsyncCatalogClient, where: str, ref: str, profile: str,
                   delay: float) -> Resolved:
    try:
        answer = await client.resolve(ref, profile)
    except CatalogError as exc:
        raise _failure(client, exc, delay, "CatalogError", f"{where}: resolving {ref} failed",
                       ("AdapterNotFound", f"{where}: {ref} is not in the catalog "
                        f"({exc.detail}); publish it (mol catalog publish) or fix {where}")
                       ) from None
    verdict = answer.verdict
    return Resolved(ref=ref, version=answer.version, digest=answer.digest,
                    compatible=verdict is None or verdict.compatible,
                    reasons=[r.message for r in verdict.reasons] if verdict else [])


async def declare_and_resolve(client: AsyncCatalogClient, obj: MoLDeployment, profile: str,
                              *, delay: float, bases: BaseRevisions) -> CatalogFacts:
    """PUT the serving profile, then resolve every expert (and canary) under it
    (``bases``: the operator's memory of current base revisions)."""
    spec = obj.spec
    base = spec.base_model
    try:
        revision = base.revision or await bases.current(client, base.name)
        await client.set_profile(profile, base_model=f"{base.name}@{revision}",
                                 max_lora_rank=spec.engine.max_lora_rank,
                                 max_loras=spec.engine.max_loras,
                                 engine=engine_label(spec.engine.image),
                                 require_signatures=spec.engine.require_signatures)
    except CatalogError as exc:
        pinned = f"@{base.revision}" if base.revision else ""
        raise _failure(client, exc, delay, "CatalogError",
                       f"declaring serving profile {profile} failed",
                       ("BaseModelNotFound", f"base model {base.name}{pinned} is not registered"
                        f" in the catalog: mol catalog base register DIR --name {base.name}, "
                        "or fix spec.baseModel")) from None
    refs = [(e.name, f"spec.experts[{i}].adapter", e.adapter) for i, e in enumerate(spec.experts)]
    canary_refs = [(e.name, f"spec.experts[{i}].canary.adapter", e.canary.adapter)
                   for i, e in enumerate(spec.experts) if e.canary is not None]
    answers = await asyncio.gather(*(_resolve(client, where, ref, profile, delay)
                                     for _, where, ref in [*refs, *canary_refs]))
    experts = {name: r for (name, _, _), r in zip(refs, answers[:len(refs)], strict=True)}
    canaries = {name: r for (name, _, _), r in zip(canary_refs, answers[len(refs):],
                                                   strict=True)}
    return CatalogFacts(profile=profile, base=f"{base.name}@{revision}", experts=experts,
                        canaries=canaries)


async def mint_token(client: AsyncCatalogClient, name: str, scopes: Sequence[str],
                     *, delay: float) -> tuple[int, str]:
    """A new read token: (id, secret)."""
    try:
        answer = await client.create_token(name, list(scopes))
    except CatalogError as exc:
        raise _failure(client, exc, delay, "CatalogTokenFailed",
                       "minting the catalog read token failed (the operator's token needs the "
                       "admin scope)") from None
    return answer.id, answer.token


async def revoke_token(client: AsyncCatalogClient, token_id: int, *, delay: float) -> None:
    """Revoke a read token; one already gone counts as revoked."""
    try:
        await client.revoke_token(str(token_id))
    except CatalogError as exc:
        if exc.status == 404:
            return
        raise _failure(client, exc, delay, "CatalogTokenFailed",
                       f"revoking catalog token {token_id} failed") from None
