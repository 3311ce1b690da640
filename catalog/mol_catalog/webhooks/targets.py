"""Which hosts a webhook may reach: public addresses only, unless the operator allows more.

A webhook's URL is chosen by a namespace admin, and the catalog posts to it from inside
the cluster: without a rule, a webhook could reach the cluster's own services, the
node's loopback or the cloud's metadata endpoint (its credentials), and read the answer
back from the delivery's ``last_error``. So, as hosted webhook senders do, targets
must be public addresses; ``MOL_CATALOG_WEBHOOK_ALLOW`` (networks and host names) lets
an operator permit private receivers.

The rule is checked twice: on the URL when a webhook is created (an address written in
it, or a metadata host name), and on every address the host name resolves to when a
delivery connects (``transport``), so a name that changes what it resolves to
(DNS rebinding) cannot slip past. Pure: no resolving here.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_SETTING = "MOL_CATALOG_WEBHOOK_ALLOW"
# Instance metadata services (credentials and more): AWS, GCP, Azure, Alibaba; AWS's
# IPv6 one, and the ECS task endpoint. Refused by name too where a cloud gives one.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200",
    "168.63.129.16"))
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog",
                            "instance-data.ec2.internal"})
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_SHARED = ipaddress.ip_network("100.64.0.0/10")


@dataclass(frozen=True)
class Allowlist:
    """Targets an operator permits although they are not public: networks (a resolved
    address inside one passes) and host names (``hooks.internal``, or ``*.svc.local``
    for every name below it; such a name passes whatever it resolves to)."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        """The allowlist of the setting's entries; ValueError names a bad one."""
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        suffixes: list[str] = []
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = entry[2:] if entry.startswith("*.") else entry
            if not name or any(not part or not all(c.isalnum() or c == "-" for c in part)
                               for part in name.split(".")):
                raise ValueError(f"{raw!r} is neither a network (10.0.0.0/8, 127.0.0.1, "
                                 "fd00::/8) nor a host name (hooks.internal, *.svc.local)")
            if entry.startswith("*."):
                suffixes.append("." + name)
            else:
                hosts.add(name)
        return cls(tuple(networks), frozenset(hosts), tuple(suffixes))

    def allows_host(self, host: str) -> bool:
        name = host.lower().rstrip(".")
        return name in self.hosts or name.endswith(self.suffixes)

    def allows_address(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)


def address_kind(address: IPAddress) -> str | None:
    """What keeps ``address`` from being a webhook target, or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return "cloud metadata"
    checks = (("loopback", address.is_loopback), ("unspecified", address.is_unspecified),
              ("link-local", address.is_link_local),
              ("unique-local", address in _UNIQUE_LOCAL), ("multicast", address.is_multicast),
              ("reserved", address.is_reserved), ("private", address.is_private),
              ("shared (carrier-grade NAT)", address in _SHARED),
              ("not public", not address.is_global))
    return next((kind for kind, hit in checks if hit), None)


def literal_address(host: str) -> IPAddress | None:
    """The address a host written as one means, in any form a resolver reads as an
    address (``127.0.0.1``, ``2130706433``, ``0x7f.1``), else None (a name)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


_UNLESS = (f"webhooks reach public addresses only, unless the catalog's {ALLOW_SETTING} "
           "setting lists the address, its network or the host name")


def url_refusal(url: str, allow: Allowlist) -> str | None:
    """Why a webhook may not be created with ``url`` (an address or metadata name that
    is not public), or None. Other names are checked when a delivery resolves them."""
    host = (urlsplit(url).hostname or "").rstrip(".")
    if allow.allows_host(host):
        return None
    if host in METADATA_HOSTS:
        return (f"{host} is a cloud metadata host; webhooks may not reach it unless the "
                f"catalog's {ALLOW_SETTING} setting lists it")
    address = literal_address(host)
    if address is None or allow.allows_address(address):
        return None
    kind = address_kind(address)
    return None if kind is None else f"{address} is a {kind} address: {_UNLESS}"


def resolved_refusal(host: str, addresses: Iterable[IPAddress], allow: Allowlist) -> str | None:
    """Why a delivery may not connect to ``host`` resolved to ``addresses`` (every one
    is checked: the connection may use any), or None."""
    if allow.allows_host(host):
        return None
    if host.lower().rstrip(".") in METADATA_HOSTS:
        return f"{host} is a cloud metadata host ({ALLOW_SETTING} does not list it)"
    for address in addresses:
        kind = address_kind(address)
        if kind is not None and not allow.allows_address(address):
            shown = (f"{address} is" if literal_address(host) is not None
                     else f"{host} resolves to {address},")
            return f"{shown} a {kind} address: {_UNLESS}"
    return None
