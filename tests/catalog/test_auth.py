"""Tokens and scopes: 401 without/with a bad token, 403 for the wrong scope, revocation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

ADMIN = "mol_" + "b" * 43


@pytest.fixture
async def admin(make_client: Any) -> httpx.AsyncClient:
    client: httpx.AsyncClient = await make_client(auth="on", admin_token=ADMIN)
    client.headers["Authorization"] = f"Bearer {ADMIN}"
    return client


async def token(admin: httpx.AsyncClient, name: str, *scopes: str) -> dict[str, Any]:
    r = await admin.post("/v1/tokens", json={"name": name, "scopes": list(scopes)})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def bearer(tok: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok['token']}"}


async def test_tokens_and_scopes(admin: httpx.AsyncClient, model: Any) -> None:
    assert (await admin.post("/v1/base-models", json=model.base_body())).status_code == 201
    pub = await token(admin, "ci-acme", "publish:acme")
    assert pub["token"].startswith("mol_")
    assert len(pub["token"]) == 47
    reader = await token(admin, "router", "read:acme")
    everyone = await token(admin, "ops", "read")
    url = "/v1/adapters/acme/coding/versions"
    files = model.files(model.adapter())

    r = await admin.post(url, files=files, headers={"Authorization": ""})
    assert r.status_code == 401
    assert r.json()["error"] == "Unauthorized"
    r = await admin.post(url, files=files, headers={"Authorization": "Bearer mol_nope"})
    assert r.status_code == 401
    r = await admin.post(url, files=files, headers=bearer(reader))
    assert r.status_code == 403
    assert "publish:acme" in r.json()["detail"]
    r = await admin.post("/v1/adapters/other/coding/versions", files=files, headers=bearer(pub))
    assert r.status_code == 403
    r = await admin.post(url, files=files, headers=bearer(pub))
    assert r.status_code == 201, r.text
    v1 = (await admin.get("/v1/adapters/acme/coding/versions/1")).json()
    assert v1["created_by"] == "ci-acme"

    for tok in (pub, reader, everyone):
        res = await admin.get("/v1/resolve/acme/coding@v1", headers=bearer(tok))
        assert res.status_code == 200
        blob = await admin.get(res.json()["files"][0]["url"], headers=bearer(tok))
        assert blob.status_code == 200
    outsider = await token(admin, "other", "read:other")
    assert (await admin.get("/v1/resolve/acme/coding@v1",
                            headers=bearer(outsider))).status_code == 403
    listing = (await admin.get("/v1/adapters", headers=bearer(outsider))).json()
    assert listing["items"] == []
    assert (await admin.get("/v1/tokens", headers=bearer(everyone))).status_code == 403
    r = await admin.put("/v1/adapters/acme/coding/aliases/stable", json={"version": 1},
                        headers=bearer(reader))
    assert r.status_code == 403

    items = (await admin.get("/v1/tokens")).json()["items"]
    assert {t["name"] for t in items} == {"ci-acme", "router", "ops", "other"}
    assert all("token" not in t and t["revoked_at"] is None for t in items)
    assert (await admin.delete(f"/v1/tokens/{pub['id']}")).status_code == 204
    r = await admin.post(url, files=model.files(model.adapter(seed=2)), headers=bearer(pub))
    assert r.status_code == 401
    assert (await admin.delete("/v1/tokens/999999")).status_code == 404
    bad = await admin.post("/v1/tokens", json={"name": "x", "scopes": ["write:acme"]})
    assert bad.status_code == 400


async def test_tokens_listed_by_name_prefix_and_activity(admin: httpx.AsyncClient) -> None:
    """An owner's tokens, by name prefix (LIKE wildcards in it are literal), active only."""
    first = await token(admin, "mol-operator/u1/acme/bot", "read:acme")
    second = await token(admin, "mol-operator/u1/acme/bot", "read:acme")
    await token(admin, "mol-operator/u2/acme/other", "read:acme")
    await token(admin, "mol-operator_u1x", "read:acme")
    assert (await admin.delete(f"/v1/tokens/{first['id']}")).status_code == 204

    async def ids(**params: str) -> list[int]:
        r = await admin.get("/v1/tokens", params=params)
        assert r.status_code == 200, r.text
        return [t["id"] for t in r.json()["items"]]

    assert await ids(prefix="mol-operator/u1/") == [first["id"], second["id"]]
    assert await ids(prefix="mol-operator/u1/", active="true") == [second["id"]]
    assert len(await ids(prefix="mol-operator/")) == 3
    assert await ids(prefix="mol-operator_") == [t["id"] for t in (await admin.get(
        "/v1/tokens")).json()["items"] if t["name"] == "mol-operator_u1x"]
    for bad in ("mol-operator%", "a\x00b", "a\nb"):  # not a name's characters: 422, never 500
        assert (await admin.get("/v1/tokens", params={"prefix": bad})).status_code == 422
    assert len(await ids()) == 4
    assert (await admin.get("/v1/tokens", params={"prefix": "x" * 129})).status_code == 422


async def test_live_server_with_auth(catalog_server_auth: Any) -> None:
    async with httpx.AsyncClient(base_url=catalog_server_auth.url) as http:
        assert (await http.get("/v1/tokens")).status_code == 401
        headers = {"Authorization": f"Bearer {catalog_server_auth.admin_token}"}
        r = await http.post("/v1/tokens", json={"name": "t", "scopes": ["read"]},
                            headers=headers)
        assert r.status_code == 201
        read = {"Authorization": f"Bearer {r.json()['token']}"}
        ok = await http.get("/v1/adapters", headers=read)
        assert ok.status_code == 200
