"""The resolver plugin's logic against a real catalog process, without vLLM: immutable
names only, the profile's verdict, digest-keyed cache, offline loads, never raising."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from mol_platform.apps.up.seed import seed_demo
from mol_platform.apps.vllm_plugin import register
from mol_platform.apps.vllm_plugin.resolver import MolResolver, lora_id
from mol_platform.apps.vllm_plugin.settings import ResolverSettings
from mol_platform.clients.catalog import CatalogClient
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract.catalog_models import Resolved
from mol_testkit.catalog import LiveCatalog, running_catalog

PROFILE = "local"
SMALL = "small"  # max rank 8: the rank-16 adapters (coding, ui) do not fit


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCatalog]:
    root = tmp_path_factory.mktemp("catalog")
    with running_catalog(root / "data") as live:
        seeded = seed_demo(live.url, root / "demo", profile=PROFILE)
        with CatalogClient(live.url) as client:
            client.set_profile(SMALL, base_model=seeded.base, max_lora_rank=8, max_loras=4,
                               engine="vllm")
        yield live


def make(url: str, cache: Path, profile: str | None = PROFILE) -> MolResolver:
    return MolResolver(ResolverSettings(catalog_url=url, serving_profile=profile,
                                        adapter_cache_dir=cache, adapter_cache_bytes=10**8))


async def test_version_resolves_into_the_cache(catalog: LiveCatalog, tmp_path: Path) -> None:
    resolver = make(catalog.url, tmp_path)
    try:
        found = await resolver.resolve("demo/chat@v1")
        assert found is not None
        assert found.name == "demo/chat@v1"
        assert found.lora_id == lora_id(found.digest)
        source = catalog.data_dir.parent / "demo" / "adapters" / "chat"
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            assert (found.path / name).read_bytes() == (source / name).read_bytes()
        by_digest = await resolver.resolve(f"demo/chat@{found.digest}")
        assert by_digest is not None
        assert by_digest.path == found.path
        candidate = await resolver.resolve("demo/coding@v2")
        assert candidate is not None
        assert candidate.digest != found.digest
    finally:
        await resolver.aclose()


class RelativeUrls(AsyncCatalogClient):
    """The real catalog's answers with download URLs made relative, as a catalog behind
    a proxy may give them: the plugin must join them to MOL_CATALOG_URL."""

    async def resolve(self, ref: str, profile: str | None = None, *,
                      traceparent: str | None = None) -> Resolved:
        answer = await super().resolve(ref, profile, traceparent=traceparent)
        for f in answer.files:
            f.url = urlsplit(f.url).path
            assert f.url.startswith("/v1/blobs/")
        return answer


async def test_relative_download_urls_are_joined_to_the_catalog_url(
        catalog: LiveCatalog, tmp_path: Path) -> None:
    settings = ResolverSettings(catalog_url=catalog.url, serving_profile=PROFILE,
                                adapter_cache_dir=tmp_path)
    resolver = MolResolver(settings, client=RelativeUrls(catalog.url))
    found = await resolver.resolve("demo/ui@v1")
    await resolver.aclose()
    assert found is not None
    assert (found.path / "adapter_model.safetensors").stat().st_size > 0


@pytest.mark.parametrize(("name", "reason"), [
    ("demo/chat@stable", "mutable reference"),
    ("demo/chat@latest", "mutable reference"),
    ("chat", "not an adapter reference"),
    ("demo/nope@v1", "unknown adapter"),
    ("demo/chat@v9", "no version v9"),
])
async def test_refused_names_return_none_with_the_reason(
        catalog: LiveCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        name: str, reason: str) -> None:
    resolver = make(catalog.url, tmp_path)
    with caplog.at_level(logging.INFO):
        assert await resolver.resolve(name) is None
    await resolver.aclose()
    assert reason in caplog.text
    assert not list((tmp_path / "entries").iterdir())


async def test_incompatible_adapter_is_refused_with_the_catalog_reason(
        catalog: LiveCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    resolver = make(catalog.url, tmp_path, profile=SMALL)
    with caplog.at_level(logging.INFO):
        assert await resolver.resolve("demo/coding@v1") is None
        assert await resolver.resolve("demo/chat@v1") is not None  # rank 8 fits
    await resolver.aclose()
    assert "incompatible with serving profile 'small'" in caplog.text
    assert "rank" in caplog.text


async def test_cached_adapters_load_while_the_catalog_is_down(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with running_catalog(tmp_path / "data") as live:
        seed_demo(live.url, tmp_path / "demo", profile=PROFILE)
        first = make(live.url, tmp_path / "cache")
        assert await first.resolve("demo/agent@v1") is not None
        await first.aclose()
        live.stop()
        offline = make(live.url, tmp_path / "cache")  # as a restarted engine
        with caplog.at_level(logging.INFO):
            found = await offline.resolve("demo/agent@v1")
            assert found is not None
            assert (found.path / "adapter_model.safetensors").is_file()
            assert await offline.resolve("demo/ui@v1") is None  # never fetched
            other_profile = make(live.url, tmp_path / "cache", profile="elsewhere")
            assert await other_profile.resolve("demo/agent@v1") is None
        await offline.aclose()
        await other_profile.aclose()
    assert "serving demo/agent@v1 from the cache" in caplog.text
    assert "unreachable and the adapter is not cached" in caplog.text
    assert "never checked against serving profile 'elsewhere'" in caplog.text


def test_plugin_is_a_no_op_without_a_catalog_url(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("MOL_CATALOG_URL", raising=False)
    with caplog.at_level(logging.INFO):
        register()
    assert "MOL_CATALOG_URL is not set; not registering" in caplog.text
    assert "vllm" not in sys.modules  # it did not even import vLLM


def test_plugin_never_raises(monkeypatch: pytest.MonkeyPatch,
                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("MOL_CATALOG_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("MOL_ADAPTER_CACHE_BYTES", "-5")  # invalid setting
    register()
    assert "not registered" in caplog.text
