"""Edges of the HTTP contract, on both backends: a trailing slash is answered (never
redirected to wherever the Host header points), a version has one spelling, and a 405
says which methods the path has."""

from __future__ import annotations

from typing import Any

import httpx

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
