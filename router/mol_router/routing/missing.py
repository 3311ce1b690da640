"""Unknown names (the catalog's 404s) the resolver remembers: briefly, capped, counted
per tenant. Pure: the caller passes the time.

Anyone may ask for a made-up name, so these must not crowd out what is known: they live
apart from known references, expire after ``ttl`` seconds (a publish is also announced
on the event feed, which drops them sooner), and are never refreshed. A tenant holding
``per_tenant`` of them gets no more kept: its next unknown name is refused instead, and
nobody else's entries go.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


def adapter_of(ref: str) -> str:
    """``ns/name`` of ``ns/name@anything``."""
    return ref.partition("@")[0]


class MissingNames(Generic[T]):
    def __init__(self, ttl: float, cap: int, per_tenant: int) -> None:
        self.ttl, self.cap, self.per_tenant = ttl, cap, per_tenant
        # insertion order is expiry order: every entry lives ``ttl``
        self._items: dict[str, tuple[float, str, T]] = {}
        self._tenants: dict[str, int] = {}
        self._adapters: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, ref: object) -> bool:
        return ref in self._items

    def get(self, ref: str, now: float) -> T | None:
        self.expire(now)
        hit = self._items.get(ref)
        return hit[2] if hit is not None else None

    def held(self, tenant: str, now: float) -> int:
        """Unknown names ``tenant`` has kept now."""
        self.expire(now)
        return self._tenants.get(tenant, 0)

    def full(self, tenant: str, now: float) -> bool:
        return self.held(tenant, now) >= self.per_tenant

    def add(self, ref: str, tenant: str, value: T, now: float) -> bool:
        """Keep ``value`` for ``ref`` (asked by ``tenant``); False when the tenant is at
        its cap (nothing kept). The oldest entry goes when all are taken."""
        self.discard(ref)
        if self.full(tenant, now):
            return False
        while len(self._items) >= self.cap:
            self.discard(next(iter(self._items)))
        self._items[ref] = (now + self.ttl, tenant, value)
        self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
        self._adapters.setdefault(adapter_of(ref), set()).add(ref)
        return True

    def discard(self, ref: str) -> None:
        hit = self._items.pop(ref, None)
        if hit is None:
            return
        tenant = hit[1]
        left = self._tenants[tenant] - 1
        if left:
            self._tenants[tenant] = left
        else:
            del self._tenants[tenant]
        refs = self._adapters[adapter_of(ref)]
        refs.discard(ref)
        if not refs:
            del self._adapters[adapter_of(ref)]

    def discard_adapter(self, adapter: str) -> int:
        """Forget every name of ``adapter`` (it changed in the catalog); how many."""
        refs = list(self._adapters.get(adapter, ()))
        for ref in refs:
            self.discard(ref)
        return len(refs)

    def clear(self) -> None:
        self._items.clear()
        self._tenants.clear()
        self._adapters.clear()

    def expire(self, now: float) -> None:
        while self._items:
            ref, (until, _, _) = next(iter(self._items.items()))
            if until > now:
                return
            self.discard(ref)

    def retry_after(self, tenant: str, now: float) -> float:
        """Seconds until ``tenant`` may have another unknown name kept (its oldest
        expires); at most ``ttl``."""
        for until, owner, _ in self._items.values():
            if owner == tenant:
                return max(until - now, 0.0)
        return 0.0
