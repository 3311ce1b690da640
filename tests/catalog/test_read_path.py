"""The hot read path (lean routes): resolve and listing, prepared listing statements.

Both backends: auth and revocation on resolve, errors and headers in the catalog's
shape, query decoding, and listing variants (namespace-restricted, search with LIKE
metacharacters, keyset pages) that each compile their own statement.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

ADMIN = "mol_" + "c" * 43


@pytest.fixture
async def admin(make_client: Any, model: Any) -> httpx.AsyncClient:
    client: httpx.AsyncClient = await make_client(auth="on", admin_token=ADMIN)
    client.headers["Authorization"] = f"Bearer {ADMIN}"
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    return client


async def _token(admin: httpx.AsyncClient, *scopes: str) -> tuple[int, dict[str, str]]:
    r = await admin.post("/v1/tokens", json={"name": "t", "scopes": list(scopes)})
    assert r.status_code == 201, r.text
    return r.json()["id"], {"Authorization": f"Bearer {r.json()['token']}"}


async def test_resolve_auth_errors_and_revocation(admin: httpx.AsyncClient, model: Any) -> None:
    r = await admin.post("/v1/adapters/acme/bot/versions", files=model.files(model.adapter()),
                         data={"alias": "stable"})
    assert r.status_code == 201, r.text
    token_id, reader = await _token(admin, "read:acme")
    url = "/v1/resolve/acme/bot@stable"
    ok = await admin.get(url, headers=reader)
    assert ok.status_code == 200
    assert ok.headers["content-type"] == "application/json"
    assert ok.json()["version"] == 1
    assert ok.json()["verdict"] is None

    missing = await admin.get(url, headers={"Authorization": ""})
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"] == "Unauthorized"
    assert (await admin.get("/v1/resolve/other/bot@stable", headers=reader)).status_code == 403

    # The token is cached now; revoking it in this process must take effect at once.
    assert (await admin.delete(f"/v1/tokens/{token_id}")).status_code == 204
    revoked = await admin.get(url, headers=reader)
    assert revoked.status_code == 401
    assert "revoked" in revoked.json()["detail"]


async def test_resolve_query_and_paths(admin: httpx.AsyncClient, model: Any) -> None:
    r = await admin.post("/v1/adapters/acme/bot/versions", files=model.files(model.adapter()))
    assert r.status_code == 201, r.text
    digest = r.json()["digest"]
    profile = {"base_model": f"{model.name}@{model.revision}", "engine": "vllm==0.32.0",
               "max_lora_rank": 64, "max_loras": 4}
    assert (await admin.put("/v1/serving-profiles/gpu-a", json=profile)).status_code in (200, 201)

    by_digest = await admin.get(f"/v1/resolve/acme/bot@{digest}", params={"profile": "gpu-a"})
    assert by_digest.status_code == 200, by_digest.text
    assert by_digest.json()["verdict"] == {"compatible": True, "reasons": []}
    stored = await admin.get("/v1/resolve/acme/bot@v1?x=1&profile=gpu%2Da")
    assert stored.json() == by_digest.json() | {"files": stored.json()["files"]}
    unknown = await admin.get("/v1/resolve/acme/bot@latest", params={"profile": "nope"})
    assert unknown.status_code == 404
    assert "nope" in unknown.json()["detail"]
    bad = await admin.get("/v1/resolve/acme/Bad Name@v1")
    assert bad.status_code == 400
    assert bad.json()["error"] == "BadRequest"
    deeper = await admin.get("/v1/resolve/acme/bot/extra")
    assert deeper.status_code == 404
    assert deeper.json()["detail"] == "no such path /v1/resolve/acme/bot/extra"
    metrics = (await admin.get("/metrics")).text
    assert 'mol_catalog_requests_total{code="200",route="/v1/resolve/{ns}/{name_ref}"} 2.0' \
        in metrics


async def test_unexpected_failure_is_a_json_500_and_counted(
        admin: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from mol_catalog.resolve import service

    async def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr(service, "resolve", broken)
    r = await admin.get("/v1/resolve/acme/bot@stable")
    assert r.status_code == 500
    assert r.json() == {"error": "InternalError",
                        "detail": "internal error (see the catalog's log)"}
    assert "database went away" in caplog.text  # the traceback is logged, not sent
    metrics = (await admin.get("/metrics")).text
    assert 'mol_catalog_requests_total{code="500",route="/v1/resolve/{ns}/{name_ref}"} 1.0' \
        in metrics


async def test_listing_variants(admin: httpx.AsyncClient, model: Any) -> None:
    for ns, name, tags in (("acme", "a_b-x", "t1"), ("acme", "a%b-y", "t1,t2"),
                           ("beta", "a-b-z", "t2"), ("beta", "plain", "t1")):
        r = await admin.post(f"/v1/adapters/{ns}/{name.replace('%', 'p')}/versions",
                             files=model.files(model.adapter(seed=len(name) + len(ns))),
                             data={"tags": tags})
        assert r.status_code == 201, r.text
    _, acme_reader = await _token(admin, "read:acme")

    async def names(headers: dict[str, str] | None = None, **params: Any) -> list[str]:
        out: list[str] = []
        cursor = None
        while True:
            q = {**params, "limit": 1, **({"cursor": cursor} if cursor else {})}
            r = await admin.get("/v1/adapters", params=q, headers=headers)
            assert r.status_code == 200, r.text
            out += [i["adapter"] for i in r.json()["items"]]
            if (cursor := r.json()["next_cursor"]) is None:
                return out

    assert await names(q="a_b") == ["acme/a_b-x"]  # '_' is literal, not a wildcard
    assert await names(q="-B-") == ["beta/a-b-z"]  # case-insensitive
    assert await names(tag="t1", base=model.name) == ["acme/a_b-x", "acme/apb-y", "beta/plain"]
    base_ref = f"{model.name}@{model.revision}"
    assert await names(tag="t2", base=base_ref) == ["acme/apb-y", "beta/a-b-z"]
    assert await names(base=f"{model.name}@nope") == []
    assert await names(acme_reader) == ["acme/a_b-x", "acme/apb-y"]
    assert await names(acme_reader, tag="t2") == ["acme/apb-y"]
    item = (await admin.get("/v1/adapters", params={"q": "plain"})).json()["items"][0]
    assert item["tags"] == ["t1"]
    assert item["labels"] == {}
    assert item["updated_at"].endswith("Z")
