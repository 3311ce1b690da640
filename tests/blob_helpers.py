"""Helpers of the blob-safety tests: a store per test (local dir or S3 on moto) and
reading back what the catalog references."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from mol_catalog.blobs.store import open_blob_store


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Settings of the blob store: ``blob_url`` (+ ``s3_endpoint_url``)."""
    if request.param == "local":
        return {"blob_url": f"file://{tmp_path / 'blobs'}"}
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return {"blob_url": f"s3://{bucket}/cat", "s3_endpoint_url": server.endpoint_url}


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def stored(settings: dict[str, Any], digest: str) -> bytes | None:
    """The blob's bytes in the store, None when it is not there."""
    blobs = open_blob_store(settings["blob_url"], settings.get("s3_endpoint_url"))
    try:
        if not await blobs.exists(digest):
            return None
        return b"".join([chunk async for chunk in blobs.read(digest)])
    finally:
        await blobs.close()


async def referenced(client: httpx.AsyncClient) -> dict[str, list[str]]:
    """Every blob digest a version references -> the versions ("ns/name@vN")."""
    out: dict[str, list[str]] = {}
    for item in (await client.get("/v1/adapters", params={"limit": 500})).json()["items"]:
        name = item["adapter"]
        versions = (await client.get(f"/v1/adapters/{name}/versions",
                                     params={"limit": 500})).json()["items"]
        for v in versions:
            detail = (await client.get(f"/v1/adapters/{name}/versions/{v['version']}")).json()
            for f in detail["files"]:
                out.setdefault(f["digest"], []).append(f"{name}@v{v['version']}")
    return out


async def assert_all_present(client: httpx.AsyncClient, settings: dict[str, Any]) -> int:
    """Every referenced blob is in the store and hashes to its digest; returns how many."""
    refs = await referenced(client)
    for digest, versions in refs.items():
        data = await stored(settings, digest)
        assert data is not None, f"{digest} of {versions} is missing from the store"
        assert digest_of(data) == digest, f"{digest} of {versions} has other content"
    return len(refs)
