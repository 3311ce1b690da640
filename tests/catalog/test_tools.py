"""Tools proposed from sandbox sessions, on both backends: publish (versions, the retry,
stored bytes and digest, lineage), the automatic checks as advice, approval by moving
the protected ``approved`` alias (admin only), events, the approved-tools lookup, signed
tools, the check a loader runs before each load, the client, and migration 0015."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, inspect

from mol_catalog.db import downgrade, migrate, sync_url
from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract import tools as tc
from mol_testkit.signing import make_key, sign_with_library

ADMIN = "mol_" + "t" * 43
TOOLS = "/v1/namespaces/{ns}/tools"
SOURCE = '''import math


def hypot(a: float, b: float = 0.0) -> float:
    """The length of the hypotenuse."""
    return math.sqrt(a * a + b * b)
'''
SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a"]}
LINEAGE = {"session_id": "s-1f2e", "deployment": "chat", "expert": "agent", "tenant": "acme"}


def proposal(source: str = SOURCE, parameters: Any = None, **extra: Any) -> dict[str, Any]:
    return {"source": source, "parameters": SCHEMA if parameters is None else parameters,
            **LINEAGE, **extra}


async def publish(client: httpx.AsyncClient, body: Any, ns: str = "acme", name: str = "hypot",
                  headers: dict[str, str] | None = None) -> httpx.Response:
    return await client.post(f"{TOOLS.format(ns=ns)}/{name}/versions", json=body,
                             headers=headers or {})


def checks(answer: dict[str, Any]) -> dict[str, bool | None]:
    return {c["name"]: c["ok"] for c in answer["checks"]}


async def test_publish_checks_approve_and_lookup(client: httpx.AsyncClient) -> None:
    r = await publish(client, proposal())
    assert r.status_code == 201, r.text
    v1 = r.json()
    stored = tc.canonical(tc.document("hypot", "The length of the hypotenuse.", SCHEMA,
                                      SOURCE))
    assert v1["digest"] == "sha256:" + hashlib.sha256(stored).hexdigest()
    assert (v1["version"], v1["description"], v1["approved"], v1["signed"]) == (
        1, "The length of the hypotenuse.", False, False)  # the docstring by default
    assert v1["lineage"] == LINEAGE
    assert checks(v1) == {"parses": True, "defines_function": True, "schema": True,
                          "names_match": True, "example_runs": None}
    assert "not run" in v1["checks"][-1]["detail"]
    again = await publish(client, proposal())
    assert (again.status_code, again.json()["version"]) == (200, 1)
    doc = await client.get(f"{TOOLS.format(ns='acme')}/hypot/versions/1/document")
    assert doc.content == stored
    assert doc.headers["etag"] == f'"{v1["digest"]}"'

    # Not offered before approval.
    lookup = "/v1/namespaces/acme/approved-tools"
    assert (await client.get(lookup)).json() == {"items": [], "missing": []}
    assert (await client.get(lookup, params={"tool": "hypot"})).json()["missing"] == ["hypot"]

    # A second version that fails its checks is stored all the same (advice, not judge).
    bad = await publish(client, proposal("def other(:\n", {"type": "array"}))
    assert bad.status_code == 201
    assert checks(bad.json()) == {"parses": False, "defines_function": False,
                                  "schema": False, "names_match": False,
                                  "example_runs": None}

    approve = f"{TOOLS.format(ns='acme')}/hypot/aliases/approved"
    moved = await client.put(approve, json={"version": 1})
    assert moved.status_code == 200, moved.text
    assert (moved.json()["version"], moved.json()["previous"]) == (1, None)
    found = (await client.get(lookup, params={"tool": ["hypot", "nope"]})).json()
    assert found["missing"] == ["nope"]
    [item] = found["items"]
    assert (item["name"], item["version"], item["digest"]) == ("hypot", 1, v1["digest"])
    loaded = tc.verify_load(item["document"].encode(), digest=item["digest"],
                            signature=item["signature"], signer_key=item["signer_key"])
    assert (loaded.name, loaded.source, loaded.parameters) == ("hypot", SOURCE, SCHEMA)
    listing = (await client.get(TOOLS.format(ns="acme"))).json()["items"]
    assert [(t["name"], t["latest_version"], t["approved_version"]) for t in listing] == [
        ("hypot", 2, 1)]
    versions = (await client.get(f"{TOOLS.format(ns='acme')}/hypot/versions")).json()
    assert [(v["version"], v["approved"]) for v in versions["items"]] == [(2, False), (1, True)]

    # Only the one alias; withdrawing takes the tool off the lookup.
    other = await client.put(f"{TOOLS.format(ns='acme')}/hypot/aliases/stable",
                             json={"version": 1})
    assert other.status_code == 400
    assert "'approved'" in other.json()["detail"]
    assert (await client.delete(approve)).json()["previous"] == 1
    assert (await client.get(lookup)).json()["items"] == []
    assert (await client.delete(approve)).status_code == 404


async def test_approval_needs_admin_and_events_are_scoped(make_client: Any) -> None:
    admin = await make_client(auth="on", admin_token=ADMIN)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    tokens = {}
    for name, scopes in (("session", ["publish:acme"]), ("reader", ["read:acme"]),
                         ("globex", ["publish:globex"])):
        r = await admin.post("/v1/tokens", json={"name": name, "scopes": scopes})
        tokens[name] = {"Authorization": f"Bearer {r.json()['token']}"}
    start = (await admin.get("/v1/events")).json()["last"]
    assert (await publish(admin, proposal(), headers=tokens["session"])).status_code == 201
    assert (await publish(admin, proposal(), headers=tokens["reader"])).status_code == 403
    assert (await publish(admin, proposal(), headers=tokens["globex"])).status_code == 403
    approve = f"{TOOLS.format(ns='acme')}/hypot/aliases/approved"
    # The session that proposed it cannot approve its own code.
    refused = await admin.put(approve, json={"version": 1}, headers=tokens["session"])
    assert refused.status_code == 403
    assert "admin" in refused.json()["detail"]
    assert (await admin.delete(approve, headers=tokens["session"])).status_code == 403
    assert (await admin.put(approve, json={"version": 1})).status_code == 200
    assert (await admin.put(approve, json={"version": 1})).status_code == 200  # no event
    lookup = "/v1/namespaces/acme/approved-tools"
    assert (await admin.get(lookup, headers=tokens["reader"])).status_code == 200
    assert (await admin.get(lookup, headers=tokens["globex"])).status_code == 403
    seen = [(e["type"], e["adapter"], e["version"], e["alias"]) for e in (await admin.get(
        "/v1/events", params={"after": start}, headers=tokens["reader"])).json()["items"]]
    assert seen == [("tool.published", "acme/hypot", 1, None),
                    ("tool.alias.set", "acme/hypot", 1, "approved")]
    globex = (await admin.get("/v1/events", params={"after": start},
                              headers=tokens["globex"])).json()["items"]
    assert globex == []


async def test_signed_tool_and_bytes_changed_after_approval(client: httpx.AsyncClient,
                                                            tmp_path: Path) -> None:
    key = make_key(tmp_path, "release")
    kid = (await client.post("/v1/namespaces/acme/keys", json={
        "name": "release", "public_key": key.public_pem})).json()["key_id"]
    stored = tc.canonical(tc.document("hypot", "Hypotenuse.", SCHEMA, SOURCE))
    folder = tmp_path / "tool"
    folder.mkdir()
    (folder / tc.DOCUMENT_FILE).write_bytes(stored)
    signature = sign_with_library(folder, key)
    # A signature of other bytes is refused at publish, as adapters' are.
    wrong = await publish(client, proposal(description="Other.", signature=signature))
    assert (wrong.status_code, wrong.json()["reason"]) == (422, "files_mismatch")
    r = await publish(client, proposal(description="Hypotenuse.", signature=signature))
    assert r.status_code == 201, r.text
    assert (r.json()["signed"], r.json()["signed_by"]) == (True, kid)
    assert (await client.put(f"{TOOLS.format(ns='acme')}/hypot/aliases/approved",
                             json={"version": 1})).status_code == 200
    [item] = (await client.get("/v1/namespaces/acme/approved-tools")).json()["items"]
    assert (item["signed_by"], item["signer_key"], item["signer_revoked"]) == (
        kid, key.public_pem, False)
    got = item["document"].encode()
    ok = tc.verify_load(got, digest=item["digest"], signature=item["signature"],
                        signer_key=item["signer_key"], require_signature=True,
                        trusted_signers=frozenset({kid}))
    assert ok.signed_by == kid

    # The bytes change after approval (the store, the wire, a cache): refused.
    changed = got.replace(b"math.sqrt", b"os.system")
    with pytest.raises(tc.ToolLoadRefused) as err:
        tc.verify_load(changed, digest=item["digest"], signature=item["signature"],
                       signer_key=item["signer_key"])
    assert err.value.code == "digest_mismatch"
    # ... and with the digest changed to match them, the signature refuses them.
    with pytest.raises(tc.ToolLoadRefused) as err:
        tc.verify_load(changed, digest=tc.digest_of(changed), signature=item["signature"],
                       signer_key=item["signer_key"])
    assert err.value.code == "files_mismatch"
    for kwargs, code in (({"signature": None, "require_signature": True}, "missing_signature"),
                         ({"signer_revoked": True}, "revoked_key"),
                         ({"trusted_signers": frozenset({"0" * 64})}, "untrusted_key")):
        args: dict[str, Any] = {"digest": item["digest"], "signature": item["signature"],
                                "signer_key": item["signer_key"], **kwargs}
        with pytest.raises(tc.ToolLoadRefused) as err:
            tc.verify_load(got, **args)
        assert err.value.code == code

    # A namespace that requires signatures refuses approving an unsigned version.
    assert (await client.put("/v1/namespaces/acme/signature-policy", json={
        "require_signatures": True, "keys": None})).status_code == 200
    unsigned = await publish(client, proposal(), name="plain")
    assert (unsigned.status_code, unsigned.json()["reason"]) == (422, "missing_signature")


def test_checks_are_advice() -> None:
    def of(source: str, parameters: Any = SCHEMA) -> dict[str, bool | None]:
        return {c.name: c.ok for c in tc.checks("hypot", source, parameters)}

    assert of(SOURCE)["defines_function"] is True
    two = of(SOURCE + "\ndef helper():\n    pass\n")
    assert (two["defines_function"], two["names_match"]) == (False, True)
    assert of("def hypot(a, b):\n    return a\n")["names_match"] is False  # b required
    assert of("x = 1\n")["defines_function"] is False
    assert of("class hypot:\n    pass\n")["defines_function"] is False
    assert of(SOURCE, {"type": "object", "required": ["z"]})["schema"] is False
    assert of(SOURCE, {"type": "object", "properties": {"a": {"type": "float"}}})[
        "schema"] is False
    assert of("def hypot(\x00):\n")["parses"] is False


@pytest.mark.parametrize(("name", "body", "status"), [
    ("Hypot", proposal(), 400),  # not a lowercase identifier
    ("class", proposal(), 400),  # a keyword
    ("hypot", {"source": SOURCE}, 422),  # no parameters
    ("hypot", proposal(source=""), 422),
    ("hypot", proposal(session_id="bad id"), 422),  # full match
    ("hypot", proposal(session_id="ok\n"), 422),
    ("hypot", proposal(source="x" * (tc.MAX_SOURCE_CHARS + 1)), 422),
    ("hypot", {**proposal(), "unknown": 1}, 422),
    ("hypot", proposal(source="def hypot():\n    '\x00'\n"), 422),
])
async def test_bad_proposals(client: httpx.AsyncClient, name: str, body: Any,
                             status: int) -> None:
    r = await publish(client, body, name=name)
    assert r.status_code == status, r.text


async def test_bad_approvals_and_lookups(client: httpx.AsyncClient) -> None:
    base = f"{TOOLS.format(ns='acme')}/hypot"
    assert (await client.put(f"{base}/aliases/approved", json={"version": 1})
            ).status_code == 404
    assert (await publish(client, proposal())).status_code == 201
    for version in (0, -1, 2**31, "1", True, 1.5):
        r = await client.put(f"{base}/aliases/approved", json={"version": version})
        assert r.status_code == 422, (version, r.text)
    assert (await client.put(f"{base}/aliases/approved", json={"version": 9})).status_code == 404
    assert (await client.get(f"{base}/versions/01")).status_code == 400
    assert (await client.get(f"{base}/versions/2")).status_code == 404
    assert (await client.get(f"{TOOLS.format(ns='acme')}/nope/versions")).status_code == 404
    r = await client.get("/v1/namespaces/acme/approved-tools",
                         params={"tool": [f"t{i}" for i in range(65)]})
    assert r.status_code in (400, 422)
    r = await client.post(f"{base}/versions", content=b"x" * (tc.MAX_BODY_BYTES + 1),
                          headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_client(catalog_server: str) -> None:
    with CatalogClient(catalog_server) as c:
        v = c.publish_tool("acme", "hypot", SOURCE, SCHEMA, lineage=LINEAGE)
        assert (v.version, v.lineage.session_id, v.approved) == (1, "s-1f2e", False)
        assert [t.name for t in c.tools("acme")] == ["hypot"]
        assert c.approve_tool("acme", "hypot", "v1").version == 1
        assert c.tool("acme", "hypot", 1).approved is True
        [item] = c.approved_tools("acme", ["hypot"]).items
        assert tc.verify_load(item.document.encode(), digest=item.digest).name == "hypot"
        assert c.withdraw_tool("acme", "hypot").previous == 1
        with pytest.raises(CatalogError) as err:
            c.tool("acme", "hypot", 2)
        assert err.value.status == 404
        with pytest.raises(ValueError, match="invalid tool name"):
            c.tool("acme", "Hypot", 1)


async def test_async_client(catalog_server_auth: Any) -> None:
    """The same calls awaited, against a live catalog with auth on: a publisher proposes,
    only an admin approves, and the approved document is what the loader checks."""
    live = catalog_server_auth
    async with AsyncCatalogClient(live.url, live.admin_token) as admin:
        publisher = (await admin.create_token("tools-pub", ["publish:acme", "read"])).token
        async with AsyncCatalogClient(live.url, publisher) as pub:
            v = await pub.publish_tool("acme", "hypot", SOURCE, SCHEMA, lineage=LINEAGE,
                                       example={"a": 3, "b": 4})
            assert (v.version, v.lineage.session_id, v.approved) == (1, "s-1f2e", False)
            assert [t.name for t in await pub.tools("acme")] == ["hypot"]
            assert [x.version for x in await pub.tool_versions("acme", "hypot")] == [1]
            assert (await pub.approved_tools("acme", ["hypot"])).missing == ["hypot"]
            with pytest.raises(CatalogError) as err:
                await pub.approve_tool("acme", "hypot", 1)
            assert err.value.status == 403
        assert (await admin.approve_tool("acme", "hypot", "v1")).version == 1
        assert (await admin.tool("acme", "hypot", 1)).approved is True
        [item] = (await admin.approved_tools("acme", ["hypot"])).items
        assert tc.verify_load(item.document.encode(), digest=item.digest).name == "hypot"
        assert (await admin.withdraw_tool("acme", "hypot")).previous == 1
        with pytest.raises(CatalogError) as err:
            await admin.tool("acme", "hypot", 2)
        assert err.value.status == 404


def test_migration_0015_down_and_up(backend: str, db_url: str) -> None:
    def tables() -> set[str]:
        engine = create_engine(sync_url(db_url))
        try:
            return set(inspect(engine).get_table_names())
        finally:
            engine.dispose()

    ours = {"tools", "tool_versions", "tool_aliases"}
    assert ours <= tables()
    downgrade(db_url, "0014")
    assert not ours & tables()
    assert "router_heads" in tables()
    migrate(db_url)
    assert ours <= tables()
