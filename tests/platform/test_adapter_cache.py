"""The resolver plugin's on-disk adapter cache: verification, atomic entries, LRU,
and safety across processes (pins held by other processes, concurrent fetches)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mol_platform.apps.vllm_plugin.cache import AdapterCache, CacheError
from mol_platform.contract.blob_files import BlobFile, BlobFileError, digest_hex, manifest_digest
from mol_platform.contract.catalog_models import ResolvedFile


def blob(path: str, data: bytes) -> tuple[BlobFile, bytes]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return BlobFile(path, digest, len(data), f"/v1/blobs/{digest}"), data


def adapter(seed: int, size: int = 1000) -> tuple[str, list[BlobFile], dict[str, bytes]]:
    a = blob("adapter_config.json", b'{"r": %d}' % seed)
    b = blob("adapter_model.safetensors", bytes([seed % 256]) * size)
    files = [a[0], b[0]]
    return manifest_digest(files), files, {a[0].url: a[1], b[0].url: b[1]}


class Source:
    """Serves blob bytes by URL, counting fetches; ``corrupt`` flips the answers."""

    def __init__(self, blobs: dict[str, bytes]) -> None:
        self.blobs = blobs
        self.fetches = 0
        self.corrupt = False

    async def fetch(self, f: BlobFile, dest: Path) -> str:
        self.fetches += 1
        data = self.blobs[f.url] + (b"x" if self.corrupt else b"")
        await asyncio.to_thread(dest.write_bytes, data)
        return hashlib.sha256(data).hexdigest()


async def test_fetch_verifies_and_reuses(tmp_path: Path) -> None:
    cache = AdapterCache(tmp_path, 10_000)
    digest, files, blobs = adapter(1)
    src = Source(blobs)
    path = await cache.ensure(digest, files, src.fetch, {"adapter": "ns/a"})
    assert path == tmp_path / "entries" / digest_hex(digest)
    assert (path / "adapter_model.safetensors").read_bytes() == blobs[files[1].url]
    assert cache.meta(digest) == {"adapter": "ns/a"}
    assert await cache.ensure(digest, files, src.fetch, {}) == path
    assert src.fetches == 2  # two files, fetched once
    cache.close()


async def test_corrupt_download_leaves_nothing(tmp_path: Path) -> None:
    cache = AdapterCache(tmp_path, 10_000)
    digest, files, blobs = adapter(2)
    src = Source(blobs)
    src.corrupt = True
    with pytest.raises(CacheError, match="expected sha256:"):
        await cache.ensure(digest, files, src.fetch, {})
    assert not cache.path(digest).exists()
    assert list((tmp_path / "tmp").iterdir()) == []
    src.corrupt = False
    assert (await cache.ensure(digest, files, src.fetch, {})).is_dir()
    cache.close()


async def test_file_list_must_match_the_digest(tmp_path: Path) -> None:
    cache = AdapterCache(tmp_path, 10_000)
    _, files, blobs = adapter(3)
    other, _, _ = adapter(4)
    with pytest.raises(CacheError, match="does not add up"):
        await cache.ensure(other, files, Source(blobs).fetch, {})
    cache.close()


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "", "x" * 200])
def test_file_names_must_be_plain(name: str) -> None:
    raw = ResolvedFile(path=name, digest="sha256:" + "0" * 64, size=1, url="/x")
    with pytest.raises(BlobFileError, match="plain file name"):
        BlobFile.parse(raw)


async def test_lru_evicts_oldest_unpinned(tmp_path: Path) -> None:
    writer = AdapterCache(tmp_path, 2500)  # room for two adapters of ~1 KB
    made = [adapter(i) for i in range(3)]
    for digest, files, blobs in made[:2]:
        await writer.ensure(digest, files, Source(blobs).fetch, {})
    writer.close()  # this process no longer pins them
    old = time.time() - 100
    os.utime(writer.path(made[0][0]) / ".used", (old, old))
    reader = AdapterCache(tmp_path, 2500)
    digest, files, blobs = made[2]
    await reader.ensure(digest, files, Source(blobs).fetch, {})
    assert not reader.path(made[0][0]).exists()  # least recently used
    assert reader.path(made[1][0]).exists()
    assert reader.total_bytes() <= 2500
    reader.close()


# Another engine process: pins an entry, says so, and holds it until stdin closes.
HOLD_PIN = """
import asyncio, sys
from pathlib import Path
from mol_platform.apps.vllm_plugin.cache import AdapterCache
cache = AdapterCache(Path(sys.argv[1]), 10_000)
assert asyncio.run(cache.pin(sys.argv[2])) is not None
print("pinned", flush=True)
sys.stdin.read()
"""


def test_entries_pinned_by_another_process_are_not_evicted(tmp_path: Path) -> None:
    cache = AdapterCache(tmp_path, 1500)  # room for one adapter
    first, files, blobs = adapter(5)
    asyncio.run(cache.ensure(first, files, Source(blobs).fetch, {}))
    cache.close()
    engine = subprocess.Popen([sys.executable, "-c", HOLD_PIN, str(tmp_path), first],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert engine.stdin is not None
    assert engine.stdout is not None
    try:
        assert engine.stdout.readline().strip() == "pinned"
        second, files2, blobs2 = adapter(6)
        other = AdapterCache(tmp_path, 1500)
        asyncio.run(other.ensure(second, files2, Source(blobs2).fetch, {}))
        assert other.path(first).exists()  # in use by the other engine
        assert other.total_bytes() > 1500
    finally:
        engine.stdin.close()
        engine.stdout.close()
        assert engine.wait(30) == 0
    # Its engine is gone: the next eviction may take it.
    assert other.evict() == [digest_hex(first)]
    other.close()


async def test_concurrent_fetches_download_once(tmp_path: Path) -> None:
    digest, files, blobs = adapter(7)
    src = Source(blobs)
    caches = [AdapterCache(tmp_path, 10_000) for _ in range(4)]  # as four processes would
    paths = await asyncio.gather(*(c.ensure(digest, files, src.fetch, {}) for c in caches))
    assert len(set(paths)) == 1
    assert src.fetches == 2
    for c in caches:
        c.close()


async def test_refs_map_versions_to_digests(tmp_path: Path) -> None:
    cache = AdapterCache(tmp_path, 10_000)
    digest, _, _ = adapter(8)
    assert cache.ref_digest("ns/a", 3) is None
    cache.remember_ref("ns/a", 3, digest)
    assert cache.ref_digest("ns/a", 3) == digest
    (tmp_path / "refs" / "ns" / "a" / "v3").write_text("garbage")
    assert cache.ref_digest("ns/a", 3) is None
    cache.close()
