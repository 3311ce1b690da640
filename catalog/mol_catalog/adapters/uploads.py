"""Receiving a publish upload: size limit enforced while streaming, digests computed here.

The multipart body is parsed straight from the request stream: bytes are counted and
the upload stops with 413 as soon as the limit is passed (Content-Length is checked
first when the client sends one), so nothing is buffered beyond the limit. Each file
part is hashed (sha256) as its bytes arrive, exactly once; it stays in memory up to
``SPOOL_BYTES`` and spills to a private temp file beyond that, so a 1 GiB upload never
sits in RAM while small adapters never touch the disk.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from mol_catalog.blobs.leftovers import upload_dir_prefix
from mol_catalog.errors import BadRequest, PayloadTooLarge

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
FILE_PARTS = (CONFIG_FILE, WEIGHTS_FILE)
FIELDS = ("base", "alias", "parent", "source", "tags", "labels", "force", "signature")
MAX_CONFIG_BYTES = 1024 * 1024
MAX_FIELD_BYTES = 64 * 1024
# Files up to this size are kept in memory; larger ones spill to a temp file.
SPOOL_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class StoredFile:
    """A received file: its digest and size, and its bytes in memory or on disk."""

    digest: str  # sha256:<hex>
    size: int
    data: bytes | None = None
    path: Path | None = None

    @property
    def source(self) -> bytes | Path:
        """What the blob store and the header reader take: the bytes or the spill file."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        return self.path

    def read_bytes(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        return self.path.read_bytes()


@dataclass
class Upload:
    """The files (by part name) and form fields of one publish request."""

    tmpdir: Path | None = None
    files: dict[str, StoredFile] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)

    def manifest_digest(self) -> str:
        """sha256 over ``<file digest>  <path>\\n`` lines sorted by path."""
        lines = "".join(f"{f.digest}  {p}\n" for p, f in sorted(self.files.items()))
        return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()

    def digests(self) -> list[str]:
        """The files' digests, sorted, each once."""
        return sorted({f.digest for f in self.files.values()})

    def spill_dir(self) -> Path:
        if self.tmpdir is None:
            self.tmpdir = Path(tempfile.mkdtemp(prefix=upload_dir_prefix()))
        return self.tmpdir

    def cleanup(self) -> None:
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"upload exceeds the limit of {limit} bytes "
                           "(MOL_CATALOG_MAX_UPLOAD_BYTES)")


class _Part:
    """The part being received: its headers, then its bytes (hashed as they come)."""

    def __init__(self) -> None:
        self.disposition = b""
        self.name = ""
        self.is_file = False
        self.hasher: Any = None
        self.buf = bytearray()
        self.size = 0
        self.path: Path | None = None
        self.fh: IO[bytes] | None = None


class _FormReader:
    """python-multipart callbacks that fill an Upload; disk writes are queued for a thread."""

    def __init__(self, upload: Upload) -> None:
        self.upload = upload
        self.part = _Part()
        self.header_name = b""
        self.header_value = b""
        self.pending: list[tuple[IO[bytes], bytes]] = []
        self.open_files: list[IO[bytes]] = []
        self.seen: set[str] = set()

    def callbacks(self) -> dict[str, Any]:
        return {"on_part_begin": self.on_part_begin, "on_part_data": self.on_part_data,
                "on_part_end": self.on_part_end, "on_header_field": self.on_header_field,
                "on_header_value": self.on_header_value, "on_header_end": self.on_header_end,
                "on_headers_finished": self.on_headers_finished}

    def on_part_begin(self) -> None:
        self.part = _Part()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        if self.header_name.lower() == b"content-disposition":
            self.part.disposition = self.header_value
        self.header_name = self.header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.part.disposition)
        raw = options.get(b"name")
        if raw is None:
            raise BadRequest("malformed multipart body: a part has no Content-Disposition name")
        name = raw.decode("utf-8", errors="replace")
        part = self.part
        part.name = name
        part.is_file = b"filename" in options
        if part.is_file and name not in FILE_PARTS:
            raise BadRequest(f"unexpected file part {name!r}: send {CONFIG_FILE} and "
                             f"{WEIGHTS_FILE}")
        if not part.is_file and name not in FIELDS:
            raise BadRequest(f"unexpected form field {name!r}: allowed are {', '.join(FIELDS)}")
        if name in self.seen:
            raise BadRequest(f"part {name!r} is sent twice")
        self.seen.add(name)
        if part.is_file:
            part.hasher = hashlib.sha256()

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self.part
        chunk = data[start:end]
        part.size += len(chunk)
        if not part.is_file:
            if part.size > MAX_FIELD_BYTES:
                raise BadRequest(f"form field {part.name!r} exceeds {MAX_FIELD_BYTES} bytes")
            part.buf += chunk
            return
        part.hasher.update(chunk)
        if part.fh is None and part.size > SPOOL_BYTES:
            part.path = self.upload.spill_dir() / part.name
            part.fh = part.path.open("wb")
            self.open_files.append(part.fh)
            part.buf += chunk
            self.pending.append((part.fh, bytes(part.buf)))
            part.buf = bytearray()
            return
        if part.fh is not None:
            self.pending.append((part.fh, chunk))
        else:
            part.buf += chunk

    def on_part_end(self) -> None:
        part = self.part
        if not part.name:
            return
        if not part.is_file:
            self.upload.fields[part.name] = part.buf.decode("utf-8", errors="replace")
            return
        digest = "sha256:" + part.hasher.hexdigest()
        if part.fh is None:
            stored = StoredFile(digest, part.size, data=bytes(part.buf))
        else:
            stored = StoredFile(digest, part.size, path=part.path)
        self.upload.files[part.name] = stored

    def write_pending(self) -> None:
        """Runs in a thread: the queued chunks of spilled files."""
        for fh, chunk in self.pending:
            fh.write(chunk)
        self.pending.clear()

    def close_files(self) -> None:
        for fh in self.open_files:
            fh.close()
        self.open_files.clear()


async def receive_upload(request: Request, max_bytes: int) -> Upload:
    """Parse the multipart publish body into an Upload (caller must ``cleanup()``)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise _too_large(max_bytes)
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith("multipart/form-data"):
        raise BadRequest("publish expects multipart/form-data with the file parts "
                         f"{CONFIG_FILE} and {WEIGHTS_FILE}")
    _, params = parse_options_header(ctype)
    boundary = params.get(b"boundary")
    if not boundary:
        raise BadRequest("malformed multipart body: the Content-Type names no boundary")
    upload = Upload()
    reader = _FormReader(upload)
    try:
        parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
        received = 0
        try:
            async for chunk in request.stream():
                received += len(chunk)
                if received > max_bytes:
                    raise _too_large(max_bytes)
                parser.write(chunk)
                if reader.pending:
                    await asyncio.to_thread(reader.write_pending)
            parser.finalize()
            if reader.pending:
                await asyncio.to_thread(reader.write_pending)
        except FormParserError as exc:
            raise BadRequest(f"malformed multipart body: {exc}") from None
        finally:
            reader.close_files()
        for part in FILE_PARTS:
            if part not in upload.files:
                raise BadRequest(f"missing file part {part!r}: a PEFT LoRA adapter folder has "
                                 f"{CONFIG_FILE} and {WEIGHTS_FILE}")
    except BaseException:
        upload.cleanup()
        raise
    return upload
