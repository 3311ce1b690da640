"""A fast AWS SigV4 query-string presigner for S3 GET URLs.

botocore's ``generate_presigned_url`` resolves the endpoint ruleset, builds a request
object and runs the whole signer pipeline on every call, which made presigning most of
the CPU cost of a resolve. The URL itself is cheap: one canonical request, one sha256,
one HMAC with a signing key that changes once a day. This module produces exactly the
URL botocore produces (a test compares them byte for byte) at a fraction of the cost.

What varies per deployment (scheme, host, path-style or virtual-hosted addressing,
signing region and service) is taken once from a URL botocore itself presigned, so the
two cannot disagree about addressing; credentials are read on every call (frozen copy),
so refreshed credentials (STS, IRSA) are picked up.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qs, quote, unquote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
PROBE_KEY = "presign-probe"


class Credentials(Protocol):
    """What the signer reads (botocore's frozen ``ReadOnlyCredentials`` fits)."""

    @property
    def access_key(self) -> str: ...

    @property
    def secret_key(self) -> str: ...

    @property
    def token(self) -> str | None: ...


@dataclass(frozen=True)
class Target:
    """Where a bucket's objects live and how requests to it are signed."""

    base: str  # scheme://host[:port][/bucket]/  (everything before the quoted key)
    path_prefix: str  # the base's path, e.g. "/bucket/" or "/"
    host: str  # the signed Host header value
    region: str
    service: str

    @classmethod
    def from_presigned(cls, url: str, key: str = PROBE_KEY) -> Target:
        """Read the target from a URL presigned by botocore for object ``key``."""
        parts = urlsplit(url)
        quoted_key = _quote_key(key)
        if not parts.path.endswith(quoted_key):
            raise ValueError(f"presigned URL {url!r} does not end with key {key!r}")
        prefix = parts.path[: len(parts.path) - len(quoted_key)]
        credential = parse_qs(parts.query)["X-Amz-Credential"][0]
        _access, _date, region, service, _term = unquote(credential).split("/")
        return cls(base=f"{parts.scheme}://{parts.netloc}{prefix}", path_prefix=prefix,
                   host=_host_header(url), region=region, service=service)


def _quote_key(key: str) -> str:
    return quote(key, safe="/~")


def _enc(value: str) -> str:
    return quote(value, safe="-_.~")


def _host_header(url: str) -> str:
    """The Host value botocore signs: lowercase host, port unless the scheme's default."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


class Presigner:
    """Presigned GET URLs for objects of one bucket; thread-safe enough (no shared mutation
    beyond a one-entry signing-key cache whose races only recompute the same key)."""

    def __init__(self, target: Target, credentials: Callable[[], Credentials],
                 expires: int = 3600) -> None:
        self.target = target
        self.credentials = credentials
        self.expires = expires
        self._key_cache: tuple[str, str, bytes] | None = None  # (secret, yyyymmdd, key)
        self._query_cache: tuple[int, str, str | None, tuple[str, str, str, str]] | None = None

    def _signing_key(self, secret: str, day: str) -> bytes:
        cached = self._key_cache
        if cached is not None and cached[0] == secret and cached[1] == day:
            return cached[2]
        k = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
        for part in (self.target.region, self.target.service, "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        self._key_cache = (secret, day, k)
        return k

    def _query(self, creds: Credentials, second: int) -> tuple[str, str, str, str]:
        """(stamp, scope, query, canonical query) for one second and one credential; the
        files of one resolve share it."""
        cached = self._query_cache
        if (cached is not None and cached[0] == second and cached[1] == creds.access_key
                and cached[2] == creds.token):
            return cached[3]
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
        t = self.target
        scope = f"{stamp[:8]}/{t.region}/{t.service}/aws4_request"
        query = (f"X-Amz-Algorithm={ALGORITHM}"
                 f"&X-Amz-Credential={_enc(f'{creds.access_key}/{scope}')}"
                 f"&X-Amz-Date={stamp}&X-Amz-Expires={self.expires}")
        # The canonical query is sorted by key: Security-Token sorts before SignedHeaders.
        if creds.token is not None:
            token = _enc(creds.token)
            canonical_query = f"{query}&X-Amz-Security-Token={token}&X-Amz-SignedHeaders=host"
            query = f"{query}&X-Amz-SignedHeaders=host&X-Amz-Security-Token={token}"
        else:
            query = canonical_query = f"{query}&X-Amz-SignedHeaders=host"
        out = (stamp, scope, query, canonical_query)
        self._query_cache = (second, creds.access_key, creds.token, out)
        return out

    def url(self, key: str, now: float | None = None) -> str:
        """A presigned GET URL for ``key``, valid ``expires`` seconds from ``now`` (unix)."""
        creds = self.credentials()
        stamp, scope, query, canonical_query = self._query(
            creds, int(time.time() if now is None else now))
        t = self.target
        path = _quote_key(key)
        canonical = (f"GET\n{t.path_prefix}{path}\n{canonical_query}\nhost:{t.host}\n\nhost\n"
                     f"{UNSIGNED_PAYLOAD}")
        to_sign = (f"{ALGORITHM}\n{stamp}\n{scope}\n"
                   f"{hashlib.sha256(canonical.encode()).hexdigest()}")
        signature = hmac.new(self._signing_key(creds.secret_key, stamp[:8]), to_sign.encode(),
                             hashlib.sha256).hexdigest()
        return f"{t.base}{path}?{query}&X-Amz-Signature={signature}"
