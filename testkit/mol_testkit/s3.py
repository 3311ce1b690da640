"""An S3 API server on loopback for tests: moto's ThreadedMotoServer on 127.0.0.1.

It speaks the S3 REST API (ranged GETs, multipart uploads) to boto3 or any other
client. Credentials and region are fixed fake values, so no client ever falls back
to real AWS configuration. moto keeps its state in this process's memory: buckets
outlive a test unless deleted (``delete_bucket`` empties then removes one).
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import boto3
from moto.server import ThreadedMotoServer

from mol_testkit.net import LOOPBACK, InfraError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ACCESS_KEY = "mol-test-access-key"
SECRET_KEY = "mol-test-secret-key"
REGION = "us-east-1"


class S3Server:
    """moto in server mode on 127.0.0.1 and a free port; ``start()``/``stop()`` or ``with``."""

    def __init__(self) -> None:
        self._server: ThreadedMotoServer | None = None
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise InfraError("the S3 server is not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for a client process (e.g. a service under test started as a
        subprocess): fake credentials, region and the S3 endpoint (boto3 >= 1.28 reads
        ``AWS_ENDPOINT_URL_S3``)."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``boto3.client("s3", **kwargs)`` bound to this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "region_name": REGION,
        }

    def client(self) -> S3Client:
        """A new boto3 S3 client for this server; the caller closes it (``client.close()``)."""
        session = boto3.session.Session()
        return session.client("s3", **self.client_kwargs())

    def start(self) -> S3Server:
        if self._server is not None:
            raise InfraError("the S3 server is already started")
        # A restart (stop, start) keeps the port; moto's state lives in this process.
        server = ThreadedMotoServer(ip_address=LOOPBACK, port=self.port, verbose=False)
        server.start()
        self._server = server
        self.port = server.get_host_and_port()[1]
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.stop()
        # ThreadedMotoServer.stop() leaves the listening socket open.
        inner = getattr(server, "_server", None)
        if inner is not None:
            inner.server_close()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def unique_bucket_name(prefix: str = "test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def delete_bucket(client: S3Client, bucket: str) -> None:
    """Abort open multipart uploads, delete every object, then the bucket."""
    with contextlib.suppress(client.exceptions.NoSuchBucket):
        uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        for up in uploads:
            client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})  # type: ignore[typeddict-item]
        client.delete_bucket(Bucket=bucket)
