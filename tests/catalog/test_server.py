"""Real uvicorn servers: the embedded default (SQLite, migrated at start) and Postgres with
two workers (factory mode, postgresql+psycopg URL)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mol_testkit.net import free_port, wait_port
from mol_testkit.postgres import PostgresCluster, fresh_database


async def _exercise(url: str, model: Any) -> None:
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.post("/v1/base-models", json=model.base_body())).status_code == 201
        r = await http.post("/v1/adapters/acme/live/versions",
                            files=model.files(model.adapter()), data={"alias": "stable"})
        assert r.status_code == 201, r.text
        for _ in range(4):  # spread over workers
            res = await http.get("/v1/resolve/acme/live@stable")
            assert res.status_code == 200
        weights = next(f for f in res.json()["files"] if f["path"].endswith(".safetensors"))
        assert (await http.get(weights["url"])).content == model.adapter()[1]
        assert (await http.get("/readyz")).status_code == 200
        assert "mol_catalog_requests_total" in (await http.get("/metrics")).text


async def test_embedded_default_server(catalog_server: str, model: Any) -> None:
    await _exercise(catalog_server, model)


@pytest.fixture
def two_worker_server(postgres_cluster: PostgresCluster, tmp_path: Path) -> Iterator[str]:
    url = fresh_database(postgres_cluster, "served", driver="psycopg")
    port = free_port()
    code = ("from mol_catalog.server import serve; "
            f"serve('127.0.0.1', {port}, {url!r}, 'file://{tmp_path}/b', workers=2, auth=False)")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_port(port, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def test_postgres_two_workers(two_worker_server: str, model: Any) -> None:
    await _exercise(two_worker_server, model)
