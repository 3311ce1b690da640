"""Catalog fixtures: the app on SQLite and on Postgres (parametrized), live servers, builders.

- ``backend``: "sqlite" | "postgres"; ``db_url``: a fresh, migrated database of it.
- ``make_client(**settings)``: an :class:`AppClient` on the app (lifespan run), same DB;
  its ``catalog`` is the app's runtime object (caches, the ``after_store`` hook).
- ``client``: ``make_client()`` with auth off and local blobs.
- ``catalog_server``: base URL of a real uvicorn catalog (SQLite + local blobs, auth off).
- ``catalog_server_auth``: a :class:`LiveCatalog` (``url``, ``admin_token``) with auth on.
- ``model``: a tiny GQA Llama shape set; ``model.base_body()`` registers it,
  ``model.adapter(...)`` builds (adapter_config.json bytes, safetensors bytes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from mol_catalog.app import create_app
from mol_catalog.db import migrate
from mol_catalog.deps import Catalog
from mol_catalog.settings import CatalogSettings
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port, stop_process, wait_port
from mol_testkit.postgres import PostgresCluster, fresh_database


@dataclass(frozen=True)
class Model(SyntheticLlama):
    """The synthetic GQA base (mol_testkit.lora) plus publish helpers."""

    def adapter(self, rank: int = 8, modules: tuple[str, ...] = ("q_proj", "v_proj"),
                seed: int = 0, layers: int | None = None, config: dict[str, Any] | None = None,
                extra: dict[str, np.ndarray] | None = None) -> tuple[bytes, bytes]:
        """(adapter_config.json, adapter_model.safetensors) for a LoRA on this base."""
        return self.lora_files(rank, modules, seed=seed, layers=layers, config=config,
                               extra=extra)

    @staticmethod
    def files(pair: tuple[bytes, bytes]) -> dict[str, tuple[str, bytes, str]]:
        """httpx multipart ``files=`` for a publish."""
        cfg, weights = pair
        return {"adapter_config.json": ("adapter_config.json", cfg, "application/json"),
                "adapter_model.safetensors": ("adapter_model.safetensors", weights,
                                              "application/octet-stream")}




@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh database of the backend, migrated to head."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
        url = fresh_database(cluster, "catalog", driver="asyncpg")
    migrate(url)
    return url


class AppClient(httpx.AsyncClient):
    """An in-process client of a started app that also holds the app's ``Catalog`` (made
    by its lifespan), for tests that look at its caches or set its ``after_store`` hook."""

    def __init__(self, app: FastAPI) -> None:
        super().__init__(transport=httpx.ASGITransport(app=app), base_url="http://catalog.test")
        self.catalog: Catalog = app.state.catalog


MakeClient = Callable[..., Awaitable[AppClient]]


@pytest.fixture
async def make_client(db_url: str, tmp_path: Path) -> AsyncIterator[MakeClient]:
    """Factory of in-process clients sharing one database; settings override defaults."""
    async with AsyncExitStack() as stack:

        async def make(**overrides: Any) -> AppClient:
            values: dict[str, Any] = {"db_url": db_url, "blob_url": f"file://{tmp_path/'blobs'}",
                                      "auth": "off", "pool_size": 5}
            values.update(overrides)
            app = create_app(CatalogSettings(**values))
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = AppClient(app)
            await stack.enter_async_context(client)
            return client

        yield make


@pytest.fixture
async def client(make_client: MakeClient) -> httpx.AsyncClient:
    return await make_client()


@dataclass(frozen=True)
class LiveCatalog:
    url: str
    admin_token: str | None
    db_url: str
    blob_dir: Path


def _run_server(tmp: Path, auth: bool, admin_token: str | None) -> Iterator[LiveCatalog]:
    port = free_port()
    db_url = f"sqlite:///{tmp / 'catalog.db'}"
    env = {**os.environ, "MOL_CATALOG_AUTH": "on" if auth else "off"}
    if admin_token:
        env["MOL_CATALOG_ADMIN_TOKEN"] = admin_token
    code = ("from mol_catalog.server import serve; "
            f"serve('127.0.0.1', {port}, {db_url!r}, {('file://' + str(tmp / 'blobs'))!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        wait_port(port, timeout=60)
        yield LiveCatalog(f"http://127.0.0.1:{port}", admin_token, db_url, tmp / "blobs")
    finally:
        stop_process(proc)


@pytest.fixture
def catalog_server(tmp_path: Path) -> Iterator[str]:
    """Base URL of a real uvicorn catalog on SQLite + local blobs, auth off."""
    for live in _run_server(tmp_path, auth=False, admin_token=None):
        yield live.url


@pytest.fixture
def catalog_server_auth(tmp_path: Path) -> Iterator[LiveCatalog]:
    """A real uvicorn catalog with auth on; ``admin_token`` is accepted as admin."""
    yield from _run_server(tmp_path, auth=True, admin_token="mol_" + "a" * 43)
