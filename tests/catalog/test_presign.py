"""Our SigV4 presigner: byte-identical to botocore's generate_presigned_url, and S3 serves it."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any
from unittest import mock

import boto3
import httpx
import pytest
from botocore.config import Config

from mol_catalog.blobs.presign import Target
from mol_catalog.blobs.store import S3BlobStore

WHEN = dt.datetime(2026, 3, 14, 23, 59, 58)
LATER = dt.datetime(2026, 3, 15, 0, 0, 3)  # the next day: a new signing key


def _client(**kwargs: Any) -> Any:
    session = boto3.session.Session()
    return session.client("s3", config=Config(signature_version="s3v4"),
                          aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="s3cr3t/+key",
                          **kwargs)


def _unix(when: dt.datetime) -> float:
    return when.replace(tzinfo=dt.UTC).timestamp()


def _botocore(client: Any, bucket: str, key: str, when: dt.datetime, expires: int) -> str:
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        url: str = client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires)
    return url


@pytest.mark.parametrize("kwargs", [
    {"endpoint_url": "http://127.0.0.1:9000", "region_name": "us-east-1"},
    {"endpoint_url": "https://minio.example.com", "region_name": "eu-west-1"},
    {"endpoint_url": "http://S3.Example.com:80/", "region_name": "us-east-1"},
    {"region_name": "eu-central-1"},  # AWS itself: virtual-hosted addressing
    {"region_name": "us-east-1", "aws_session_token": "FwoG/token+with=odd/chars"},
], ids=["ip-port", "https-host", "default-port", "aws", "session-token"])
@pytest.mark.parametrize("key", ["cat/blobs/sha256/" + "ab" * 32, "odd key/ü+~*=&?.txt"])
def test_identical_to_botocore(kwargs: dict[str, Any], key: str) -> None:
    client = _client(**kwargs)
    try:
        store = S3BlobStore("my-bucket", "", presign_seconds=900, client=client)
        store.download_url("sha256:" + "00" * 32, "")  # builds the presigner from botocore
        presigner = store._presigner
        assert presigner is not None
        for when in (WHEN, LATER, WHEN):  # the cached signing key follows the day
            ours = presigner.url(key, now=_unix(when))
            assert ours == _botocore(client, "my-bucket", key, when, 900)
    finally:
        client.close()


def test_store_urls_match_botocore_for_blob_keys() -> None:
    client = _client(endpoint_url="http://127.0.0.1:9000", region_name="us-east-1")
    try:
        store = S3BlobStore("bkt", "prefix/cat", presign_seconds=3600, client=client)
        digest = "sha256:" + hashlib.sha256(b"x").hexdigest()
        now = _unix(WHEN)
        with mock.patch("mol_catalog.blobs.presign.time.time", return_value=now):
            ours = store.download_url(digest, "")
        assert ours == _botocore(client, "bkt", f"prefix/cat/blobs/sha256/{digest[7:]}", WHEN,
                                 3600)
    finally:
        client.close()


def test_target_rejects_a_url_for_another_key() -> None:
    with pytest.raises(ValueError, match="does not end with key"):
        Target.from_presigned("http://h/b/other?X-Amz-Credential=a%2Fd%2Fr%2Fs3%2Faws4_request",
                              "probe")


async def test_s3_serves_our_presigned_url(s3_server: Any, s3_bucket: str) -> None:
    store = S3BlobStore(s3_bucket, "cat", s3_server.endpoint_url, presign_seconds=60)
    data = b"presigned bytes"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    try:
        store.client.put_object(Bucket=s3_bucket, Key=store._key(digest), Body=data)
        url = store.download_url(digest, "")
        assert "X-Amz-Signature=" in url
        async with httpx.AsyncClient() as http:
            r = await http.get(url)
            assert r.status_code == 200, r.text
            assert r.content == data
    finally:
        await store.close()
