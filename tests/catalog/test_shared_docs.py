"""Configs and shape maps that many versions share are stored once (shared_docs)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import create_engine, text

from mol_catalog.db import sync_url
from mol_catalog.shared_docs import canonical, digest_of


def _docs(db_url: str) -> dict[str, int]:
    """digest -> versions referencing it (as config or as shape map)."""
    engine = create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            stored = {r[0] for r in conn.execute(text("SELECT digest FROM shared_docs"))}
            refs = conn.execute(text(
                "SELECT d, count(*) FROM (SELECT config_digest AS d FROM versions UNION ALL "
                "SELECT tensors_digest FROM versions) r GROUP BY d")).all()
    finally:
        engine.dispose()
    counts = {str(d): int(n) for d, n in refs}
    return {d: counts.get(d, 0) for d in stored}


def test_canonical_json_ignores_key_order_and_whitespace() -> None:
    assert canonical({"b": [1, 2], "a": {"y": 1, "x": 2}}) == b'{"a":{"x":2,"y":1},"b":[1,2]}'
    assert digest_of({"r": 8, "a": 1}) == digest_of({"a": 1, "r": 8})
    assert digest_of({"r": 8}) != digest_of({"r": 16})


async def test_concurrent_publishes_share_one_row_per_document(
        make_client: Any, model: Any, db_url: str) -> None:
    clients = [await make_client() for _ in range(4)]
    assert (await clients[0].post("/v1/base-models", json=model.base_body())).status_code == 201
    # Eight adapters, same recipe (config and shapes), different weights, all at once.
    results = await asyncio.gather(*[
        c.post(f"/v1/adapters/acme/a{i}{j}/versions",
               files=model.files(model.adapter(seed=10 * i + j)))
        for i, c in enumerate(clients) for j in range(2)])
    assert [r.status_code for r in results] == [201] * 8, [r.text for r in results]
    assert sorted(_docs(db_url).values()) == [8, 8]
    # Another rank: its own config and shape map, the first two untouched.
    r = await clients[0].post("/v1/adapters/acme/a00/versions",
                              files=model.files(model.adapter(rank=16, seed=99)))
    assert r.status_code == 201, r.text
    assert sorted(_docs(db_url).values()) == [1, 1, 8, 8]

    # A profile declared after the publishes is judged from the shared documents.
    r = await clients[1].put("/v1/serving-profiles/tight", json={
        "base_model": "tiny-llama", "engine": "vllm==0.32.0", "max_lora_rank": 8,
        "supported_modules": ["self_attn.q_proj"]})
    assert r.status_code == 201, r.text
    v1 = (await clients[2].get("/v1/resolve/acme/a00@v1", params={"profile": "tight"})).json()
    v2 = (await clients[2].get("/v1/resolve/acme/a00@v2", params={"profile": "tight"})).json()
    assert [x["code"] for x in v1["verdict"]["reasons"]] == ["unsupported_module"]
    assert sorted(x["code"] for x in v2["verdict"]["reasons"]) == ["rank_above_max",
                                                                   "unsupported_module"]
    detail = (await clients[3].get("/v1/adapters/acme/a00/versions/2")).json()
    assert detail["rank"] == 16
    assert detail["verdicts"]["tight"] == v2["verdict"]
    assert "config_digest" not in detail
    assert "tensors_digest" not in detail
