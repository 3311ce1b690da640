"""Usage roll-ups on both backends: batches counted once, the usage scope, bad input,
listing unused versions, retention pruning by gc and the unused-adapter gauge."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

ADMIN = "mol_" + "u" * 43


async def _publish(client: httpx.AsyncClient, model: Any, *names: str) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    for i, name in enumerate(names):
        r = await client.post(f"/v1/adapters/{name}/versions",
                              files=model.files(model.adapter(seed=i + 1)))
        assert r.status_code == 201, r.text


def _entry(adapter: str, version: int = 1, requests: int = 2, when: datetime | None = None,
           **extra: Any) -> dict[str, Any]:
    return {"adapter": adapter, "version": version, "requests": requests,
            "input_tokens": 10 * requests, "output_tokens": 3 * requests,
            "last_used": (when or datetime.now(UTC)).isoformat(), **extra}


def _batch(*entries: dict[str, Any], batch_id: str | None = None) -> dict[str, Any]:
    return {"batch_id": batch_id or uuid.uuid4().hex, "entries": list(entries)}


async def test_batches_count_once_and_read_back(client: httpx.AsyncClient, model: Any) -> None:
    await _publish(client, model, "acme/used", "acme/idle", "acme/busy")
    body = _batch(_entry("acme/used", requests=2), _entry("acme/used", requests=3),
                  _entry("acme/busy", requests=7), _entry("acme/gone", version=4))
    first = await client.post("/v1/usage", json=body)
    assert first.status_code == 200, first.text
    assert first.json() == {"batch_id": body["batch_id"], "duplicate": False, "counted": 3,
                            "expired": 0, "unknown": ["acme/gone@v4"]}
    again = await client.post("/v1/usage", json=body)  # a retry of the same batch
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["counted"] == 0

    r = await client.get("/v1/adapters/acme/used/usage", params={"days": 7})
    assert r.status_code == 200, r.text
    usage = r.json()
    assert usage["total"]["requests"] == 5  # counted once, not twice
    assert usage["total"]["input_tokens"] == 50
    assert usage["total"]["output_tokens"] == 15
    assert [v["version"] for v in usage["versions"]] == [1]
    assert len(usage["daily"]) == 1
    assert usage["daily"][0]["day"] == datetime.now(UTC).date().isoformat()

    unused = (await client.get("/v1/usage", params={"days": 30, "unused": "true"})).json()
    assert [(i["adapter"], i["version"]) for i in unused["items"]] == [("acme/idle", 1)]
    by_usage = (await client.get("/v1/usage", params={"sort": "usage", "group": "adapter"})
                ).json()
    assert [(i["adapter"], i["requests"]) for i in by_usage["items"]] == [
        ("acme/busy", 7), ("acme/used", 5), ("acme/idle", 0)]
    assert by_usage["items"][0]["version"] is None
    page = (await client.get("/v1/usage", params={"limit": 2})).json()
    assert len(page["items"]) == 2
    assert page["next_offset"] == 2
    rest = (await client.get("/v1/usage", params={"limit": 2, "offset": 2})).json()
    assert len(rest["items"]) == 1
    assert rest["next_offset"] is None

    metrics = (await client.get("/metrics")).text
    assert 'mol_catalog_unused_adapters{window="30d"} 1.0' in metrics
    assert 'mol_catalog_usage_batches_total{result="duplicate"} 1.0' in metrics


async def test_usage_scope(make_client: Any, model: Any) -> None:
    admin = await make_client(auth="on", admin_token=ADMIN)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    await _publish(admin, model, "acme/coding")
    tokens = {}
    for name, scopes in (("router", ["usage:acme"]), ("reader", ["read:acme"]),
                         ("everyone", ["usage"]), ("publisher", ["publish:acme"])):
        r = await admin.post("/v1/tokens", json={"name": name, "scopes": scopes})
        assert r.status_code == 201, r.text
        tokens[name] = {"Authorization": f"Bearer {r.json()['token']}"}

    batch = _batch(_entry("acme/coding"))
    r = await admin.post("/v1/usage", json=batch, headers=tokens["reader"])
    assert r.status_code == 403
    assert "usage:acme" in r.json()["detail"]
    r = await admin.post("/v1/usage", json=batch, headers=tokens["publisher"])
    assert r.status_code == 403
    r = await admin.post("/v1/usage", json=_batch(_entry("other/x")), headers=tokens["router"])
    assert r.status_code == 403
    r = await admin.post("/v1/usage", json=batch, headers=tokens["router"])
    assert r.status_code == 200
    assert r.json()["counted"] == 1
    r = await admin.post("/v1/usage", json=_batch(_entry("other/x")), headers=tokens["everyone"])
    assert r.status_code == 200
    assert r.json()["unknown"] == ["other/x@v1"]

    for who in ("router", "everyone"):  # usage scopes read and publish nothing
        assert (await admin.get("/v1/adapters/acme/coding", headers=tokens[who])
                ).status_code == 403
        assert (await admin.get("/v1/resolve/acme/coding@v1", headers=tokens[who])
                ).status_code == 403
        assert (await admin.get("/v1/adapters/acme/coding/usage", headers=tokens[who])
                ).status_code == 403
        assert (await admin.get("/v1/usage", params={"namespace": "acme"}, headers=tokens[who])
                ).status_code == 403
        r = await admin.post("/v1/adapters/acme/coding/versions", headers=tokens[who],
                             files=model.files(model.adapter(seed=9)))
        assert r.status_code == 403
    r = await admin.get("/v1/adapters/acme/coding/usage", headers=tokens["reader"])
    assert r.status_code == 200
    assert r.json()["total"]["requests"] == 2
    r = await admin.get("/v1/usage", headers=tokens["reader"])  # one namespace: implied
    assert r.status_code == 200
    assert r.json()["items"][0]["adapter"] == "acme/coding"


@pytest.mark.parametrize(("change", "status"), [
    ({"requests": 0}, 422),
    ({"requests": -1}, 422),
    ({"requests": 10**9 + 1}, 422),
    ({"input_tokens": 2**63}, 422),
    ({"output_tokens": -5}, 422),
    ({"version": 0}, 422),
    ({"version": 2**31}, 422),
    ({"adapter": "acme"}, 422),
    ({"adapter": "acme/../x"}, 422),
    ({"adapter": "Acme/x"}, 422),
    ({"last_used": "2026-01-01T00:00:00"}, 422),  # no time zone
    ({"last_used": "9999-12-31T23:59:59-14:00"}, 422),  # past the calendar in UTC
    ({"colour": "red"}, 422),
])
async def test_bad_entries(client: httpx.AsyncClient, model: Any, change: dict[str, Any],
                           status: int) -> None:
    await _publish(client, model, "acme/coding")
    r = await client.post("/v1/usage", json=_batch({**_entry("acme/coding"), **change}))
    assert r.status_code == status, r.text
    assert r.json()["detail"]
    usage = (await client.get("/v1/adapters/acme/coding/usage")).json()
    assert usage["total"]["requests"] == 0  # nothing half-written


async def test_bad_batches_and_windows(client: httpx.AsyncClient, model: Any) -> None:
    await _publish(client, model, "acme/coding")
    for body in ({"batch_id": "short", "entries": [_entry("acme/coding")]},
                 {"batch_id": "x" * 65, "entries": [_entry("acme/coding")]},
                 {"batch_id": "bad id!!", "entries": [_entry("acme/coding")]},
                 {"batch_id": uuid.uuid4().hex, "entries": []},
                 {"batch_id": uuid.uuid4().hex, "entries": [_entry("acme/coding")] * 1001}):
        assert (await client.post("/v1/usage", json=body)).status_code == 422
    r = await client.get("/v1/usage", params={"days": 400})  # retention is 90 days
    assert r.status_code == 200
    assert r.json()["days"] == 90
    ahead = await client.post("/v1/usage", json=_batch(_entry(
        "acme/coding", when=datetime(2999, 1, 1, tzinfo=UTC))))  # a clock far ahead
    assert ahead.json()["counted"] == 1
    usage = (await client.get("/v1/adapters/acme/coding/usage")).json()
    assert usage["daily"][0]["day"] == datetime.now(UTC).date().isoformat()
    assert datetime.fromisoformat(usage["total"]["last_used"]) <= datetime.now(UTC)
    assert (await client.get("/v1/usage", params={"days": 0})).status_code == 422
    assert (await client.get("/v1/usage", params={"namespace": "a..b"})).status_code == 400
    assert (await client.get("/v1/adapters/acme/nope/usage")).status_code == 404


async def test_retention_pruned_by_gc(make_client: Any, model: Any) -> None:
    long = await make_client(usage_retention_days=400)
    await _publish(long, model, "acme/coding")
    old = datetime.now(UTC) - timedelta(days=100)
    r = await long.post("/v1/usage", json=_batch(_entry("acme/coding", when=old),
                                                 _entry("acme/coding", requests=1)))
    assert r.json()["counted"] == 2
    assert len((await long.get("/v1/adapters/acme/coding/usage", params={"days": 400})
                ).json()["daily"]) == 2

    short = await make_client(usage_retention_days=30)
    r = await short.post("/v1/usage", json=_batch(_entry("acme/coding", when=old)))
    assert r.json() == {**r.json(), "counted": 0, "expired": 1}  # outside the window
    gc = await short.post("/v1/admin/gc")
    assert gc.status_code == 200, gc.text
    assert gc.json()["usage_rows_pruned"] == 1
    daily = (await long.get("/v1/adapters/acme/coding/usage", params={"days": 400})
             ).json()["daily"]
    assert [d["requests"] for d in daily] == [1]  # today's row stays


def test_mol_up_mints_the_router_a_read_and_usage_token(catalog_server_auth: Any) -> None:
    """``mol up`` gives its router ``read`` + ``usage``, not the admin token; a second run
    revokes the first run's token."""
    from mol_platform.apps.up.stack import ROUTER_TOKEN_NAME, mint_router_token
    from mol_platform.clients.catalog import CatalogClient

    url, admin = catalog_server_auth.url, catalog_server_auth.admin_token
    first = mint_router_token(url, admin)
    second = mint_router_token(url, admin)
    with CatalogClient(url, admin) as client:
        live = client.list_tokens(ROUTER_TOKEN_NAME, active=True)
    assert [(t.name, t.scopes) for t in live] == [(ROUTER_TOKEN_NAME, ["read", "usage"])]
    with httpx.Client(base_url=url) as http:
        batch = _batch(_entry("acme/none"))
        r = http.post("/v1/usage", json=batch, headers={"Authorization": f"Bearer {first}"})
        assert r.status_code == 401  # revoked
        r = http.post("/v1/usage", json=batch, headers={"Authorization": f"Bearer {second}"})
        assert r.status_code == 200, r.text
        assert http.post("/v1/admin/gc", headers={"Authorization": f"Bearer {second}"}
                         ).status_code == 403
