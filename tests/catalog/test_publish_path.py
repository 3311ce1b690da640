"""The publish fast path: write-once conditional S3 puts, in-memory and spilled uploads,
and the rows a second version writes (tags, alias history) on both backends."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from mol_catalog.adapters import uploads
from mol_catalog.blobs.store import S3BlobStore, open_blob_store


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def record_calls(store: S3BlobStore) -> list[str]:
    calls: list[str] = []
    store.client.meta.events.register(
        "before-call.s3", lambda model, **_: calls.append(model.name))
    return calls


async def test_s3_small_put_is_one_conditional_write(s3_server: Any, s3_bucket: str) -> None:
    store = open_blob_store(f"s3://{s3_bucket}/cat", endpoint_url=s3_server.endpoint_url)
    assert isinstance(store, S3BlobStore)
    data = b"weights" * 1000
    d = digest_of(data)
    key = f"cat/blobs/sha256/{d[7:]}"
    try:
        calls = record_calls(store)
        assert await store.put(d, data, len(data)) is True
        assert calls == ["PutObject"]  # no HEAD before the write
        assert await store.put(d, data, len(data)) is False  # 412: already stored
        assert calls == ["PutObject", "PutObject"]
        head = store.client.head_object(Bucket=s3_bucket, Key=key, ChecksumMode="ENABLED")
        # our sha256 travels with the object, so S3 can verify the body against it
        assert head["ChecksumSHA256"] == base64.b64encode(bytes.fromhex(d[7:])).decode()
        body = store.client.get_object(Bucket=s3_bucket, Key=key)["Body"]
        try:
            assert body.read() == data
        finally:
            body.close()
    finally:
        await store.close()


async def test_s3_put_never_overwrites(s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    store = S3BlobStore(s3_bucket, "cat", s3_server.endpoint_url)
    data = b"the real content"
    d = digest_of(data)
    key = f"cat/blobs/sha256/{d[7:]}"
    try:
        store.client.put_object(Bucket=s3_bucket, Key=key, Body=b"first writer")
        src = tmp_path / "f"
        src.write_bytes(data)
        assert await store.put(d, src, len(data)) is False  # from a path: same rule
        body = store.client.get_object(Bucket=s3_bucket, Key=key)["Body"]
        try:
            assert body.read() == b"first writer"
        finally:
            body.close()
    finally:
        await store.close()


async def test_local_store_put_bytes(tmp_path: Path) -> None:
    store = open_blob_store(f"file://{tmp_path / 'b'}")
    d = digest_of(b"abc")
    assert await store.put(d, b"abc", 3) is True
    assert await store.put(d, b"abc", 3) is False
    assert await store.read_range(d, 0, 2) == b"abc"


async def test_large_upload_spills_to_disk(make_client: Any, model: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uploads, "SPOOL_BYTES", 1024)
    made: list[Path] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(**kwargs: Any) -> str:
        path: str = real_mkdtemp(**kwargs)
        made.append(Path(path))
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    client = await make_client()
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    cfg, weights = model.adapter(rank=16)
    assert len(weights) > 10 * 1024
    r = await client.post("/v1/adapters/acme/big/versions", files=model.files((cfg, weights)))
    assert r.status_code == 201, r.text
    assert made  # spilled to a temp dir...
    assert not any(p.exists() for p in made)  # ...removed after the publish
    res = (await client.get("/v1/resolve/acme/big@v1")).json()
    files = {f["path"]: f for f in res["files"]}
    assert files["adapter_model.safetensors"]["digest"] == digest_of(weights)
    assert files["adapter_model.safetensors"]["size"] == len(weights)
    manifest = "".join(f"{digest_of(b)}  {p}\n" for p, b in sorted(
        {"adapter_config.json": cfg, "adapter_model.safetensors": weights}.items()))
    assert r.json()["digest"] == digest_of(manifest.encode())
    blob = await client.get(f"/v1/blobs/sha256/{digest_of(weights)[7:]}")
    assert blob.content == weights


async def test_second_version_moves_tags_and_alias(client: httpx.AsyncClient,
                                                   model: Any) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    url = "/v1/adapters/acme/two/versions"
    r = await client.post(url, files=model.files(model.adapter(seed=1)),
                          data={"tags": "a,b", "alias": "stable", "labels": '{"t": "x"}'})
    assert r.status_code == 201, r.text
    r = await client.post(url, files=model.files(model.adapter(seed=2)),
                          data={"tags": "c", "alias": "stable", "parent": "1"})
    assert r.status_code == 201, r.text
    assert r.json()["version"] == 2
    again = await client.post(url, files=model.files(model.adapter(seed=1)))
    assert again.status_code == 200
    assert again.json()["version"] == 1
    assert again.json()["created"] is False
    item = (await client.get("/v1/adapters/acme/two")).json()
    assert item["tags"] == ["c"]
    assert item["labels"] == {"t": "x"}
    assert item["latest_version"] == 2
    assert item["aliases"] == {"stable": 2}
    assert [i["adapter"] for i in (await client.get("/v1/adapters?tag=c")).json()["items"]] \
        == ["acme/two"]
    assert (await client.get("/v1/adapters?tag=a")).json()["items"] == []
    history = (await client.get("/v1/adapters/acme/two/aliases/stable/history")).json()
    assert [(h["version"], h["previous"]) for h in history["items"]] == [(2, 1), (1, None)]
    versions = (await client.get("/v1/adapters/acme/two/versions")).json()["items"]
    assert [(v["version"], v["parent"]) for v in versions] == [(2, 1), (1, None)]


async def test_referenced_blob_is_checked_not_uploaded_again(make_client: Any, model: Any,
                                                     s3_server: Any, s3_bucket: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    calls: list[str] = []
    real_client = boto3.session.Session.client

    def client_with_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = real_client(self, *args, **kwargs)
        made.meta.events.register("before-call.s3",
                                  lambda model, **_: calls.append(model.name))
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client_with_hook)
    client = await make_client(blob_url=f"s3://{s3_bucket}/cat",
                               s3_endpoint_url=s3_server.endpoint_url)
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    first, second = model.adapter(seed=1), model.adapter(seed=2)
    assert first[0] == second[0]  # same config...
    assert first[1] != second[1]  # ...other weights
    r = await client.post("/v1/adapters/acme/one/versions", files=model.files(first))
    assert r.status_code == 201, r.text
    assert calls.count("PutObject") == 2
    calls.clear()
    r = await client.post("/v1/adapters/acme/other/versions", files=model.files(second))
    assert r.status_code == 201, r.text
    # The weights are written; the config, referenced by v1, is only checked (a HEAD).
    assert sorted(calls) == ["HeadObject", "PutObject"]
    res = (await client.get("/v1/resolve/acme/other@v1")).json()
    cfg_url = next(f["url"] for f in res["files"] if f["path"] == "adapter_config.json")
    async with httpx.AsyncClient() as http:
        assert (await http.get(cfg_url)).content == second[0]


async def test_publishes_remember_bases_and_namespaces_on_the_catalog(
        client: Any, model: Any) -> None:
    """A base named with its revision and a namespace id read committed are kept on the
    app's ``Catalog`` and used by later publishes; a bare base name (the newest revision,
    which a registration may change) and a namespace this publish created are not."""
    catalog = client.catalog
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    first = await client.post("/v1/adapters/acme/a/versions", files=model.files(model.adapter()),
                              data={"base": model.name})
    assert first.status_code == 201, first.text
    assert (catalog.bases, catalog.namespace_ids) == ({}, {})
    ref = f"{model.name}@{model.revision}"
    second = await client.post("/v1/adapters/acme/b/versions",
                               files=model.files(model.adapter(seed=1)), data={"base": ref})
    assert second.status_code == 201, second.text
    assert list(catalog.bases) == [ref]
    assert catalog.bases[ref].ref == ref
    assert list(catalog.namespace_ids) == ["acme"]
    # The kept shapes are what the next publish checks against: without v_proj, the
    # adapter does not fit.
    known = catalog.bases[ref]
    modules = {k: v for k, v in known.shapes.modules.items() if k != "self_attn.v_proj"}
    catalog.bases[ref] = dataclasses.replace(
        known, shapes=dataclasses.replace(known.shapes, modules=modules))
    third = await client.post("/v1/adapters/acme/c/versions",
                              files=model.files(model.adapter(seed=2)), data={"base": ref})
    assert third.status_code == 422, third.text
    assert "v_proj" in third.text
