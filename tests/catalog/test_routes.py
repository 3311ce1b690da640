"""One route table: the hot GETs are routes like any other, and whatever route is added to
the app, later included, is counted by the middleware and answers in the catalog's error
shape without doing anything for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from mol_catalog.app import create_app
from mol_catalog.errors import Conflict
from mol_catalog.openapi import LeanRoute
from mol_catalog.settings import CatalogSettings

later = APIRouter()


@later.get("/v1/later/{thing}")
async def later_route(thing: str, count: int = 1) -> dict[str, Any]:
    if thing == "conflict":
        raise Conflict(f"{thing} conflicts", thing=thing)
    if thing == "boom":
        raise RuntimeError("the later route failed")
    return {"thing": thing, "count": count}


@pytest.fixture
async def app_and_client(tmp_path: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(CatalogSettings(db_url=f"sqlite:///{tmp_path / 'c.db'}",
                                     blob_url=f"file://{tmp_path / 'blobs'}", auth="off"))
    app.include_router(later)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://c.test") as client:
            yield app, client


async def test_a_route_added_later_is_counted_and_answers_errors_in_shape(
        app_and_client: tuple[FastAPI, httpx.AsyncClient],
        caplog: pytest.LogCaptureFixture) -> None:
    _, client = app_and_client
    ok = await client.get("/v1/later/x", params={"count": "3"})
    assert ok.status_code == 200
    assert ok.json() == {"thing": "x", "count": 3}
    conflict = await client.get("/v1/later/conflict")
    assert conflict.status_code == 409
    assert conflict.json() == {"error": "Conflict", "detail": "conflict conflicts",
                               "thing": "conflict"}
    invalid = await client.get("/v1/later/x", params={"count": "many"})
    assert invalid.status_code == 422
    assert invalid.json() == {"error": "ValidationError", "detail": "query.count: Input "
                              "should be a valid integer, unable to parse string as an integer"}
    boom = await client.get("/v1/later/boom")
    assert boom.status_code == 500
    assert boom.json() == {"error": "InternalError",
                           "detail": "internal error (see the catalog's log)"}
    assert "the later route failed" in caplog.text  # logged, not sent
    wrong = await client.post("/v1/later/x")
    assert wrong.status_code == 405
    assert wrong.json() == {"error": "MethodNotAllowed",
                            "detail": "method POST not allowed on /v1/later/x"}
    metrics = (await client.get("/metrics")).text
    for code, count in (("200", 1), ("409", 1), ("422", 1), ("500", 1), ("405", 1)):
        assert (f'mol_catalog_requests_total{{code="{code}",route="/v1/later/{{thing}}"}} '
                f'{count}.0') in metrics, code
    assert 'mol_catalog_request_duration_seconds_count{route="/v1/later/{thing}"} 5.0' \
        in metrics


async def test_unmatched_paths_are_counted_once_under_one_label(
        app_and_client: tuple[FastAPI, httpx.AsyncClient]) -> None:
    _, client = app_and_client
    for path in ("/nope", "/v1/resolve/acme", "/v1/adapters/acme/x/y/z"):
        r = await client.get(path)
        assert r.status_code == 404
        assert r.json() == {"error": "NotFound", "detail": f"no such path {path}"}
    metrics = (await client.get("/metrics")).text
    assert 'mol_catalog_requests_total{code="404",route="unmatched"} 3.0' in metrics


async def test_hot_reads_are_routes_of_the_one_table_and_documented(
        app_and_client: tuple[FastAPI, httpx.AsyncClient]) -> None:
    app, client = app_and_client
    lean = [r for r in app.routes if isinstance(r, LeanRoute)]
    assert sorted(r.path for r in lean) == ["/v1/adapters", "/v1/resolve/{ns}/{name_ref}"]
    spec = (await client.get("/openapi.json")).json()
    listing = spec["paths"]["/v1/adapters"]["get"]
    assert listing["operationId"] == "list_adapters_v1_adapters_get"
    limit = next(p for p in listing["parameters"] if p["name"] == "limit")
    assert limit["schema"] == {"type": "integer", "default": 50, "minimum": 1,
                               "maximum": 500, "title": "Limit"}
    resolve = spec["paths"]["/v1/resolve/{ns}/{name_ref}"]["get"]
    assert [p["name"] for p in resolve["parameters"]] == ["ns", "name_ref", "profile"]
    assert resolve["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ResolveOut"}
    assert resolve["responses"]["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"}
