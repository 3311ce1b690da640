from __future__ import annotations

from collections.abc import Callable

import pytest

from mol_platform.contract.refs import (
    MAX_VERSION,
    AdapterRef,
    RefError,
    check_alias,
    check_name,
    check_namespace,
    check_scope,
    check_tag,
    is_dns_label,
    is_valid_alias,
    is_valid_name,
    parse_version,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "ns", "name", "ref", "version", "immutable"),
    [
        ("acme/chat@stable", "acme", "chat", "stable", None, False),
        ("acme/chat@latest", "acme", "chat", "latest", None, False),
        ("acme/chat@v3", "acme", "chat", "v3", 3, True),
        ("a.b/c_d-e@v12", "a.b", "c_d-e", "v12", 12, True),
        (f"acme/chat@{DIGEST}", "acme", "chat", DIGEST, None, True),
    ],
)
def test_parse(
    text: str, ns: str, name: str, ref: str, version: int | None, immutable: bool
) -> None:
    parsed = AdapterRef.parse(text)
    assert (parsed.namespace, parsed.name, parsed.ref) == (ns, name, ref)
    assert parsed.version == version
    assert parsed.immutable is immutable
    assert str(parsed) == text
    assert parsed.adapter == f"{ns}/{name}"


@pytest.mark.parametrize(
    "text",
    [
        "acme/chat",
        "acme@stable",
        "acme/chat@",
        "/chat@stable",
        "acme/../x@v1",
        "acme/chat@v0",
        "acme/chat@sha256:xyz",
        "Acme/chat@stable",
        "acme/chat@stable/../../etc",
        "acme/ch at@v1",
        "a" * 64 + "/chat@v1",
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(RefError, match="invalid adapter reference"):
        AdapterRef.parse(text)


@pytest.mark.parametrize("name", ["a", "acme", "a-b", "a.b", "a_b", "x" * 63, "0abc"])
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a/b", "..", "a..b", "x" * 64, "a b"])
def test_invalid_names(name: str) -> None:
    assert not is_valid_name(name)
    with pytest.raises(RefError, match="invalid name"):
        check_name(name)


# A `$` anchor accepts a trailing newline: every validator must match the whole string.
@pytest.mark.parametrize("check", [check_name, check_namespace, check_tag, check_alias,
                                   check_scope])
def test_validators_refuse_trailing_newline(check: Callable[[str], str]) -> None:
    good = "read:acme" if check is check_scope else "acme"
    assert check(good) == good
    for bad in (good + "\n", "\n" + good, good + "\r\n", good + "\x00"):
        with pytest.raises(RefError):
            check(bad)


def test_reference_with_trailing_newline_is_refused() -> None:
    with pytest.raises(RefError):
        AdapterRef.parse("acme/chat@stable\n")
    with pytest.raises(RefError):
        AdapterRef.parse("acme/chat\n@v1")


@pytest.mark.parametrize(("alias", "why"), [
    ("latest", "reserved"),
    ("v2", "version reference"),
    ("v0", "version reference"),
    ("v01", "version reference"),
    ("sha256:" + "ab" * 32, "digest reference"),
    ("sha256:abc", "digest reference"),
    ("Stable", "lowercase letter first"),
    ("2fast", "lowercase letter first"),
])
def test_aliases_that_read_as_references_say_why(alias: str, why: str) -> None:
    assert not is_valid_alias(alias)
    with pytest.raises(RefError, match=why):
        check_alias(alias)


@pytest.mark.parametrize("alias", ["stable", "canary", "v", "v2-rc", "vnext", "prod_eu"])
def test_valid_aliases(alias: str) -> None:
    assert check_alias(alias) == alias


@pytest.mark.parametrize("scope", ["read", "admin", "read:acme", "publish:a.b", "usage",
                                   "usage:acme"])
def test_valid_scopes(scope: str) -> None:
    assert check_scope(scope) == scope


@pytest.mark.parametrize("scope", ["write", "admin:acme", "read:", "publish", "publish:A",
                                   "read:a..b", "read:acme:x", ":acme", "usage:", "usage:A",
                                   "write:acme"])
def test_invalid_scopes(scope: str) -> None:
    with pytest.raises(RefError, match="invalid scope"):
        check_scope(scope)


def test_version_beyond_the_column_range_is_not_a_reference() -> None:
    assert AdapterRef.parse(f"acme/chat@v{MAX_VERSION}").version == MAX_VERSION
    with pytest.raises(RefError, match="v1 to"):
        AdapterRef.parse(f"acme/chat@v{MAX_VERSION + 1}")


@pytest.mark.parametrize(("text", "number"),
                         [("3", 3), ("v3", 3), (f"v{MAX_VERSION}", MAX_VERSION)])
def test_parse_version(text: str, number: int) -> None:
    assert parse_version(text) == number


@pytest.mark.parametrize("text", ["0", "v0", "01", "v01", "v02", "007", "3\n", "", "v", "V3",
                                  "3.0", "+3", "٣", str(MAX_VERSION + 1), "1" * 11])
def test_parse_version_refuses(text: str) -> None:
    with pytest.raises(RefError, match="such as 3 or v3"):
        parse_version(text)


@pytest.mark.parametrize(("label", "ok"), [
    ("a", True), ("code-2", True), ("0abc", True), ("a" * 63, True), ("a" * 64, False),
    ("", False), ("-a", False), ("a-", False), ("A", False), ("a.b", False),
    ("a_b", False), ("a\n", False),
])
def test_dns_labels(label: str, ok: bool) -> None:
    """One rule for experts, deployments and head names, everywhere they are checked."""
    assert is_dns_label(label) is ok
