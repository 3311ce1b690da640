"""Receiving a publish upload: size limit enforced while streaming, digests computed here.

The multipart body is parsed from a ``receive`` that counts bytes and stops with 413
as soon as the limit is passed (Content-Length is checked first when the client sends
one), so nothing is buffered beyond the limit. File parts spool to disk and are copied
into a private temp dir while their sha256 is computed.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.types import Message

from mol_catalog.errors import BadRequest, PayloadTooLarge

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
FILE_PARTS = (CONFIG_FILE, WEIGHTS_FILE)
FIELDS = ("base", "alias", "parent", "source", "tags", "labels")
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class StoredFile:
    path: Path
    digest: str  # sha256:<hex>
    size: int


@dataclass
class Upload:
    """The files (by part name) and form fields of one publish request."""

    tmpdir: Path
    files: dict[str, StoredFile] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)

    def manifest_digest(self) -> str:
        """sha256 over ``<file digest>  <path>\\n`` lines sorted by path."""
        lines = "".join(f"{f.digest}  {p}\n" for p, f in sorted(self.files.items()))
        return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()

    def cleanup(self) -> None:
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"upload exceeds the limit of {limit} bytes "
                           "(MOL_CATALOG_MAX_UPLOAD_BYTES)")


def _copy_hashing(src: UploadFile, dest: Path) -> StoredFile:
    digest = hashlib.sha256()
    size = 0
    src.file.seek(0)
    with dest.open("wb") as out:
        while chunk := src.file.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return StoredFile(dest, "sha256:" + digest.hexdigest(), size)


async def receive_upload(request: Request, max_bytes: int) -> Upload:
    """Parse the multipart publish body into an Upload (caller must ``cleanup()``)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise _too_large(max_bytes)
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith("multipart/form-data"):
        raise BadRequest("publish expects multipart/form-data with the file parts "
                         f"{CONFIG_FILE} and {WEIGHTS_FILE}")
    received = 0

    async def counting_receive() -> Message:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_bytes:
                raise _too_large(max_bytes)
        return message

    limited = Request(request.scope, counting_receive)
    try:
        form = await limited.form(max_files=len(FILE_PARTS), max_fields=len(FIELDS))
    except PayloadTooLarge:
        raise
    except Exception as exc:  # starlette's MultiPartException and parser errors
        raise BadRequest(f"malformed multipart body: {exc}") from None
    upload = Upload(Path(tempfile.mkdtemp(prefix="mol-publish-")))
    try:
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if key not in FILE_PARTS:
                    raise BadRequest(f"unexpected file part {key!r}: send {CONFIG_FILE} and "
                                     f"{WEIGHTS_FILE}")
                upload.files[key] = await asyncio.to_thread(
                    _copy_hashing, value, upload.tmpdir / key)
            else:
                if key not in FIELDS:
                    raise BadRequest(f"unexpected form field {key!r}: allowed are "
                                     f"{', '.join(FIELDS)}")
                upload.fields[key] = value
        for part in FILE_PARTS:
            if part not in upload.files:
                raise BadRequest(f"missing file part {part!r}: a PEFT LoRA adapter folder has "
                                 f"{CONFIG_FILE} and {WEIGHTS_FILE}")
    except BaseException:
        upload.cleanup()
        raise
    finally:
        await form.close()
    return upload
