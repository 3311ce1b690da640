"""Every listing shape pages to exactly what a brute-force filter of all adapters gives.

A search scans the index of its tag, namespace or base (or all adapters) in key order for
a window of entries, then hands over to the trigram index; a tag listing walks the tag's
rows from the cursor. Whatever the window, whatever the name sample guesses, the pages of
each shape concatenate to the filtered list in id order, each adapter exactly once:
checked on both backends for text search with a tag, a namespace or a base (and pairs of
them), and for keyset pages of a tag alone and with another filter.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest

from tests.catalog.test_search_window import pages

N = 30
TERMS = ("COMMON", "rarew", "n0", "mon-", "absent")


def _word(i: int) -> str:
    return "rareword" if i == 23 else "common" if i % 3 else "other"


@pytest.fixture
async def everything(make_client: Any, model: Any) -> list[dict[str, Any]]:
    """N adapters on two bases, in two namespaces, tagged red and/or blue, in id order.
    Adapter 4's tags change after publishing (its tag rows are written again)."""
    client: httpx.AsyncClient = await make_client()
    other = dataclasses.replace(model, name="other-base")
    for base in (model, other):
        assert (await client.post("/v1/base-models", json=base.base_body())).status_code == 201
    for i in range(N):
        base = other if i % 4 == 0 else model
        ns = "acme" if i % 3 == 0 else "beta"
        tags = ",".join(t for t, on in (("red", i % 2 == 0), ("blue", i % 5 < 3)) if on)
        r = await client.post(f"/v1/adapters/{ns}/n{i:02d}-{_word(i)}/versions",
                              files=model.files(base.adapter(seed=i)),
                              data={"base": f"{base.name}@r1", "tags": tags})
        assert r.status_code == 201, r.text
    r = await client.post("/v1/adapters/beta/n04-common/versions",
                          files=model.files(other.adapter(seed=99)),
                          data={"base": "other-base@r1", "tags": "blue"})
    assert r.status_code == 201, r.text
    r = await client.get("/v1/adapters", params={"limit": 500})
    items: list[dict[str, Any]] = r.json()["items"]
    assert len(items) == N
    return items


def _expected(items: list[dict[str, Any]], **f: str) -> list[str]:
    return [it["adapter"] for it in items
            if ("q" not in f or f["q"].lower() in it["adapter"])
            and ("tag" not in f or f["tag"] in it["tags"])
            and ("namespace" not in f or it["namespace"] == f["namespace"])
            and ("base" not in f or it["base"].partition("@")[0] == f["base"])]


SEARCHES = ({"tag": "red"}, {"namespace": "acme"}, {"base": "other-base"},
            {"tag": "blue", "namespace": "beta"}, {"tag": "red", "base": "tiny-llama"},
            {"namespace": "acme", "base": "tiny-llama"})


# sample 0: every term scanned for first; 1: one name, most terms taken as rare (wrongly
# for "common"); 4000: the whole table, every guess right.
@pytest.mark.parametrize(("window", "sample"), [(1, 4000), (3, 0), (4, 1), (7, 4000),
                                                (0, 4000), (20_000, 4000)])
async def test_searches_under_filters_page_exactly(make_client: Any,
                                                   everything: list[dict[str, Any]],
                                                   window: int, sample: int) -> None:
    client: httpx.AsyncClient = await make_client(search_window=window, search_sample=sample)
    for filters in SEARCHES:
        for term in TERMS:
            expected = _expected(everything, q=term, **filters)
            for limit in (1, 3):
                got = await pages(client, limit, q=term, **filters)
                assert got == expected, (filters, term, limit)
    assert len(_expected(everything, q="common", tag="red")) > 3  # windows had work to do


async def test_tag_pages_from_a_cursor(make_client: Any,
                                       everything: list[dict[str, Any]]) -> None:
    """Keyset pages of a tag (alone, with a namespace, with a base) from every cursor."""
    client: httpx.AsyncClient = await make_client()
    for filters in ({"tag": "red"}, {"tag": "blue"}, {"tag": "blue", "namespace": "acme"},
                    {"tag": "red", "base": "tiny-llama@r1"}, {"tag": "none"}):
        expected = [it["adapter"] for it in everything
                    if filters["tag"] in it["tags"]
                    and it["namespace"] == filters.get("namespace", it["namespace"])
                    and it["base"] == filters.get("base", it["base"])]
        for limit in (1, 2, 5):
            assert await pages(client, limit, **filters) == expected, (filters, limit)
    assert "red" not in next(it for it in everything if it["adapter"] == "beta/n04-common")[
        "tags"]
