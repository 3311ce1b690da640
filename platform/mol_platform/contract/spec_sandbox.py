"""The code harness's part of the ``MoLDeployment`` spec (``spec.harness``): the limits of
one sandbox session, the pods' runtime class, the egress allowlist and the warm pool.

Model-written code is hostile until proven otherwise, so the defaults are the safe ones
(no network at all, 30 s per call, 512 MiB) and the allowlist can never open the cloud
metadata service or the cluster's internal ranges: an entry inside one of
``DENIED_NETWORKS`` is refused at admission (the CRD's CEL rule and the model say the same
thing), and an entry that contains one (``0.0.0.0/0``) is rendered with it excepted.
Kept apart from :mod:`mol_platform.contract.spec`, which assembles it.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import AfterValidator, Field

from mol_platform.contract.spec_base import SpecModel, defaulted
from mol_platform.contract.spec_rules import (
    SUBDOMAIN_MAX,
    SUBDOMAIN_PATTERN,
    Quantity,
    cel,
    matching,
    schema,
)

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Never reachable from a sandbox, whatever the allowlist says: "this host", RFC 1918 and
# carrier-grade NAT (where pod and service ranges live), loopback, link-local (the cloud
# metadata service at 169.254.169.254), IPv4-mapped IPv6, unique-local IPv6 (AWS's
# metadata at fd00:ec2::254) and IPv6 link-local.
DENIED_NETWORKS: tuple[str, ...] = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.168.0.0/16",
    "::1/128", "::ffff:0:0/96", "fc00::/7", "fe80::/10",
)
MAX_EGRESS = 32
MSG_EGRESS_DENIED = ("harness.egress.allow must not reach the cloud metadata service "
                     "(169.254.169.254, fd00:ec2::254), loopback, link-local or "
                     "cluster-internal ranges (" + ", ".join(DENIED_NETWORKS) + ")")
MSG_EGRESS_FORM = ("harness.egress.allow entries are IP addresses or CIDRs such as "
                   "203.0.113.0/24 or 2001:db8::/32 (a NetworkPolicy cannot name hosts)")

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}(?:/(?:3[0-2]|[12]?[0-9]))?"
_IPV6 = r"[0-9a-fA-F:.]*:[0-9a-fA-F:.]*(?:/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9]))?"
EGRESS_PATTERN = rf"(?:{_IPV4}|{_IPV6})"


def _prefix_at_least(least: int, most: int) -> str:
    """A CIDR's optional ``/n`` suffix with ``least <= n <= most`` (absent: a single
    address, inside every range that holds it)."""
    choices = "|".join(str(n) for n in range(most, least - 1, -1))
    return f"(?:/(?:{choices}))?$"


def _v4(head: str, least: int) -> str:
    return rf"^{head}[0-9.]*{_prefix_at_least(least, 32)}"


def _v6(head: str, least: int, tail: str = "[0-9a-fA-F:.]*") -> str:
    return rf"^(?i:{head}){tail}{_prefix_at_least(least, 128)}"


# The CEL side of "inside a denied network", one regex per entry of DENIED_NETWORKS (core
# CEL has no CIDR functions): the address's leading part and a prefix at least as long.
_DENIED_RULES = (
    _v4(r"0\.", 8), _v4(r"10\.", 8), _v4(r"100\.(?:6[4-9]|[7-9][0-9]|1[01][0-9]|12[0-7])\.", 10),
    _v4(r"127\.", 8), _v4(r"169\.254\.", 16), _v4(r"172\.(?:1[6-9]|2[0-9]|3[01])\.", 12),
    _v4(r"192\.168\.", 16),
    _v6(r"::0{0,3}1|(?:0{1,4}:){7}0{0,3}1", 128, tail=""), _v6(r"::ffff:", 96),
    _v6(r"f[cd][0-9a-f]{2}:", 7), _v6(r"fe[89ab][0-9a-f]:", 10),
)
EGRESS_DENIED_RULE = cel(" || ".join(f"self.matches('{r}')" for r in _DENIED_RULES)
                         .join(("!(", ")")), MSG_EGRESS_DENIED)


def egress_network(value: str) -> IpNetwork:
    """An allowlist entry -> its network (a bare address is a /32 or /128; host bits
    are cleared, as the API server's CIDR parser does)."""
    return ipaddress.ip_network(value.strip(), strict=False)


def denied_within(network: IpNetwork) -> list[IpNetwork]:
    """The denied networks inside ``network`` (what its ipBlock must except)."""
    denied = (ipaddress.ip_network(d) for d in DENIED_NETWORKS)
    return [d for d in denied
            if d.version == network.version and d.subnet_of(network)]  # type: ignore[arg-type]


def _check_egress(value: str) -> str:
    try:
        network = egress_network(value)
    except ValueError:
        raise ValueError(f"{MSG_EGRESS_FORM}; got {value[:80]!r}") from None
    for text in DENIED_NETWORKS:
        denied = ipaddress.ip_network(text)
        if denied.version != network.version:
            continue
        if network.subnet_of(denied):  # type: ignore[arg-type]
            raise ValueError(f"{MSG_EGRESS_DENIED}; {value[:80]!r} is inside {text}")
    return value


EgressEntry = Annotated[str, matching(EGRESS_PATTERN, "harness.egress.allow entry",
                                      "an IP address or CIDR", 64),
                        AfterValidator(_check_egress),
                        schema(pattern=EGRESS_PATTERN, max_length=64,
                               rules=(EGRESS_DENIED_RULE,))]
"""One allowlist entry: an address or CIDR outside every denied network."""

RuntimeClassName = Annotated[str, matching(SUBDOMAIN_PATTERN, "harness.runtimeClassName",
                                           "a RuntimeClass name (a DNS-1123 subdomain)",
                                           SUBDOMAIN_MAX),
                             schema(pattern=SUBDOMAIN_PATTERN, max_length=SUBDOMAIN_MAX)]

SandboxImage = Annotated[str, matching(r"[^\s]+", "harness.image", "an image reference "
                                       "without blanks, at most 512 characters", 512),
                         schema(pattern=r"[^\s]+", max_length=512)]


class SandboxLimits(SpecModel):
    """What one session may use; a call past ``timeoutSeconds`` is stopped and reported."""

    timeout_seconds: int = Field(default=30, ge=1, le=600)
    """Wall time of one call, in seconds."""
    cpu: Quantity = "1"
    """CPU of one session (its pod's limit)."""
    memory: Quantity = "512Mi"
    """Memory of one session (its pod's limit; the scratch tmpfs counts against it)."""
    pids: int = Field(default=64, ge=8, le=4096)
    """The most processes and threads of one session."""
    output_bytes: int = Field(default=65536, ge=1024, le=16 * 1024**2)
    """Output kept from one call; past it the answer says ``truncated``."""
    disk_bytes: int = Field(default=64 * 1024**2, ge=1024**2, le=16 * 1024**3)
    """The session's writable scratch space (a tmpfs), in bytes."""
    idle_ttl_seconds: int = Field(default=1200, ge=60, le=7 * 86400, alias="idleTTLSeconds")
    """Idle time after which a session is reaped (its next use says so)."""


class EgressSpec(SpecModel):
    """Where sandbox code may connect to: nowhere unless listed."""

    allow: list[EgressEntry] = Field(default_factory=list, max_length=MAX_EGRESS,
                                     json_schema_extra={"x-kubernetes-list-type": "set"})
    """Addresses or CIDRs sandboxes may reach (TCP and UDP, every port); empty: no network.
    Metadata, loopback, link-local and cluster-internal ranges are always refused."""


class HarnessSpec(SpecModel):
    """The code harness: a sandbox service and one isolated pod per session, for the
    experts that set ``harness: true``."""

    image: SandboxImage | None = None
    """The sandbox image (``mol sandbox serve``); default: the operator's platform image."""
    replicas: int = Field(default=1, ge=1, le=100)
    """Replicas of the sandbox service."""
    runtime_class_name: RuntimeClassName | None = None
    """A RuntimeClass for session pods, e.g. ``gvisor`` (runsc) or ``kata``; default: the
    node's runtime."""
    limits: SandboxLimits = defaulted(SandboxLimits)
    """Per-session limits."""
    max_sessions: int = Field(default=100, ge=1, le=10000)
    """The most live sessions of the deployment; a new one past it is refused."""
    warm_pool: int = Field(default=2, ge=0, le=100)
    """Session pods kept started ahead of need (0: each session waits for its pod)."""
    egress: EgressSpec = defaulted(EgressSpec)
    """The egress allowlist."""
