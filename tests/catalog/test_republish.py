"""Publishing identical content again applies the form's alias, tags and labels."""

from __future__ import annotations

from typing import Any

import httpx


async def test_republish_applies_alias_tags_labels(client: httpx.AsyncClient,
                                                   model: Any) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    pair = model.adapter(seed=1)
    url = "/v1/adapters/acme/a/versions"
    assert (await client.post(url, files=model.files(pair))).status_code == 201
    form = {"alias": "prod", "tags": "code,python", "labels": '{"team": "ml"}'}
    r = await client.post(url, files=model.files(pair), data=form)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["created"], body["version"]) == (False, 1)
    assert body["applied"] == {"alias": "prod", "tags": ["code", "python"],
                               "labels": {"team": "ml"}}
    assert body["changed"] == ["alias", "tags", "labels"]
    adapter = (await client.get("/v1/adapters/acme/a")).json()
    assert (adapter["tags"], adapter["labels"]) == (["code", "python"], {"team": "ml"})
    assert (await client.get("/v1/resolve/acme/a@prod")).json()["version"] == 1
    by_tag = (await client.get("/v1/adapters", params={"tag": "python"})).json()["items"]
    assert [i["adapter"] for i in by_tag] == ["acme/a"]
    history = (await client.get("/v1/adapters/acme/a/aliases/prod/history")).json()["items"]
    assert [h["version"] for h in history] == [1]
    again = (await client.post(url, files=model.files(pair), data=form)).json()
    assert (again["changed"], again["applied"]["alias"]) == ([], "prod")  # nothing to redo

    # an alias may not point at a yanked version, also through a re-publish
    assert (await client.post(url, files=model.files(model.adapter(seed=2)))).status_code == 201
    assert (await client.put("/v1/adapters/acme/a/aliases/prod",
                             json={"version": 2})).status_code == 200
    assert (await client.post("/v1/adapters/acme/a/versions/1/yank",
                              json={"reason": "bad"})).status_code == 200
    refused = await client.post(url, files=model.files(pair), data={"alias": "stable"})
    assert refused.status_code == 200, refused.text
    assert [r["code"] for r in refused.json()["alias_refused"]["reasons"]] == ["yanked"]
    assert "alias" not in refused.json()["applied"]
