"""The async catalog client against the real app (SQLite and Postgres), auth on."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mol_catalog.app import create_app
from mol_catalog.settings import CatalogSettings
from mol_platform.clients.catalog import CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_testkit.net import free_port

ADMIN = "mol_" + "b" * 43
Model = Any


@pytest.fixture
async def transport(db_url: str, tmp_path: Path) -> AsyncIterator[httpx.ASGITransport]:
    app = create_app(CatalogSettings(db_url=db_url, blob_url=f"file://{tmp_path / 'blobs'}",
                                     auth="on", admin_token=ADMIN, pool_size=5))
    async with app.router.lifespan_context(app):
        yield httpx.ASGITransport(app=app)


async def test_calls_shapes_and_errors(transport: httpx.ASGITransport, model: Model,
                                       tmp_path: Path) -> None:
    async with AsyncCatalogClient("http://catalog.test", ADMIN, transport=transport) as cat:
        await cat.request("POST", "/v1/base-models", json=model.base_body())
        base = f"{model.name}@{model.revision}"
        profile = await cat.set_profile("small", base_model=base, max_lora_rank=8, max_loras=4,
                                        engine="vllm==0.32.0")
        assert profile.max_lora_rank == 8
        assert (await cat.get_base(model.name)).name == model.name
        for seed in (0, 1):
            cfg, weights = model.adapter(rank=8, seed=seed)
            await cat.request("POST", "/v1/adapters/acme/coding/versions",
                              files=model.files((cfg, weights)))
        moved = await cat.set_alias("acme/coding", "stable", 2)
        assert moved.version == 2

        out = await cat.resolve("acme/coding@stable", profile="small")
        assert out.version == 2
        assert out.verdict is not None
        assert out.verdict.compatible is True
        weights_file = next(f for f in out.files if f.path == "adapter_model.safetensors")
        dest = tmp_path / "w.safetensors"
        assert await cat.download(weights_file.url, dest) == hashlib.sha256(weights).hexdigest()
        assert dest.read_bytes() == weights

        feed = await cat.events(after=0, limit=100)
        assert feed.items
        assert feed.last >= feed.items[-1].id
        assert (await cat.events(after=feed.last)).items == []

        made = await cat.create_token("router", ["read:acme"])
        assert made.token.startswith("mol_")
        assert any(t.id == made.id for t in await cat.list_tokens())
        async with AsyncCatalogClient("http://catalog.test", made.token,
                                      transport=transport) as reader:
            assert (await reader.resolve("acme/coding@v1")).version == 1
            with pytest.raises(CatalogError) as denied:
                await reader.set_alias("acme/coding", "stable", 1)
            assert denied.value.status == 403
        await cat.revoke_token(str(made.id))
        async with AsyncCatalogClient("http://catalog.test", made.token,
                                      transport=transport) as revoked:
            with pytest.raises(CatalogError) as gone:
                await revoked.resolve("acme/coding@v1")
            assert gone.value.status == 401

        with pytest.raises(CatalogError) as missing:
            await cat.resolve("acme/nothing@stable")
        assert missing.value.status == 404
        assert missing.value.error == "NotFound"


async def test_unreachable_catalog_is_status_zero(tmp_path: Path) -> None:
    async with AsyncCatalogClient(f"http://127.0.0.1:{free_port()}", timeout=2) as cat:
        with pytest.raises(CatalogError) as err:
            await cat.resolve("acme/coding@stable")
        assert err.value.status == 0
        with pytest.raises(CatalogError):
            await cat.download("/v1/blobs/sha256/00", tmp_path / "x")


def test_relative_download_urls_join_the_catalog_url() -> None:
    cat = AsyncCatalogClient("http://catalog.example:8080/prefix")
    # Catalog paths are relative to the catalog URL, prefix included.
    assert cat.absolute_url("/v1/blobs/x") == "http://catalog.example:8080/prefix/v1/blobs/x"
    assert cat.absolute_url("v1/blobs/x") == "http://catalog.example:8080/prefix/v1/blobs/x"
    assert cat.absolute_url("https://s3.example/b?sig=1") == "https://s3.example/b?sig=1"


async def test_downloads_send_the_token_only_to_the_catalog(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("Authorization")))
        return httpx.Response(200, content=b"blob")

    async with AsyncCatalogClient("http://catalog.test", ADMIN,
                                  transport=httpx.MockTransport(answer)) as cat:
        await cat.download("/v1/blobs/sha256/ab", tmp_path / "a")
        await cat.download("https://bucket.s3.example/ab?X-Amz-Signature=x", tmp_path / "b")
    assert seen == [("catalog.test", f"Bearer {ADMIN}"), ("bucket.s3.example", None)]


async def test_calls_in_flight_are_bounded(tmp_path: Path) -> None:
    """More calls than ``max_connections`` wait in the client; every one is answered."""
    active = peak = 0

    async def answer(request: httpx.Request) -> httpx.Response:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return httpx.Response(200, json={"items": [], "last": 0})

    async with AsyncCatalogClient("http://catalog.test", ADMIN, max_connections=3,
                                  transport=httpx.MockTransport(answer)) as cat:
        pages = await asyncio.gather(*(cat.events(after=i) for i in range(20)))
        await asyncio.gather(*(cat.download("/v1/blobs/sha256/ab", tmp_path / f"f{i}")
                               for i in range(6)))
    assert len(pages) == 20
    assert peak == 3
