"""The rule of which addresses a webhook may reach, address class by address class, and
the allowlist that lets an operator permit private receivers."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from mol_catalog.settings import CatalogSettings
from mol_catalog.webhooks.targets import Allowlist, address_kind, resolved_refusal, url_refusal

NONE = Allowlist()


@pytest.mark.parametrize(("address", "kind"), [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("10.0.0.1", "private"), ("172.31.255.255", "private"), ("192.168.0.1", "private"),
    ("::ffff:10.0.0.1", "private"), ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("fd12:3456::1", "unique-local"), ("fc00::1", "unique-local"),
    ("169.254.169.254", "cloud metadata"), ("fd00:ec2::254", "cloud metadata"),
    ("100.64.1.1", "shared (carrier-grade NAT)"), ("239.1.1.1", "multicast"),
    ("ff02::1", "multicast"), ("240.0.0.1", "reserved"),
    ("93.184.215.14", None), ("8.8.8.8", None), ("2606:4700:4700::1111", None),
])
def test_each_address_class(address: str, kind: str | None) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


def test_every_resolved_address_is_checked() -> None:
    """A name that answers one public and one private address is refused: the connection
    could use either."""
    found = [ipaddress.ip_address(a) for a in ("93.184.215.14", "10.0.0.7")]
    refusal = resolved_refusal("rebind.example.com", found, NONE)
    assert refusal is not None
    assert refusal.startswith("rebind.example.com resolves to 10.0.0.7, a private address")
    assert resolved_refusal("rebind.example.com", found[:1], NONE) is None
    assert resolved_refusal("rebind.example.com", found,
                            Allowlist.parse(["10.0.0.0/24"])) is None
    assert resolved_refusal("rebind.example.com", found,
                            Allowlist.parse(["*.example.com"])) is None
    assert resolved_refusal("metadata.google.internal", found[:1], NONE) is not None


def test_the_allowlist_takes_networks_and_names() -> None:
    allow = Allowlist.parse(["127.0.0.1", "10.0.0.0/8", "fd00::/8", " hooks.internal ",
                             "*.svc.cluster.local", ""])
    assert url_refusal("http://127.0.0.1:9/x", allow) is None
    assert url_refusal("http://127.0.0.2:9/x", allow) is not None
    assert url_refusal("https://10.9.8.7/x", allow) is None
    assert url_refusal("https://hooks.internal/x", allow) is None
    assert url_refusal("https://ci.ns.svc.cluster.local/x", allow) is None
    assert allow.allows_address(ipaddress.ip_address("fd00:ec2::254"))
    assert not allow.allows_host("svc.cluster.local")  # "*." is the names below it


@pytest.mark.parametrize("entry", ["not a host!", "10.0.0.0/33", "*.", "a..b"])
def test_a_bad_allowlist_entry_stops_the_catalog_at_start(entry: str) -> None:
    with pytest.raises(ValidationError, match="neither a network"):
        CatalogSettings(webhook_allow=[entry])


def test_the_allowlist_setting_reads_a_comma_list_or_json(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOL_CATALOG_WEBHOOK_ALLOW", "10.0.0.0/8, hooks.internal")
    assert CatalogSettings().webhook_allow == ["10.0.0.0/8", "hooks.internal"]
    monkeypatch.setenv("MOL_CATALOG_WEBHOOK_ALLOW", '["127.0.0.1"]')
    assert CatalogSettings().webhook_allowlist.allows_address(
        ipaddress.ip_address("127.0.0.1"))
