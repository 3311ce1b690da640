"""The REST API end to end on SQLite and on Postgres: base models, profiles, publish,
resolve, versions, aliases, yank, listing."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import httpx

Model = Any

ADAPTER = "/v1/adapters/acme/coding"


async def setup_base(client: httpx.AsyncClient, model: Model, max_rank: int = 16) -> None:
    r = await client.post("/v1/base-models", json=model.base_body())
    assert r.status_code == 201, r.text
    r = await client.put("/v1/serving-profiles/small", json={
        "base_model": f"{model.name}@{model.revision}", "engine": "vllm==0.32.0",
        "max_lora_rank": max_rank, "max_loras": 4})
    assert r.status_code == 201, r.text


async def publish(client: httpx.AsyncClient, model: Model, path: str = ADAPTER,
                  **kwargs: object) -> httpx.Response:
    data = {k: str(v) for k, v in kwargs.items() if k not in ("rank", "seed", "modules")}
    pair = model.adapter(rank=int(kwargs.get("rank", 8)),  # type: ignore[call-overload]
                         seed=int(kwargs.get("seed", 0)))  # type: ignore[call-overload]
    return await client.post(f"{path}/versions", files=model.files(pair), data=data)


async def test_base_model_register_is_idempotent(client: httpx.AsyncClient, model: Model) -> None:
    body = model.base_body()
    first = await client.post("/v1/base-models", json=body)
    assert first.status_code == 201
    again = await client.post("/v1/base-models", json=body)
    assert again.status_code == 200
    assert again.json()["created_at"] == first.json()["created_at"]
    other = {**body, "tensors": {**body["tensors"], "model.norm.weight": [65]}}
    conflict = await client.post("/v1/base-models", json=other)
    assert conflict.status_code == 409
    assert conflict.json()["error"] == "Conflict"
    got = (await client.get(f"/v1/base-models/{model.name}")).json()
    assert got["name"] == model.name
    assert [r["revision"] for r in got["revisions"]] == ["r1"]
    assert got["revisions"][0]["tensors"]["lm_head.weight"] == [100, 64]


async def test_publish_resolve_and_verdicts(client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model)
    r = await publish(client, model, alias="stable", tags="code,python", source="s3://runs/1",
                      labels='{"team": "ml"}')
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["adapter"] == "acme/coding"
    assert body["version"] == 1
    assert body["created"] is True
    assert body["verdicts"] == {"small": {"compatible": True, "reasons": []}}
    cfg, weights = model.adapter()
    files_digest = {"adapter_config.json": hashlib.sha256(cfg).hexdigest(),
                    "adapter_model.safetensors": hashlib.sha256(weights).hexdigest()}
    manifest = "".join(f"sha256:{d}  {p}\n" for p, d in sorted(files_digest.items()))
    assert body["digest"] == "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()

    res = await client.get("/v1/resolve/acme/coding@stable", params={"profile": "small"})
    assert res.status_code == 200, res.text
    out = res.json()
    assert out["version"] == 1
    assert out["digest"] == body["digest"]
    assert out["base"] == "tiny-llama@r1"
    assert out["verdict"] == {"compatible": True, "reasons": []}
    by_path = {f["path"]: f for f in out["files"]}
    assert by_path["adapter_model.safetensors"]["size"] == len(weights)
    blob = await client.get(by_path["adapter_model.safetensors"]["url"])
    assert blob.status_code == 200
    assert blob.content == weights
    for ref in ("latest", "v1", body["digest"]):
        again = await client.get(f"/v1/resolve/acme/coding@{ref}")
        assert again.status_code == 200, ref
        assert again.json()["version"] == 1
        assert again.json()["verdict"] is None

    # identical content again -> the existing version
    same = await publish(client, model)
    assert same.status_code == 200
    assert same.json()["created"] is False
    assert same.json()["version"] == 1

    desc = (await client.get(ADAPTER)).json()
    assert desc["aliases"] == {"stable": 1}
    assert desc["tags"] == ["code", "python"]
    assert desc["labels"] == {"team": "ml"}
    assert desc["latest_version"] == 1


async def test_rank_above_profile_is_stored_with_false_verdict(
        client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model, max_rank=8)
    r = await publish(client, model, rank=16)
    assert r.status_code == 201, r.text
    verdict = r.json()["verdicts"]["small"]
    assert verdict["compatible"] is False
    assert [x["code"] for x in verdict["reasons"]] == ["rank_above_max"]
    res = (await client.get("/v1/resolve/acme/coding@v1", params={"profile": "small"})).json()
    assert res["verdict"]["compatible"] is False
    assert "16" in res["verdict"]["reasons"][0]["message"]
    # raising the profile's max rank re-judges lazily on the next resolve
    r = await client.put("/v1/serving-profiles/small", json={
        "base_model": "tiny-llama@r1", "engine": "vllm==0.32.0", "max_lora_rank": 32})
    assert r.status_code == 200
    res = (await client.get("/v1/resolve/acme/coding@v1", params={"profile": "small"})).json()
    assert res["verdict"] == {"compatible": True, "reasons": []}
    unknown = await client.get("/v1/resolve/acme/coding@v1", params={"profile": "nope"})
    assert unknown.status_code == 404


async def test_profile_declared_after_publish_is_judged_on_resolve(
        client: httpx.AsyncClient, model: Model) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    assert (await publish(client, model, rank=16)).status_code == 201
    r = await client.put("/v1/serving-profiles/tight", json={
        "base_model": "tiny-llama", "engine": "vllm==0.32.0", "max_lora_rank": 8,
        "supported_modules": ["self_attn.q_proj"]})
    assert r.status_code == 201, r.text
    res = (await client.get("/v1/resolve/acme/coding@latest", params={"profile": "tight"})).json()
    codes = sorted(x["code"] for x in res["verdict"]["reasons"])
    assert res["verdict"]["compatible"] is False
    assert "rank_above_max" in codes
    assert len(codes) >= 2  # the unsupported v_proj is reported as well


async def test_versions_aliases_yank(client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model)
    for seed in range(3):
        r = await publish(client, model, seed=seed, parent=seed or "")
        assert r.status_code == 201, r.text
        assert r.json()["version"] == seed + 1
    page1 = (await client.get(f"{ADAPTER}/versions", params={"limit": 2})).json()
    assert [v["version"] for v in page1["items"]] == [3, 2]
    assert page1["items"][0]["parent"] == 2
    assert page1["items"][0]["rank"] == 8
    page2 = (await client.get(f"{ADAPTER}/versions",
                              params={"limit": 2, "cursor": page1["next_cursor"]})).json()
    assert [v["version"] for v in page2["items"]] == [1]
    assert page2["next_cursor"] is None

    r = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2})
    assert r.json() == {"alias": "stable", "version": 2, "previous": None,
                        "forced": False, "overridden": None}
    r = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 3})
    assert r.json() == {"alias": "stable", "version": 3, "previous": 2, "forced": False,
                        "overridden": None}
    hist = (await client.get(f"{ADAPTER}/aliases/stable/history")).json()["items"]
    assert [(h["version"], h["previous"]) for h in hist] == [(3, 2), (2, None)]
    reserved = await client.put(f"{ADAPTER}/aliases/latest", json={"version": 1})
    assert reserved.status_code == 400

    blocked = await client.post(f"{ADAPTER}/versions/3/yank", json={"reason": "bad evals"})
    assert blocked.status_code == 409
    assert "stable" in blocked.json()["detail"]
    ok = await client.post(f"{ADAPTER}/versions/1/yank", json={"reason": "leaks data"})
    assert ok.status_code == 200
    assert ok.json()["status"] == "yanked"
    to_yanked = await client.put(f"{ADAPTER}/aliases/old", json={"version": 1})
    assert to_yanked.status_code == 409
    res = (await client.get("/v1/resolve/acme/coding@v1")).json()
    assert res["status"] == "yanked"
    assert res["yank_reason"] == "leaks data"

    await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2})
    r = await client.post(f"{ADAPTER}/versions/3/yank", json={"reason": "x"})
    assert r.status_code == 200
    latest = (await client.get("/v1/resolve/acme/coding@latest")).json()
    assert latest["version"] == 2
    detail = (await client.get(f"{ADAPTER}/versions/v3")).json()
    assert detail["status"] == "yanked"
    assert {f["path"] for f in detail["files"]} == {"adapter_config.json",
                                                    "adapter_model.safetensors"}


async def test_listing_and_search(client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model)
    other = dataclasses.replace(model, name="other-base")
    assert (await client.post("/v1/base-models", json=other.base_body())).status_code == 201
    names = ["alpha-bot", "beta-bot", "gamma-coder", "delta-coder", "eps"]
    for i, n in enumerate(names):
        tags = "bot" if n.endswith("bot") else "coder"
        r = await publish(client, model, path=f"/v1/adapters/team{i % 2}/{n}", seed=i, tags=tags)
        assert r.status_code == 201, r.text
    r = await client.post("/v1/adapters/team0/on-other/versions",
                          files=model.files(other.adapter(seed=9)), data={"base": "other-base@r1",
                                                                     "tags": "bot"})
    assert r.status_code == 201, r.text

    async def collect(**params: str) -> list[str]:
        out: list[str] = []
        cursor = None
        while True:
            q: dict[str, str | int] = {**params, "limit": 2,
                                       **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/v1/adapters", params=q)).json()
            out += [i["adapter"] for i in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    assert len(await collect()) == 6
    assert await collect(tag="bot") == ["team0/alpha-bot", "team1/beta-bot", "team0/on-other"]
    assert await collect(tag="bot", base="tiny-llama") == ["team0/alpha-bot", "team1/beta-bot"]
    assert await collect(tag="bot", base="other-base@r1") == ["team0/on-other"]
    assert await collect(base="tiny-llama@r1", namespace="team0") == [
        "team0/alpha-bot", "team0/gamma-coder", "team0/eps"]
    assert await collect(q="CODER") == ["team0/gamma-coder", "team1/delta-coder"]
    assert await collect(q="%") == []
    item = (await client.get("/v1/adapters", params={"q": "eps"})).json()["items"][0]
    assert item["base"] == "tiny-llama@r1"
    assert item["latest_version"] == 1
    assert item["tags"] == ["coder"]
    bad = await client.get("/v1/adapters", params={"limit": 501})
    assert bad.status_code == 400
    assert (await client.get("/v1/adapters", params={"cursor": "!!"})).status_code == 400


async def test_not_found_and_errors_are_json(client: httpx.AsyncClient, model: Model) -> None:
    r = await client.get("/v1/resolve/acme/none@stable")
    assert r.status_code == 404
    assert r.json()["error"] == "NotFound"
    assert (await client.get("/v1/resolve/acme/none@@x")).status_code == 400
    assert (await client.get("/v1/nowhere")).json()["error"] == "NotFound"
    r = await client.put("/v1/serving-profiles/p", json={"base_model": "ghost@r", "engine": "v",
                                                          "max_lora_rank": 8})
    assert r.status_code == 400
    assert r.json()["error"] == "UnknownBaseModel"
    r = await client.put("/v1/serving-profiles/p", json={"engine": "v"})
    assert r.status_code == 422
    assert r.json()["error"] == "ValidationError"
    assert "base_model" in r.json()["detail"]
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 200
    spec = (await client.get("/openapi.json")).json()
    assert "/v1/resolve/{ns}/{name_ref}" in spec["paths"]
    assert "multipart/form-data" in str(spec["paths"]["/v1/adapters/{ns}/{name}/versions"])
