"""Bearer tokens -> tenants. A session belongs to the tenant that made it.

Tokens come in the router's API keys file format (the key itself or its sha256 digest),
so one Secret can serve both. Without tokens (allowed on loopback only) every caller is
the tenant ``local``.
"""

from __future__ import annotations

import hashlib
import hmac

from mol_platform.contract.router_config import ApiKeysFile
from mol_sandbox.errors import Unauthorized

LOCAL = "local"


class Tenants:
    """Who a request's ``Authorization`` header says it is."""

    def __init__(self, keys: ApiKeysFile | None) -> None:
        self._by_digest: dict[str, str] = {}
        for k in (keys.keys if keys else []):
            digest = k.key_sha256 or hashlib.sha256((k.key or "").encode()).hexdigest()
            self._by_digest[digest.lower()] = k.tenant

    @property
    def enabled(self) -> bool:
        return bool(self._by_digest)

    def tenant(self, authorization: str | None) -> str:
        if not self.enabled:
            return LOCAL
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("a bearer token is required: Authorization: Bearer <token>")
        digest = hashlib.sha256(token.strip().encode()).hexdigest()
        for known, tenant in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return tenant
        raise Unauthorized("unknown token")
