"""The S3 server speaks enough of the S3 API for blob storage: put/get, ranged GET,
multipart upload, and it is isolated from real AWS."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import boto3

from mol_testkit.s3 import S3Server


def test_put_get_and_ranged_get(s3_client: Any, s3_bucket: str) -> None:
    body = bytes(range(256)) * 4
    s3_client.put_object(Bucket=s3_bucket, Key="blobs/sha256/ab", Body=body)
    got = s3_client.get_object(Bucket=s3_bucket, Key="blobs/sha256/ab")
    with got["Body"] as stream:
        assert stream.read() == body
    part = s3_client.get_object(Bucket=s3_bucket, Key="blobs/sha256/ab", Range="bytes=8-15")
    with part["Body"] as stream:
        assert stream.read() == body[8:16]
    assert part["ContentRange"] == f"bytes 8-15/{len(body)}"


def test_multipart_upload(s3_client: Any, s3_bucket: str) -> None:
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(1024)]
    up = s3_client.create_multipart_upload(Bucket=s3_bucket, Key="big")
    etags = [
        s3_client.upload_part(Bucket=s3_bucket, Key="big", UploadId=up["UploadId"],
                              PartNumber=i + 1, Body=data)["ETag"]
        for i, data in enumerate(parts)
    ]
    s3_client.complete_multipart_upload(
        Bucket=s3_bucket, Key="big", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]},
    )
    obj = s3_client.get_object(Bucket=s3_bucket, Key="big")
    with obj["Body"] as stream:
        data = stream.read()
    assert hashlib.sha256(data).digest() == hashlib.sha256(b"".join(parts)).digest()


def test_buckets_are_per_test(s3_client: Any, s3_bucket: str) -> None:
    listed = s3_client.list_objects_v2(Bucket=s3_bucket)
    assert listed["KeyCount"] == 0
    names = [b["Name"] for b in s3_client.list_buckets()["Buckets"]]
    assert s3_bucket in names


def test_environment_points_away_from_aws(s3_server: S3Server) -> None:
    assert os.environ["AWS_ACCESS_KEY_ID"] == s3_server.env["AWS_ACCESS_KEY_ID"]
    session = boto3.session.Session()
    creds = session.get_credentials()
    assert creds is not None
    assert creds.access_key == s3_server.env["AWS_ACCESS_KEY_ID"]
    assert session.region_name == s3_server.env["AWS_DEFAULT_REGION"]
