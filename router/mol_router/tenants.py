"""API keys, tenants and their rate limits.

A key maps to a tenant (the ``tenant`` metric label), the catalog namespaces whose
adapters it may call by name, and two token buckets: requests per minute and tokens
per minute. Tokens are only known after a response, so the token bucket may go into
debt; a tenant in debt is refused (429) until the bucket refills, with ``Retry-After``
saying when. Buckets survive config reloads for keys that stay.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from mol_platform.contract.router_config import ApiKey, ApiKeysFile

ANONYMOUS = "anonymous"
_SEEN_LIMIT = 4096


class Bucket:
    """A token bucket holding up to one minute's allowance, refilled continuously."""

    __slots__ = ("capacity", "level", "rate", "stamp")

    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self.stamp = time.monotonic()

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_time(self, now: float, need: float) -> float:
        """0 when ``need`` is available now, else seconds until it is."""
        self._refill(now)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level -= amount


@dataclass(slots=True)
class Tenant:
    name: str
    namespaces: frozenset[str]  # "*" = any of the deployment's adapter namespaces
    requests: Bucket | None = None
    tokens: Bucket | None = None
    spec: ApiKey | None = field(default=None, repr=False)

    cache_salt: str = field(init=False, default="")
    """vLLM's ``cache_salt`` for this tenant's requests (``cacheIsolation: tenant``):
    derived once from its key's digest, so the same in every router replica and not
    guessable by another tenant (who could otherwise probe its cached prefixes)."""

    def __post_init__(self) -> None:
        secret = ""
        if self.spec is not None:
            secret = self.spec.key_sha256 or hashlib.sha256(
                (self.spec.key or "").encode()).hexdigest()
        self.cache_salt = hashlib.blake2b(f"{self.name}\0{secret}".encode(),
                                          digest_size=16).hexdigest()

    def may_use(self, namespace: str) -> bool:
        return "*" in self.namespaces or namespace in self.namespaces

    def admit(self) -> float:
        """Take one request; 0.0 when admitted, else seconds to wait (nothing taken)."""
        now = time.monotonic()
        wait = 0.0
        if self.tokens is not None:
            wait = self.tokens.wait_time(now, 1e-9)
        if self.requests is not None:
            wait = max(wait, self.requests.wait_time(now, 1.0))
        if wait == 0.0 and self.requests is not None:
            self.requests.take(1.0, now)
        return wait

    def spend_tokens(self, count: int) -> None:
        if self.tokens is not None and count:
            self.tokens.take(float(count), time.monotonic())


OPEN = Tenant(ANONYMOUS, frozenset({"*"}))


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class KeyTable:
    """Bearer key -> Tenant. Lookups hash the presented key (sha256) once."""

    def __init__(self, keys: ApiKeysFile | None, previous: KeyTable | None = None) -> None:
        self.enabled = keys is not None
        self._by_digest: dict[str, Tenant] = {}
        self._seen: dict[str, Tenant] = {}
        old: Mapping[str, Tenant] = previous._by_digest if previous is not None else {}
        for spec in keys.keys if keys is not None else ():
            digest = spec.key_sha256 or _digest(spec.key or "")
            kept = old.get(digest)
            if kept is not None and kept.spec == spec:
                self._by_digest[digest] = kept  # same key, same limits: keep its buckets
                continue
            self._by_digest[digest] = Tenant(
                spec.tenant, frozenset(spec.namespaces),
                Bucket(spec.requests_per_minute) if spec.requests_per_minute else None,
                Bucket(spec.tokens_per_minute) if spec.tokens_per_minute else None,
                spec)

    def lookup(self, authorization: str | None) -> Tenant | None:
        """The tenant for an ``Authorization: Bearer <key>`` header, or None. Headers
        of known keys are remembered (bounded), so a client's repeated requests skip
        the parse and the hash."""
        if not authorization:
            return None
        tenant = self._seen.get(authorization)
        if tenant is not None:
            return tenant
        if authorization[:7].lower() != "bearer ":
            return None
        tenant = self._by_digest.get(_digest(authorization[7:].strip()))
        if tenant is not None:
            if len(self._seen) >= _SEEN_LIMIT:
                self._seen.clear()
            self._seen[authorization] = tenant
        return tenant
