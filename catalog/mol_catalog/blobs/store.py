"""Content-addressed blob storage: ``blobs/sha256/<hex>``, written once.

Two stores behind one protocol: a local directory (the embedded default) and S3 via
boto3 (multipart for large files, presigned download URLs). Digests are always
computed by the catalog while it receives a file, never taken from the store (S3's
multipart checksums are checksums of parts, not of the object).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from mol_catalog.blobs.presign import PROBE_KEY, Presigner, Target

CHUNK = 1024 * 1024
CONFLICT_RETRIES = 5
DEFAULT_S3_TIMEOUT = 20.0  # seconds per S3 attempt (connect, and between bytes read)
UPLOADS = "uploads/"  # under the S3 prefix: the records of multipart uploads in flight


class BlobUrlError(ValueError):
    """A blob URL the catalog cannot use."""


@dataclass(frozen=True)
class BlobInfo:
    digest: str  # "sha256:<hex>"
    size: int
    modified: float  # unix time


def _hex(digest: str) -> str:
    if not digest.startswith("sha256:") or len(digest) != 71:
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return digest[7:]


class BlobStore(Protocol):
    # Whether download URLs point back at the catalog (and so need its base URL).
    serves_downloads: bool

    async def put(self, digest: str, source: Path | bytes, size: int) -> bool:
        """Store the file (a path or its bytes) under its digest unless present; True when
        it was written."""

    async def exists(self, digest: str) -> bool: ...

    async def size(self, digest: str) -> int | None:
        """The stored blob's size in bytes, None when it is not there."""

    def read(self, digest: str) -> AsyncIterator[bytes]: ...

    async def read_range(self, digest: str, start: int, end: int) -> bytes:
        """Bytes start..end inclusive."""

    async def list(self) -> list[BlobInfo]: ...

    async def delete(self, digest: str) -> None: ...

    async def ping(self) -> None:
        """Raise when the store cannot be used (readiness)."""

    async def clean_partials(self, older_than: float,
                             owner_gone: Callable[[int], bool] | None = None) -> int:
        """Remove partial writes a killed process left, last changed before ``older_than``
        (unix time) or, when ``owner_gone`` is given, of a process it says is gone."""

    def download_url(self, digest: str, base_url: str) -> str: ...

    async def close(self) -> None: ...


class LocalBlobStore:
    """A directory: ``<root>/blobs/sha256/<hex>``; writes are atomic renames."""

    serves_downloads = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "blobs" / "sha256"
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        return self.dir / _hex(digest)

    async def put(self, digest: str, source: Path | bytes, size: int) -> bool:
        target = self._path(digest)
        if target.exists():
            os.utime(target)  # referenced again: restart gc's grace period
            return False
        return await asyncio.to_thread(self._put_sync, source, target)

    def _put_sync(self, source: Path | bytes, target: Path) -> bool:
        # A gc with a zero grace period may remove a partial file while it is written
        # (it cannot tell it from a crash's leftover): write it again.
        for attempt in range(3):
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}")
            try:
                if isinstance(source, bytes):
                    tmp.write_bytes(source)
                else:
                    shutil.copyfile(source, tmp)
                if target.exists():
                    tmp.unlink(missing_ok=True)
                    return False
                os.replace(tmp, target)
                break
            except FileNotFoundError:
                if attempt == 2 or (not isinstance(source, bytes) and not source.exists()):
                    raise
        return True

    async def exists(self, digest: str) -> bool:
        return self._path(digest).exists()

    async def size(self, digest: str) -> int | None:
        try:
            return self._path(digest).stat().st_size
        except FileNotFoundError:
            return None

    async def read(self, digest: str) -> AsyncIterator[bytes]:
        path = self._path(digest)
        if not path.exists():
            raise FileNotFoundError(digest)
        fh = await asyncio.to_thread(path.open, "rb")
        try:
            while chunk := await asyncio.to_thread(fh.read, CHUNK):
                yield chunk
        finally:
            fh.close()

    async def read_range(self, digest: str, start: int, end: int) -> bytes:
        def _read() -> bytes:
            with self._path(digest).open("rb") as fh:
                fh.seek(start)
                return fh.read(end - start + 1)

        return await asyncio.to_thread(_read)

    async def list(self) -> list[BlobInfo]:
        def _list() -> list[BlobInfo]:
            out = []
            for entry in os.scandir(self.dir):
                if entry.name.startswith(".") or len(entry.name) != 64:
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:  # deleted since scandir saw it (a concurrent gc)
                    continue
                out.append(BlobInfo(f"sha256:{entry.name}", st.st_size, st.st_mtime))
            return out

        return await asyncio.to_thread(_list)

    async def delete(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)

    async def ping(self) -> None:
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise OSError(f"blob directory {self.dir} is missing or not writable")

    async def clean_partials(self, older_than: float,
                             owner_gone: Callable[[int], bool] | None = None) -> int:
        """Partial files are ``.<hex>.<pid>.<ns>`` (see ``_put_sync``)."""

        def _clean() -> int:
            removed = 0
            for entry in os.scandir(self.dir):
                parts = entry.name.split(".")
                if not entry.name.startswith(".") or len(parts) != 4:
                    continue
                try:
                    gone = (owner_gone is not None and parts[2].isdigit()
                            and owner_gone(int(parts[2])))
                    if gone or entry.stat().st_mtime < older_than:
                        os.unlink(entry.path)
                        removed += 1
                except FileNotFoundError:
                    continue  # renamed into place or removed meanwhile
            return removed

        return await asyncio.to_thread(_clean)

    def download_url(self, digest: str, base_url: str) -> str:
        return f"{base_url.rstrip('/')}/v1/blobs/sha256/{_hex(digest)}"

    async def close(self) -> None:
        return None


class S3BlobStore:
    """An S3 bucket (any S3 API): ``<prefix>blobs/sha256/<hex>``; presigned downloads."""

    serves_downloads = False

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None,
                 presign_seconds: int = 3600, client: Any = None,
                 timeout: float = DEFAULT_S3_TIMEOUT) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.presign_seconds = presign_seconds
        self._presigner: Presigner | None = None
        # Digests are ours (sha256, sent as ChecksumSHA256): no extra CRC/MD5 pass by
        # botocore; a pool large enough for every concurrent publish's uploads. Each
        # attempt may take ``timeout`` to connect and as long between bytes read, and a
        # call makes at most two: a store that stops answering costs a request about
        # twice the timeout, not botocore's default minutes.
        self.client = client or boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url,
            config=Config(signature_version="s3v4", max_pool_connections=64,
                          request_checksum_calculation="when_required",
                          response_checksum_validation="when_required",
                          connect_timeout=timeout, read_timeout=timeout,
                          retries={"mode": "standard", "total_max_attempts": 2}))
        # Multipart above 64 MiB, in 64 MiB parts.
        self.transfer = TransferConfig(multipart_threshold=64 * 1024 * 1024,
                                       multipart_chunksize=64 * 1024 * 1024)

    def _key(self, digest: str) -> str:
        return f"{self.prefix}blobs/sha256/{_hex(digest)}"

    async def put(self, digest: str, source: Path | bytes, size: int) -> bool:
        if isinstance(source, Path) and size >= self.transfer.multipart_threshold:
            # Large: multipart from the file; one HEAD first keeps it write-once.
            if await self.exists(digest):
                return False
            # The record of this upload in flight (see ``clean_partials``), written before
            # the upload starts and removed when it ends.
            marker = f"{self.prefix}{UPLOADS}{_hex(digest)}.{time.time_ns()}.{uuid.uuid4().hex}"
            await asyncio.to_thread(self.client.put_object, Bucket=self.bucket, Key=marker,
                                    Body=b"")
            try:
                await asyncio.to_thread(self.client.upload_file, str(source), self.bucket,
                                        self._key(digest), Config=self.transfer)
            finally:
                with contextlib.suppress(Exception):  # left over: gc removes it later
                    await asyncio.to_thread(self.client.delete_object, Bucket=self.bucket,
                                            Key=marker)
            return True
        return await asyncio.to_thread(self._put_small, digest, source)

    def _put_small(self, digest: str, source: Path | bytes) -> bool:
        """One conditional PUT: ``If-None-Match: *`` makes it write-once without a HEAD
        (412 = already stored), and ``x-amz-checksum-sha256`` (our digest) lets S3
        reject a body that does not hash to it."""
        from botocore.exceptions import ClientError

        body = source if isinstance(source, bytes) else source.read_bytes()
        checksum = base64.b64encode(bytes.fromhex(_hex(digest))).decode()
        for attempt in range(CONFLICT_RETRIES):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._key(digest), Body=body,
                                       IfNoneMatch="*", ChecksumAlgorithm="SHA256",
                                       ChecksumSHA256=checksum)
            except ClientError as exc:
                error = exc.response.get("Error", {})
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == 412 or error.get("Code") == "PreconditionFailed":
                    return False
                # 409: a concurrent conditional write of the same key is in flight.
                if status == 409 and attempt < CONFLICT_RETRIES - 1:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise
            return True
        raise AssertionError("unreachable")

    async def exists(self, digest: str) -> bool:
        return await self.size(digest) is not None

    async def size(self, digest: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            head = await asyncio.to_thread(self.client.head_object, Bucket=self.bucket,
                                           Key=self._key(digest))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return int(head["ContentLength"])

    async def read(self, digest: str) -> AsyncIterator[bytes]:
        from botocore.exceptions import ClientError

        try:
            obj = await asyncio.to_thread(self.client.get_object, Bucket=self.bucket,
                                          Key=self._key(digest))
        except ClientError as exc:
            raise FileNotFoundError(digest) from exc
        body = obj["Body"]
        try:
            while chunk := await asyncio.to_thread(body.read, CHUNK):
                yield chunk
        finally:
            body.close()

    async def read_range(self, digest: str, start: int, end: int) -> bytes:
        obj = await asyncio.to_thread(self.client.get_object, Bucket=self.bucket,
                                      Key=self._key(digest), Range=f"bytes={start}-{end}")
        body = obj["Body"]
        try:
            data: bytes = await asyncio.to_thread(body.read)
        finally:
            body.close()
        return data

    async def list(self) -> list[BlobInfo]:
        def _list() -> list[BlobInfo]:
            out = []
            paginator = self.client.get_paginator("list_objects_v2")
            prefix = f"{self.prefix}blobs/sha256/"
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    name = obj["Key"].rsplit("/", 1)[-1]
                    if len(name) == 64:
                        out.append(BlobInfo(f"sha256:{name}", obj["Size"],
                                            obj["LastModified"].timestamp()))
            return out

        return await asyncio.to_thread(_list)

    async def delete(self, digest: str) -> None:
        await asyncio.to_thread(self.client.delete_object, Bucket=self.bucket,
                                Key=self._key(digest))

    async def ping(self) -> None:
        await asyncio.to_thread(self.client.head_bucket, Bucket=self.bucket)

    async def clean_partials(self, older_than: float,
                             owner_gone: Callable[[int], bool] | None = None) -> int:
        """Incomplete multipart uploads of blobs started before ``older_than`` (S3 keeps
        their parts, and bills them, until they are aborted).

        An upload's age is the catalog's own record of it (``<prefix>uploads/<hex>.<start
        ns>.<id>``, written by ``put`` before the upload starts, removed when it ends),
        never S3's ``Initiated`` alone: stores disagree on it (moto reports 2010 for every
        upload), and an upload a publish is still sending is never touched. Uploads are
        listed before the records, so a listed upload's record is already there. An
        upload without a record (none was written for it) is judged by ``Initiated``;
        records older than ``older_than`` are removed with their uploads."""
        from botocore.exceptions import ClientError

        def _clean() -> int:
            uploads = [up for page in self.client.get_paginator("list_multipart_uploads")
                       .paginate(Bucket=self.bucket, Prefix=f"{self.prefix}blobs/sha256/")
                       for up in page.get("Uploads", [])]
            started: dict[str, float] = {}
            stale = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=f"{self.prefix}{UPLOADS}"):
                for obj in page.get("Contents", []):
                    hexdigest, _, rest = obj["Key"].rsplit("/", 1)[-1].partition(".")
                    start_ns = rest.partition(".")[0]
                    at = int(start_ns) / 1e9 if start_ns.isdigit() else 0.0
                    started[hexdigest] = max(started.get(hexdigest, 0.0), at)
                    if at < older_than:
                        stale.append(obj["Key"])
            removed = 0
            for up in uploads:
                hexdigest = up["Key"].rsplit("/", 1)[-1]
                begun = started.get(hexdigest, up["Initiated"].timestamp())
                if begun >= older_than:
                    continue
                try:
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=up["Key"],
                                                       UploadId=up["UploadId"])
                except ClientError as exc:  # completed meanwhile
                    if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":
                        raise
                    continue
                removed += 1
            for key in stale:
                self.client.delete_object(Bucket=self.bucket, Key=key)
            return removed

        return await asyncio.to_thread(_clean)

    def download_url(self, digest: str, base_url: str) -> str:
        """A presigned GET URL, signed by our own SigV4 presigner (botocore's costs ~1 ms)."""
        presigner = self._presigner or self._make_presigner()
        if presigner is None:  # no credentials: let botocore raise its usual error
            return self._botocore_url(self._key(digest))
        return presigner.url(self._key(digest))

    def _botocore_url(self, key: str) -> str:
        url: str = self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key},
            ExpiresIn=self.presign_seconds,
        )
        return url

    def _make_presigner(self) -> Presigner | None:
        """Addressing, region and service come from one URL botocore presigns itself."""
        creds = getattr(getattr(self.client, "_request_signer", None), "_credentials", None)
        if creds is None:
            return None
        target = Target.from_presigned(self._botocore_url(PROBE_KEY), PROBE_KEY)
        self._presigner = Presigner(target, creds.get_frozen_credentials, self.presign_seconds)
        return self._presigner

    async def close(self) -> None:
        self.client.close()


def open_blob_store(url: str, endpoint_url: str | None = None,
                    presign_seconds: int = 3600,
                    timeout: float = DEFAULT_S3_TIMEOUT) -> BlobStore:
    """``file:///dir`` (or a plain path) -> LocalBlobStore; ``s3://bucket/prefix`` -> S3."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise BlobUrlError(f"blob URL {url!r} names no bucket: use s3://bucket/prefix")
        return S3BlobStore(parsed.netloc, parsed.path, endpoint_url, presign_seconds,
                           timeout=timeout)
    if parsed.scheme == "file":
        path = (parsed.netloc + parsed.path) if parsed.netloc else parsed.path
        return LocalBlobStore(Path(path))
    if parsed.scheme == "":
        return LocalBlobStore(Path(url))
    raise BlobUrlError(f"unsupported blob URL {url!r}: use file:///dir or s3://bucket/prefix")
