"""Edges of the HTTP contract, on both backends: a trailing slash is answered (never
redirected to wherever the Host header points), a version has one spelling, a 405 says
which methods the path has, names and sources are refused rather than mangled, OpenAPI
declares what the server checks, and gc winning every race is a 503."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from mol_catalog.blobs import orphans
from mol_catalog.blobs.store import LocalBlobStore
from mol_catalog.db import Database
from tests.catalog.conftest import AppClient
from tests.catalog.test_api import ADAPTER, publish, setup_base

Model = Any
EVIL = {"Host": "evil.example.com", "X-Forwarded-Proto": "https"}


async def test_a_trailing_slash_is_answered_not_redirected(client: httpx.AsyncClient,
                                                           model: Model) -> None:
    await setup_base(client, model)
    for method, path in (("GET", "/v1/adapters/"), ("GET", f"{ADAPTER}/"),
                         ("GET", "/v1/resolve/acme/coding@v1/")):
        r = await client.request(method, path, headers=EVIL)
        assert r.status_code == 404, (path, r.status_code)
        assert "location" not in r.headers
        assert r.json()["error"] == "NotFound"
        assert path.rstrip("/") in r.json()["detail"]
    pair = model.adapter()
    r = await client.post(f"{ADAPTER}/versions/", files=model.files(pair), headers=EVIL)
    assert r.status_code == 404
    assert "location" not in r.headers
    assert f"{ADAPTER}/versions" in r.json()["detail"]
    assert (await client.get(f"{ADAPTER}/versions")).status_code == 404  # nothing stored


async def test_a_version_has_one_spelling(client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model)
    assert (await publish(client, model)).status_code == 201
    for spelling in ("01", "v01", "v02", "001", "0"):
        for method in ("GET", "DELETE"):
            r = await client.request(method, f"{ADAPTER}/versions/{spelling}")
            assert r.status_code == 400, (method, spelling, r.status_code)
            assert "leading zeros" in r.json()["detail"]
        assert (await client.post(f"{ADAPTER}/versions/{spelling}/yank",
                                  json={"reason": "x"})).status_code == 400
    assert (await client.get(f"{ADAPTER}/versions/1")).json()["status"] == "ready"
    for spelling in ("1", "v1"):
        assert (await client.get(f"{ADAPTER}/versions/{spelling}")).status_code == 200
    assert (await client.get("/v1/resolve/acme/coding@v01")).status_code == 400
    assert (await client.get("/v1/resolve/acme/coding@v1")).status_code == 200


async def test_a_405_names_the_methods_of_the_path(client: httpx.AsyncClient) -> None:
    for method, path, allow in (
            ("DELETE", "/v1/adapters", "GET, HEAD"),
            ("PUT", f"{ADAPTER}/versions", "GET, POST"),
            ("PATCH", "/v1/resolve/acme/coding@v1", "GET, HEAD"),
            ("POST", f"{ADAPTER}/versions/1", "GET, DELETE")):
        r = await client.request(method, path)
        assert r.status_code == 405, (method, path)
        assert r.headers["allow"] == allow, (method, path)
        assert r.json()["error"] == "MethodNotAllowed"


async def test_token_names_are_one_printable_line(client: httpx.AsyncClient) -> None:
    for name in ("ci\nforged 1 admin", "x\x1b[31m", "tab\there", " lead", "", "a" * 129):
        r = await client.post("/v1/tokens", json={"name": name, "scopes": ["read"]})
        assert r.status_code == 422, (name, r.status_code)
        assert r.json()["detail"].startswith("name: invalid token name")
    r = await client.post("/v1/tokens", json={"name": "ci-acme@build/7", "scopes": ["read"]})
    assert r.status_code == 201, r.text
    assert [t["name"] for t in (await client.get("/v1/tokens")).json()["items"]] == [
        "ci-acme@build/7"]


async def test_a_source_over_the_limit_is_refused_not_cut(client: httpx.AsyncClient,
                                                          model: Model) -> None:
    await setup_base(client, model)
    r = await publish(client, model, source="s3://b/" + "x" * 2000)
    assert r.status_code == 422, r.text
    assert "at most 2000" in r.json()["detail"]
    assert (await client.get(f"{ADAPTER}/versions")).status_code == 404  # nothing stored
    source = "s3://b/" + "x" * 1993
    assert (await publish(client, model, source=source)).status_code == 201
    assert (await client.get(f"{ADAPTER}/versions/1")).json()["source"] == source


async def test_openapi_declares_what_the_server_enforces(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    params = {p["name"]: p["schema"] for p in spec["paths"]["/v1/adapters"]["get"]["parameters"]}
    tag = params["tag"]["anyOf"][0]
    assert tag["maxLength"] == 63
    assert re.fullmatch(tag["pattern"][1:-1], "code")
    assert not re.fullmatch(tag["pattern"][1:-1], "a..b")
    scope = schemas["TokenCreate"]["properties"]["scopes"]["items"]["pattern"][1:-1]
    assert [s for s in ("read", "admin", "read:acme", "publish:a.b", "publish:", "write:x",
                        "read:a..b", "publish:Acme") if re.fullmatch(scope, s)] == [
        "read", "admin", "read:acme", "publish:a.b"]
    name = schemas["TokenCreate"]["properties"]["name"]["pattern"]
    assert re.fullmatch(name[1:-1], "ci")
    assert not re.fullmatch(name[1:-1], "a b")
    dim = schemas["BaseModelCreate"]["properties"]["tensors"]["additionalProperties"]["items"]
    assert dim["maximum"] == 2**63 - 1
    assert isinstance(dim["maximum"], int)
    version = next(p["schema"]["pattern"][1:-1] for p in spec["paths"][
        "/v1/adapters/{ns}/{name}/versions/{version}"]["get"]["parameters"]
        if p["name"] == "version")
    assert [v for v in ("1", "v3", "2147483647", "2147483648", "4007143247", "01", "v0")
            if re.fullmatch(version, v)] == ["1", "v3", "2147483647"]
    base_name = schemas["BaseModelCreate"]["properties"]["name"]["pattern"][1:-1]
    assert re.fullmatch(base_name, "tiny-llama")
    assert not re.fullmatch(base_name, "")
    form = spec["paths"]["/v1/adapters/{ns}/{name}/versions"]["post"]["requestBody"]
    assert form["content"]["multipart/form-data"]["schema"]["properties"]["source"][
        "maxLength"] == 2000


class GcAfterEveryPut(LocalBlobStore):
    """A local store where a gc with grace 0 runs right after each write: the publish
    that wrote loses its blobs every time, as under a gc loop on the same content."""

    db: Database

    async def put(self, digest: str, source: Path | bytes, size: int) -> bool:
        stored = await super().put(digest, source, size)
        await orphans.collect(self.db, self, 0)
        return stored


async def test_a_publish_gc_keeps_undoing_is_a_503_not_a_500(client: AppClient,
                                                             model: Model) -> None:
    await setup_base(client, model)
    assert isinstance(client.catalog.blobs, LocalBlobStore)
    store = GcAfterEveryPut(client.catalog.blobs.root)
    store.db = client.catalog.db
    client.catalog.blobs = store
    r = await publish(client, model)
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "5"
    assert "gc deleted blobs" in r.json()["detail"]
    client.catalog.blobs = LocalBlobStore(store.root)
    assert (await publish(client, model)).status_code == 201
