"""The webhook sender's HTTP transport: resolve once, check every address, connect to a
checked one.

Checking a URL's host name and then letting the HTTP client resolve it again would
leave a gap: a name can answer a public address to the check and a private one to the
connection (DNS rebinding). Here the connection itself resolves the name, refuses it
when any address it resolves to is not a permitted target (``targets``), and connects
to those very addresses; TLS still verifies the certificate against the name (the
client sets SNI and checks the host name from the URL, not from the address).

The transport is httpx's own, with its connection pool given this network backend
(httpx has no public option for one; the pool is built with httpx's defaults).
Environment proxies are not used: through a proxy the proxy would resolve the name.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

import anyio
import httpcore
import httpx

from mol_catalog.webhooks.targets import Allowlist, IPAddress, resolved_refusal


class RefusedTarget(Exception):
    """A delivery's host is not a permitted target; the message says why and how to
    permit it."""


async def resolve(host: str, port: int, seconds: float | None) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order."""
    try:
        with anyio.fail_after(seconds):
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    return found


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend that connects only to permitted addresses."""

    def __init__(self, allow: Allowlist, inner: httpcore.AsyncNetworkBackend | None = None
                 ) -> None:
        self.allow = allow
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int,
                          timeout: float | None = None,  # noqa: ASYNC109 (httpcore's)
                          local_address: str | None = None,
                          socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        addresses = await resolve(host, port, timeout)
        refusal = resolved_refusal(host, addresses, self.allow)
        if refusal is not None:
            raise RefusedTarget(refusal)
        error: Exception = httpcore.ConnectError(f"{host} resolves to no address")
        for address in addresses:  # each was checked above
            try:
                return await self.inner.connect_tcp(str(address), port, timeout,
                                                    local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error

    async def connect_unix_socket(
            self, path: str, timeout: float | None = None,  # noqa: ASYNC109 (httpcore's)
            socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise RefusedTarget("webhooks are not delivered to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guarded_transport(allow: Allowlist) -> httpx.AsyncHTTPTransport:
    """httpx's transport with its default limits, connecting through ``GuardedBackend``
    (certificates as httpx verifies them: certifi, or ``SSL_CERT_FILE``)."""
    transport = httpx.AsyncHTTPTransport()
    transport._pool = httpcore.AsyncConnectionPool(  # no public option for it
        ssl_context=httpx.create_ssl_context(), max_connections=100,
        max_keepalive_connections=20, keepalive_expiry=5.0,
        network_backend=GuardedBackend(allow))
    return transport
