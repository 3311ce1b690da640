from __future__ import annotations

import pytest

from mol_platform.refs import AdapterRef, RefError, check_name, is_valid_name

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
