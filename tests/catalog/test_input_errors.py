"""Bad input is a 4xx in the ``{"error", "detail"}`` shape on both backends, with and
without a root path, and a refused publish leaves no files behind."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from catalog.test_api import ADAPTER, publish, setup_base
from mol_catalog.app import create_app
from mol_catalog.settings import CatalogSettings

Model = Any


def cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def assert_error(r: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert r.status_code in statuses, (r.status_code, r.text)
    body: dict[str, Any] = r.json()
    assert isinstance(body["error"], str)
    assert isinstance(body["detail"], str)
    assert body["detail"]
    return body


BAD_CURSORS = ["!!!", cursor(["x"]), cursor([2**70]), cursor([-1]), cursor({"a": 1}),
               cursor([1.5]), cursor([True]), cursor([1, 2]), "A" * 5000]


async def test_tampered_and_out_of_range_values(client: httpx.AsyncClient,
                                                model: Model) -> None:
    await setup_base(client, model)
    assert (await publish(client, model)).status_code == 201
    for c in BAD_CURSORS:
        assert_error(await client.get("/v1/adapters", params={"cursor": c}), 400)
        assert_error(await client.get(f"{ADAPTER}/versions", params={"cursor": c}), 400)
    for after in (2**63, -1, "1e3"):
        assert_error(await client.get("/v1/events", params={"after": after}), 422)
    for v in ("99999999999", "2147483648", "v0", "0x1", "１"):
        assert_error(await client.get(f"{ADAPTER}/versions/{v}"), 400)
        assert_error(await client.post(f"{ADAPTER}/versions/{v}/yank",
                                       json={"reason": "x"}), 400)
    assert_error(await client.get("/v1/resolve/acme/coding@v2147483648"), 400)
    assert_error(await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2**31}), 422)
    assert_error(await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2**80}), 422)
    assert_error(await client.delete(f"/v1/tokens/{2**63}"), 422)
    assert_error(await client.post("/v1/admin/gc", params={"grace_seconds": "inf"}), 422)
    assert_error(await publish(client, model, seed=1, parent="99999999999"), 400)
    r = await client.put("/v1/serving-profiles/big", json={
        "base_model": f"{model.name}@{model.revision}", "engine": "vllm", "max_lora_rank": 8,
        "max_loras": 2**40})
    assert_error(r, 422)


async def test_characters_postgres_refuses(client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model)
    assert (await publish(client, model)).status_code == 201
    for key in ("q", "tag", "base"):
        assert_error(await client.get("/v1/adapters", params={key: "co\x00de"}), 400)
    assert_error(await client.get("/v1/resolve/acme/coding@v1",
                                  params={"profile": "sm\x00all"}), 400)
    assert_error(await client.get(f"{ADAPTER}/aliases/st%00able/history"), 400)
    assert_error(await client.post(f"{ADAPTER}/versions/1/yank",
                                   json={"reason": "bad\u0000"}), 422)
    assert_error(await client.post("/v1/tokens", json={"name": "n\u0000", "scopes": ["read"]}),
                 422)
    assert_error(await publish(client, model, seed=2, source="s3://x\x00"), 400)
    assert_error(await publish(client, model, seed=2, labels='{"team": "a\\u0000"}'), 400)
    assert_error(await publish(client, model, seed=2, base=f"{model.name}@r\x001"), 400)
    body = {**model.base_body(), "revision": "r9", "config": {**model.base_body()["config"],
                                                                "note": "x\u0000"}}
    assert_error(await client.post("/v1/base-models", json=body), 400)
    body["config"] = {**model.base_body()["config"], "big": 2**70}
    assert_error(await client.post("/v1/base-models", json=body), 400)
    text = json.dumps({**model.base_body(), "revision": "r8"})
    raw = text.replace('"config": {', '"config": {"x": "\\ud800", ', 1)
    assert raw != text
    assert_error(await client.post("/v1/base-models", content=raw,
                                   headers={"content-type": "application/json"}), 400, 422)
    r = await client.put("/v1/serving-profiles/p", json={
        "base_model": f"{model.name}@{model.revision}", "engine": "vllm\u0000",
        "max_lora_rank": 8})
    assert_error(r, 422)


def _blob_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize("config_text", [
    '{"peft_type": "LORA", "r": 8, "lora_alpha": NaN}',
    '{"peft_type": "LORA", "r": 8, "lora_alpha": Infinity}',
    '{"peft_type": "LORA", "r": 8, "x": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"peft_type": "LORA", "r": 8, "x": "\\u0000"}',
])
async def test_config_refusals_leave_no_files(client: httpx.AsyncClient, model: Model,
                                              tmp_path: Path, config_text: str) -> None:
    await setup_base(client, model)
    cfg, weights = model.adapter(seed=5)
    good = json.loads(cfg)
    text = config_text.replace('"peft_type": "LORA", "r": 8',
                               json.dumps(good)[1:-1])
    before = _blob_files(tmp_path / "blobs")
    r = await client.post(f"{ADAPTER}/versions", files=model.files((text.encode(), weights)))
    body = assert_error(r, 400)
    assert body["error"] == "InvalidFile"
    assert _blob_files(tmp_path / "blobs") == before
    assert (await client.get(ADAPTER)).status_code == 404


async def test_deeply_nested_request_bodies(client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model)
    deep = "[" * 100_000 + "]" * 100_000
    r = await client.post("/v1/tokens", content='{"name": "x", "scopes": ' + deep + "}",
                          headers={"content-type": "application/json"})
    assert_error(r, 400, 422)
    body = {**model.base_body(), "revision": "r7", "config": {
        **model.base_body()["config"], "x": json.loads("[" * 300 + "]" * 300)}}
    assert_error(await client.post("/v1/base-models", json=body), 400)
    assert_error(await publish(client, model, labels="[" * 5000 + "]" * 5000), 400)


@pytest.fixture
async def both_paths(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                                         httpx.AsyncClient]]:
    """Clients on the same app: at the root, and under a root path (as behind a proxy that
    strips ``/catalog``); unexpected exceptions come back as responses."""
    app = create_app(CatalogSettings(db_url=db_url, blob_url=f"file://{tmp_path / 'blobs'}",
                                     auth="off", pool_size=4))
    async with app.router.lifespan_context(app):
        root = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                 base_url="http://catalog.test")
        mounted = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False,
                                          root_path="/catalog"),
            base_url="http://catalog.test/catalog")
        async with root, mounted:
            yield root, mounted


async def test_hot_reads_answer_alike_under_a_root_path(
        both_paths: tuple[httpx.AsyncClient, httpx.AsyncClient], model: Model) -> None:
    root, mounted = both_paths
    await setup_base(root, model)
    assert (await publish(root, model, alias="stable")).status_code == 201
    probes = [("/v1/adapters", {"cursor": c}, 400) for c in BAD_CURSORS[:4]] + [
        ("/v1/adapters", {"limit": "0"}, 400), ("/v1/adapters", {"limit": "501"}, 400),
        ("/v1/adapters", {"limit": "x"}, 422), ("/v1/adapters", {"limit": "9" * 30}, 400),
        ("/v1/adapters", {"limit": ""}, 422), ("/v1/adapters", {"limit": "2"}, 200),
        ("/v1/adapters", {"namespace": "acme\n"}, 400), ("/v1/adapters", {"q": "\x00"}, 400),
        ("/v1/adapters", {"namespace": "acme"}, 200),
        ("/v1/resolve/acme/coding@stable", {}, 200),
        ("/v1/resolve/acme/coding@stable%0A", {}, 400),
        ("/v1/resolve/acme/coding@v99999999999", {}, 400),
        ("/v1/resolve/acme/nope@v1", {}, 404),
        ("/v1/resolve/acme/coding@v1", {"profile": "nope"}, 404),
        ("/v1/resolve/acme/coding@v1", {"profile": "\x00"}, 400),
    ]
    for path, params, status in probes:
        a, b = await root.get(path, params=params), await mounted.get(path, params=params)
        assert a.status_code == b.status_code == status, (path, params, a.text, b.text)
        if status == 200:
            assert a.json() == b.json(), (path, params)
        else:
            assert assert_error(a, status) == assert_error(b, status), (path, params)
    limit = (await root.get("/v1/adapters", params={"limit": "x"})).json()
    assert limit == {"error": "ValidationError", "detail": "query.limit: Input should be a "
                     "valid integer, unable to parse string as an integer"}
    assert (await mounted.get("/v1/nope")).json() == {
        "error": "NotFound", "detail": "no such path /catalog/v1/nope"}


async def test_unexpected_failures_keep_the_error_shape(
        both_paths: tuple[httpx.AsyncClient, httpx.AsyncClient],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mol_catalog.profiles import service

    async def broken(*args: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service, "list_profiles", broken)
    for client in both_paths:
        r = await client.get("/v1/serving-profiles")
        assert r.status_code == 500
        assert r.json() == {"error": "InternalError",
                            "detail": "internal error (see the catalog's log)"}
        v = await client.post("/v1/tokens", json={"name": 3})
        assert v.status_code == 422
        assert v.json()["error"] == "ValidationError"


async def test_base_models_with_absurd_layer_counts(client: httpx.AsyncClient,
                                                    model: Model) -> None:
    body = model.base_body()
    config = {k: v for k, v in body["config"].items() if k != "num_hidden_layers"}
    weight = body["tensors"]["model.layers.0.mlp.up_proj.weight"]
    far = {**body, "config": config, "tensors": {
        **body["tensors"], f"model.layers.{10**23}.mlp.up_proj.weight": weight}}
    assert_error(await client.post("/v1/base-models", json=far), 400)
    many = {**body, "config": {**body["config"], "num_hidden_layers": 2**62}}
    assert_error(await client.post("/v1/base-models", json=many), 400)
    assert_error(await client.get(f"/v1/base-models/{model.name}"), 404)
