"""Bad input gets a clear error and stores nothing (SQLite and Postgres)."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import httpx
import numpy as np
import pytest

URL = "/v1/adapters/acme/bad/versions"


@pytest.fixture
async def ready(client: httpx.AsyncClient, model: Any) -> httpx.AsyncClient:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    return client


async def assert_nothing_stored(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/adapters/acme/bad")).status_code == 404
    assert [e for e in (await client.get("/v1/events")).json()["items"]
            if e["type"] == "version.published"] == []


def header_only(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


@pytest.mark.parametrize(("weights", "needle"), [
    (b"\x01\x02", "truncated"),
    (struct.pack("<Q", 10_000) + b"{}", "header length"),
    (header_only(b"not json"), "JSON"),
])
async def test_malformed_safetensors_is_400(ready: httpx.AsyncClient, model: Any,
                                            weights: bytes, needle: str) -> None:
    cfg, _ = model.adapter()
    r = await ready.post(URL, files=model.files((cfg, weights)))
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "InvalidFile"
    assert needle.lower() in r.json()["detail"].lower()
    await assert_nothing_stored(ready)


async def test_config_problems_are_400(ready: httpx.AsyncClient, model: Any) -> None:
    _, weights = model.adapter()
    r = await ready.post(URL, files=model.files((b"{nope", weights)))
    assert r.status_code == 400
    assert "adapter_config.json" in r.json()["detail"]
    r = await ready.post(URL, files=model.files((b'{"peft_type": "LORA"}', weights)))
    assert r.status_code == 400
    assert "'r'" in r.json()["detail"]
    only = {"adapter_model.safetensors": ("adapter_model.safetensors", weights)}
    r = await ready.post(URL, files=only)
    assert r.status_code == 400
    assert "adapter_config.json" in r.json()["detail"]
    await assert_nothing_stored(ready)


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"config": {"use_dora": True}}, "dora"),
    ({"config": {"modules_to_save": ["lm_head"]}}, "modules_to_save"),
    ({"config": {"bias": "all"}}, "bias"),
    ({"config": {"peft_type": "IA3"}}, "peft_type"),
    ({"layers": 3}, "layer_out_of_range"),
    ({"extra": {"base_model.model.model.layers.0.self_attn.q_proj.weight":
                np.zeros((64, 64), np.float32)}}, "modules_to_save"),
    ({"extra": {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias":
                np.zeros((64,), np.float32)}}, None),
])
async def test_incompatible_with_base_is_422(ready: httpx.AsyncClient, model: Any,
                                            kwargs: dict[str, Any], code: str | None) -> None:
    r = await ready.post(URL, files=model.files(model.adapter(**kwargs)))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "Incompatible"
    assert body["reasons"]
    if code is not None:
        assert code in [x["code"] for x in body["reasons"]], body
    await assert_nothing_stored(ready)


@pytest.mark.parametrize("other", [
    {"kv_heads": 4},    # a non-GQA adapter (k/v as wide as q) on the GQA base
    {"hidden": 128},    # another hidden size
    {"layers": 4},      # more layers than the base
])
async def test_shapes_of_another_model_are_422(ready: httpx.AsyncClient, model: Any,
                                              other: dict[str, int]) -> None:
    foreign = dataclasses.replace(model, **other)
    pair = foreign.adapter(modules=("q_proj", "k_proj", "v_proj"))
    r = await ready.post(URL, files=model.files(pair), data={"base": "tiny-llama@r1"})
    assert r.status_code == 422, r.text
    codes = {x["code"] for x in r.json()["reasons"]}
    assert codes & {"shape_mismatch", "layer_out_of_range"}, codes
    await assert_nothing_stored(ready)


async def test_unknown_base_and_invalid_names(ready: httpx.AsyncClient, model: Any) -> None:
    pair = model.adapter()
    r = await ready.post(URL, files=model.files(pair), data={"base": "ghost@r9"})
    assert r.status_code == 400
    assert r.json()["error"] == "UnknownBaseModel"
    ghost = model.adapter(config={"base_model_name_or_path": "org/ghost"})
    r = await ready.post(URL, files=model.files(ghost))
    assert r.status_code == 400
    assert "ghost" in r.json()["detail"]
    for bad in ("/v1/adapters/Acme/x/versions", "/v1/adapters/acme/..%2F..%2Fetc/versions",
                "/v1/adapters/acme/-x/versions"):
        r = await ready.post(bad, files=model.files(pair))
        assert r.status_code in (400, 404), (bad, r.text)
        assert r.json()["error"] in ("InvalidName", "NotFound")
    r = await ready.post(URL, files=model.files(pair), data={"tags": "Bad Tag"})
    assert r.status_code == 400
    r = await ready.post(URL, files=model.files(pair), data={"labels": "[1]"})
    assert r.status_code == 400
    r = await ready.post(URL, files=model.files(pair), data={"parent": "7"})
    assert r.status_code == 400
    await assert_nothing_stored(ready)


async def test_upload_limit_is_413_also_when_streamed(make_client: Any, model: Any) -> None:
    client = await make_client(max_upload_bytes=20_000)
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    pair = model.adapter(rank=16, modules=("q_proj", "k_proj", "v_proj", "o_proj"))
    assert len(pair[1]) > 20_000
    r = await client.post(URL, files=model.files(pair))
    assert r.status_code == 413
    assert r.json()["error"] == "PayloadTooLarge"
    # the same body sent chunked (no Content-Length): stopped while streaming
    request = client.build_request("POST", URL, files=model.files(pair))
    body = request.read()

    async def chunks() -> Any:
        for i in range(0, len(body), 4096):
            yield body[i:i + 4096]

    headers = {"content-type": request.headers["content-type"]}
    r = await client.post(URL, content=chunks(), headers=headers)
    assert r.status_code == 413
    assert (await client.get("/v1/adapters/acme/bad")).status_code == 404
    small = await client.post(URL, files=model.files(model.adapter(rank=2,
                                                                    modules=("q_proj",))))
    assert small.status_code == 201, small.text
    metrics = (await client.get("/metrics")).text
    assert 'mol_catalog_publishes_total{result="too_large"} 2.0' in metrics


async def test_metrics_count_routes_and_rejections(ready: httpx.AsyncClient, model: Any) -> None:
    await ready.post(URL, files=model.files(model.adapter(config={"use_dora": True})))
    await ready.get("/v1/resolve/acme/x@v1")
    text = (await ready.get("/metrics")).text
    assert 'mol_catalog_compat_rejections_total{reason="dora"} 1.0' in text
    assert 'mol_catalog_publishes_total{result="incompatible"} 1.0' in text
    assert ('mol_catalog_requests_total{code="404",route="/v1/resolve/{ns}/{name_ref}"} 1.0'
            in text)
    assert 'mol_catalog_request_duration_seconds_count{route="/v1/base-models"}' in text
