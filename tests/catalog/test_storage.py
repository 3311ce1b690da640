"""Blob stores (local dir and S3) and gc of orphan blobs."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import httpx

from mol_catalog.blobs import leftovers
from mol_catalog.blobs.store import LocalBlobStore, S3BlobStore, open_blob_store


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def test_local_store_roundtrip(tmp_path: Path) -> None:
    store = open_blob_store(f"file://{tmp_path / 'b'}")
    assert isinstance(store, LocalBlobStore)
    src = tmp_path / "f"
    src.write_bytes(b"hello" * 1000)
    d = digest_of(src.read_bytes())
    assert await store.put(d, src, 5000) is True
    assert await store.put(d, src, 5000) is False
    assert (tmp_path / "b" / "blobs" / "sha256" / d[7:]).read_bytes() == src.read_bytes()
    assert b"".join([c async for c in store.read(d)]) == src.read_bytes()
    assert await store.read_range(d, 0, 4) == b"hello"
    assert [b.digest for b in await store.list()] == [d]
    await store.delete(d)
    assert not await store.exists(d)


async def test_s3_store_multipart_and_presigned(s3_server: Any, s3_bucket: str,
                                                tmp_path: Path) -> None:
    store = open_blob_store(f"s3://{s3_bucket}/cat", endpoint_url=s3_server.endpoint_url)
    assert isinstance(store, S3BlobStore)
    store.transfer.multipart_threshold = store.transfer.multipart_chunksize = 5 * 1024 * 1024
    data = os.urandom(11 * 1024 * 1024)  # three parts
    src = tmp_path / "big"
    src.write_bytes(data)
    d = digest_of(data)
    try:
        assert await store.put(d, src, len(data)) is True
        assert await store.put(d, src, len(data)) is False
        head = store.client.head_object(Bucket=s3_bucket, Key=f"cat/blobs/sha256/{d[7:]}")
        assert head["ContentLength"] == len(data)
        assert await store.read_range(d, 0, 9) == data[:10]
        async with httpx.AsyncClient() as http:
            r = await http.get(store.download_url(d, "http://unused"))
        assert r.status_code == 200
        assert r.content == data
        assert [b.digest for b in await store.list()] == [d]
        await store.delete(d)
        assert await store.list() == []
    finally:
        await store.close()


async def test_gc_never_aborts_an_upload_in_flight(s3_server: Any, s3_bucket: str,
                                                   tmp_path: Path) -> None:
    """gc runs while each part of a multipart upload is being sent (a botocore hook):
    the upload is younger than the grace by the catalog's record, so it is left alone
    (moto reports every upload as initiated in 2010). Once the upload is over, an
    incomplete one with no record, or a record older than the grace, is aborted."""
    store = open_blob_store(f"s3://{s3_bucket}/cat", endpoint_url=s3_server.endpoint_url)
    assert isinstance(store, S3BlobStore)
    store.transfer.multipart_threshold = store.transfer.multipart_chunksize = 5 * 1024 * 1024
    store.transfer.max_request_concurrency = 1
    data = os.urandom(11 * 1024 * 1024)  # three parts
    src = tmp_path / "big"
    src.write_bytes(data)
    d = digest_of(data)
    loop = asyncio.get_running_loop()
    during: list[int] = []

    def gc_now(**_: Any) -> None:
        during.append(asyncio.run_coroutine_threadsafe(
            leftovers.clean(store, 3600), loop).result())

    store.client.meta.events.register("before-call.s3.UploadPart", gc_now)
    try:
        assert await store.put(d, src, len(data)) is True
        assert during == [0, 0, 0]
        assert await store.size(d) == len(data)
        store.client.meta.events.unregister("before-call.s3.UploadPart", gc_now)
        key = f"cat/blobs/sha256/{'0' * 64}"
        store.client.create_multipart_upload(Bucket=s3_bucket, Key=key)  # no record
        store.client.put_object(Bucket=s3_bucket, Key=f"cat/uploads/{'1' * 64}.1000.x", Body=b"")
        store.client.create_multipart_upload(Bucket=s3_bucket, Key=f"cat/blobs/sha256/{'1' * 64}")
        assert await leftovers.clean(store, 3600) == 2
        assert store.client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
        assert "Contents" not in store.client.list_objects_v2(Bucket=s3_bucket,
                                                              Prefix="cat/uploads/")
    finally:
        await store.close()


async def test_publish_to_s3_and_gc_orphans(make_client: Any, model: Any, s3_server: Any,
                                           s3_bucket: str, tmp_path: Path) -> None:
    client = await make_client(blob_url=f"s3://{s3_bucket}/cat",
                               s3_endpoint_url=s3_server.endpoint_url)
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    r = await client.post("/v1/adapters/acme/s3/versions", files=model.files(model.adapter()))
    assert r.status_code == 201, r.text
    res = (await client.get("/v1/resolve/acme/s3@latest")).json()
    url = next(f["url"] for f in res["files"] if f["path"] == "adapter_model.safetensors")
    assert "X-Amz-Signature" in url
    async with httpx.AsyncClient() as http:
        assert (await http.get(url)).content == model.adapter()[1]
    # an orphan: a blob written by a publish that crashed before its row
    orphan = tmp_path / "orphan"
    orphan.write_bytes(b"orphan")
    s3 = S3BlobStore(s3_bucket, "cat", s3_server.endpoint_url)
    try:
        await s3.put(digest_of(b"orphan"), orphan, 6)
    finally:
        await s3.close()
    fresh = (await client.post("/v1/admin/gc", params={"grace_seconds": 3600})).json()
    assert fresh == {"deleted": [], "kept": 3, "leftovers_removed": 0,
                     "usage_rows_pruned": 0, "usage_batches_pruned": 0,
                   "routing_decisions_pruned": 0, "routing_batches_pruned": 0}
    out = (await client.post("/v1/admin/gc", params={"grace_seconds": 0})).json()
    assert out == {"deleted": [digest_of(b"orphan")], "kept": 2, "leftovers_removed": 0,
                   "usage_rows_pruned": 0, "usage_batches_pruned": 0,
                   "routing_decisions_pruned": 0, "routing_batches_pruned": 0}
    assert (await client.get("/v1/resolve/acme/s3@v1")).status_code == 200


async def test_local_gc_respects_grace(client: httpx.AsyncClient, model: Any,
                                       tmp_path: Path) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    assert (await client.post("/v1/adapters/acme/x/versions",
                              files=model.files(model.adapter()))).status_code == 201
    blob_dir = tmp_path / "blobs" / "blobs" / "sha256"
    orphan = blob_dir / ("0" * 64)
    orphan.write_bytes(b"x")
    assert (await client.post("/v1/admin/gc", params={"grace_seconds": 60})).json()["deleted"] == []
    old = time.time() - 120
    os.utime(orphan, (old, old))
    out = (await client.post("/v1/admin/gc", params={"grace_seconds": 60})).json()
    assert out == {"deleted": ["sha256:" + "0" * 64], "kept": 2, "leftovers_removed": 0,
                   "usage_rows_pruned": 0, "usage_batches_pruned": 0,
                   "routing_decisions_pruned": 0, "routing_batches_pruned": 0}
    assert not orphan.exists()


def test_local_listing_skips_a_blob_deleted_while_it_lists(tmp_path: Path,
                                                           monkeypatch: Any) -> None:
    """Two gc runs at once: one deletes a blob between the other's scandir and stat."""
    store = LocalBlobStore(tmp_path)
    kept, gone = ("a" * 64, "b" * 64)
    for name in (kept, gone):
        (store.dir / name).write_bytes(b"x")
    real = os.scandir

    def scandir(path: Any) -> Any:
        entries = list(real(path))
        (store.dir / gone).unlink()  # after the listing, before its stat
        return iter(entries)

    monkeypatch.setattr(os, "scandir", scandir)
    listed = asyncio.run(store.list())
    assert [b.digest for b in listed] == [f"sha256:{kept}"]
