"""Substring search: a scan of ids in key order, then the trigram index.

Whatever the window and whatever the name sample guesses (rare terms skip the scan),
pages concatenate to exactly the rows a plain filtered scan gives, in id order: checked
for a common and a rare term, with and without a namespace filter, with windows small
enough that both steps run and samples that guess right and wrong, on both backends.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

N = 24


async def pages(client: httpx.AsyncClient, limit: int, **params: Any) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/adapters", params=query)
        assert r.status_code == 200, r.text
        out += [item["adapter"] for item in r.json()["items"]]
        if (cursor := r.json()["next_cursor"]) is None:
            return out


@pytest.fixture
async def seeded(make_client: Any, model: Any) -> list[str]:
    """N adapters in id order: two in three are ``common``, one is ``rareword``."""
    client: httpx.AsyncClient = await make_client()
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    for i in range(N):
        word = "rareword" if i == 17 else "common" if i % 3 else "other"
        ns = "acme" if i % 2 else "beta"
        r = await client.post(f"/v1/adapters/{ns}/n{i:02d}-{word}/versions",
                              files=model.files(model.adapter(seed=i)))
        assert r.status_code == 201, r.text
    everything = await pages(client, 500)
    assert len(everything) == N
    return everything


# sample 0: every term scanned for first; 1: one name, most terms taken as rare (wrongly
# for "common"); 4000: the whole table, every guess right.
@pytest.mark.parametrize(("window", "sample"), [(1, 4000), (3, 0), (3, 1), (10, 4000),
                                                (0, 4000), (20_000, 1), (20_000, 4000)])
async def test_pages_equal_a_filtered_scan(make_client: Any, seeded: list[str],
                                           window: int, sample: int) -> None:
    client: httpx.AsyncClient = await make_client(search_window=window, search_sample=sample)
    for term in ("COMMON", "RAREW", "n0", "absent"):
        for namespace in (None, "acme"):
            expected = [name for name in seeded if term.lower() in name.lower()
                        and (namespace is None or name.startswith(f"{namespace}/"))]
            extra = {"namespace": namespace} if namespace else {}
            for limit in (1, 2, 5):
                got = await pages(client, limit, q=term, **extra)
                assert got == expected, (term, namespace, limit)
    assert len([n for n in seeded if "common" in n]) == 15  # both phases had work to do
