"""The publish pipeline: check the files, store the blobs, then one transaction.

Order matters for crash safety: blobs are written (content-addressed, write-once)
before the row that references them, so a crash in between leaves only an orphan blob
that gc removes after its grace period; a version row never points at a missing blob.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request

from mol_catalog import shared_docs
from mol_catalog.adapters import service, writes
from mol_catalog.adapters.schemas import PublishRequest
from mol_catalog.adapters.uploads import (
    CONFIG_FILE,
    MAX_CONFIG_BYTES,
    WEIGHTS_FILE,
    StoredFile,
    Upload,
    receive_upload,
)
from mol_catalog.auth import Principal
from mol_catalog.base_models import service as base_service
from mol_catalog.base_models.service import KnownBase
from mol_catalog.blobs.orphans import BlobsGone
from mol_catalog.deps import Catalog
from mol_catalog.errors import (
    ApiError,
    BadRequest,
    Incompatible,
    InvalidFile,
    SignatureRejected,
    Unavailable,
    ValidationFailed,
)
from mol_catalog.signing import service as signing
from mol_catalog.util import (
    checked,
    clean_text,
    load_json,
    valid_alias,
    valid_name,
    version_number,
)
from mol_platform.contract import refs
from mol_platform.contract.compat import AdapterConfigError, AdapterInfo, check_base
from mol_platform.contract.safetensors_header import (
    HeaderError,
    TensorInfo,
    header_shapes,
    read_header,
)

RETRIES = 8
GONE_PAUSE = 0.01  # seconds, times the attempt, before a publish stores gc'd blobs again
MAX_SOURCE_CHARS = 2000
FORCE_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False,
               "": False}


def _read_config(upload: Upload) -> dict[str, Any]:
    f = upload.files[CONFIG_FILE]
    if f.size > MAX_CONFIG_BYTES:
        raise InvalidFile(f"{CONFIG_FILE} is {f.size} bytes; at most {MAX_CONFIG_BYTES} allowed")
    config = load_json(f.read_bytes(), CONFIG_FILE, InvalidFile)
    if not isinstance(config, dict):
        raise InvalidFile(f"{CONFIG_FILE} must be a JSON object")
    return config


def _options(fields: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if fields.get("alias"):
        out["alias"] = valid_alias(fields["alias"])
    if fields.get("parent"):
        out["parent"] = version_number(fields["parent"], "parent")
    if "force" in fields:
        force = fields["force"].strip().lower()
        if force not in FORCE_WORDS:
            raise BadRequest(f"force must be true or false, got {fields['force'][:20]!r}")
        out["force"] = FORCE_WORDS[force]
    if fields.get("source"):
        if len(fields["source"]) > MAX_SOURCE_CHARS:
            raise ValidationFailed(f"source is {len(fields['source'])} characters; at most "
                                   f"{MAX_SOURCE_CHARS} allowed")
        out["source"] = clean_text(fields["source"], "source")
    if "tags" in fields:
        tags = [t.strip() for t in fields["tags"].split(",") if t.strip()]
        out["tags"] = sorted({checked(refs.check_tag, t) for t in tags})
    if fields.get("labels"):
        labels = load_json(fields["labels"], "labels")
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise BadRequest('labels must be a JSON object of strings, e.g. {"team": "search"}')
        out["labels"] = labels
    return out


def _default_base(info: AdapterInfo) -> str:
    ref = info.base_model_name_or_path
    if not ref:
        raise BadRequest("no base given: pass the form field base=name@revision (the adapter's "
                         "config has no base_model_name_or_path)")
    # A hub id or a path: the catalog name is its last component.
    return ref.rstrip("/").rsplit("/", 1)[-1].lower()


MAX_CACHED_BASES = 1024  # bounds Catalog.bases


async def _find_base(catalog: Catalog, ref: str) -> KnownBase:
    cache = catalog.bases
    hit = cache.get(ref)
    if hit is not None:
        return hit
    async with catalog.db.read() as conn:
        row = await base_service.find(conn, ref)
    base = KnownBase(row.id, row.ref, base_service.shapes_of(row))
    if "@" in ref and len(cache) < MAX_CACHED_BASES:  # a bare name means "newest": not kept
        cache[ref] = base
    return base


def _read_header(weights: StoredFile) -> dict[str, TensorInfo]:
    try:
        return read_header(weights.source, file_size=weights.size)
    except HeaderError as exc:
        raise InvalidFile(f"{WEIGHTS_FILE}: {exc}") from None


async def _store_blobs(catalog: Catalog, upload: Upload,
                       base_model_id: int) -> writes.Precheck:
    """Make sure every file of the upload is in the store, concurrently; returns what was
    read before: the newest blob deletion id (see blobs.orphans) and the base's profiles.

    A blob a stored version references is only checked (a HEAD or a stat: cheaper than
    a write-once PUT answered 412, for the config file many adapters share) and written
    again when it is gone from the store; the others are written once. Either way a
    publish leaves its blobs present.
    """
    async with catalog.db.read() as conn:
        pre = await writes.precheck(conn, upload.digests(), base_model_id)
    await _put(catalog, upload, set(upload.digests()), pre.referenced)
    return pre


async def _put(catalog: Catalog, upload: Upload, digests: set[str],
               referenced: frozenset[str] | set[str] = frozenset()) -> None:
    files = {f.digest: f for f in upload.files.values() if f.digest in digests}

    async def one(f: StoredFile) -> None:
        if f.digest in referenced and await catalog.blobs.exists(f.digest):
            return
        await catalog.blobs.put(f.digest, f.source, f.size)

    await asyncio.gather(*(one(f) for f in files.values()))


async def _store_docs(catalog: Catalog, config: dict[str, Any],
                      tensors: dict[str, list[int]]) -> tuple[str, str]:
    """Store the config and shape map in ``shared_docs`` (if new) in a short transaction of
    their own; returns their digests. Inside the publish's transaction, concurrent publishes
    of one recipe would wait on each other's uncommitted row until commit; committed first,
    they only share it. A publish that fails later leaves them, as any unreferenced
    document (rows are immutable and never deleted)."""
    config_digest, tensors_digest = shared_docs.digest_of(config), shared_docs.digest_of(tensors)
    async with catalog.db.unit() as uow:
        await shared_docs.store(uow.conn, {config_digest: config, tensors_digest: tensors})
    return config_digest, tensors_digest


async def publish(catalog: Catalog, namespace: str, name: str, upload: Upload,
                  who: Principal) -> tuple[dict[str, Any], bool]:
    """Check, store blobs, insert the version; returns (body, created)."""
    valid_name(namespace, "namespace")
    valid_name(name, "adapter name")
    options = _options(upload.fields)
    config = _read_config(upload)
    weights = upload.files[WEIGHTS_FILE]
    if weights.data is not None:  # in memory: the header is parsed from those bytes
        header = _read_header(weights)
    else:
        header = await asyncio.to_thread(_read_header, weights)
    try:
        info = AdapterInfo.from_files(config, header)
    except AdapterConfigError as exc:
        raise InvalidFile(f"{CONFIG_FILE}: {exc}") from None
    base_ref = clean_text(upload.fields.get("base"), "base") or _default_base(info)
    base = await _find_base(catalog, base_ref)
    signature = upload.fields.get("signature") or None
    async with catalog.db.read() as conn:
        signed_by = await signing.check_publish(
            conn, namespace, {p: f.digest for p, f in upload.files.items()}, signature)
    reasons = check_base(info, base.shapes)
    if reasons:
        for r in reasons:
            catalog.metrics.compat_rejections.labels(r.code).inc()
        # The detail names the codes; each message is in ``reasons`` (clients print both).
        named = ", ".join(dict.fromkeys(r.code for r in reasons))
        raise Incompatible(
            f"{namespace}/{name} does not fit base model {base.ref} ({named})",
            reasons=[{"code": r.code, "message": r.message} for r in reasons],
        )
    pre = await _store_blobs(catalog, upload, base.id)
    tensors = header_shapes(header)
    digests = await _store_docs(catalog, config, tensors)
    if catalog.after_store is not None:
        await catalog.after_store()
    req = PublishRequest(namespace=namespace, name=name, upload=upload, info=info, config=config,
                         tensors=tensors, base_model_id=base.id, base_ref=base.ref,
                         config_digest=digests[0], tensors_digest=digests[1],
                         created_by=who.name, admin=who.admin, blobs_after=pre.deletions,
                         bindings_since=catalog.bindings.since(),
                         signature=signature if signed_by else None, signed_by=signed_by,
                         **options)
    for attempt in range(RETRIES):
        try:
            # A concurrent publish to the same adapter may win a race on a unique key
            # (same content, same number or a new namespace/adapter row): the retry
            # sees the new state.
            body, created = await catalog.db.transact(
                lambda uow: service.publish(uow, req, pre.profiles, catalog.namespace_ids),
                attempts=RETRIES, pause=0.01)
        except BlobsGone as gone:
            # gc deleted a blob this publish had stored: store it again, then retry.
            # A gc that keeps winning (grace 0 on content being deleted and published
            # in a loop) is contention, not a fault: 503 with Retry-After.
            if attempt == RETRIES - 1:
                raise Unavailable(f"gc deleted blobs of this publish {RETRIES} times while "
                                  "it ran; retry the publish") from gone
            await asyncio.sleep(GONE_PAUSE * (attempt + 1))  # let that gc pass
            req.blobs_after = gone.after
            await _put(catalog, upload, gone.digests)
            continue
        for codes in req.verdict_reasons.values():
            for code in codes:
                catalog.metrics.compat_rejections.labels(code).inc()
        return body, created
    raise AssertionError("unreachable")


async def publish_form(catalog: Catalog, namespace: str, name: str, request: Request,
                       who: Principal) -> tuple[dict[str, Any], bool]:
    """A publish from a request's multipart body, counted in the publishes metric by
    result: the REST API and the console publish through here alike; a
    ``mol.catalog.publish`` span when tracing is on."""
    tracing = catalog.tracing
    if tracing is None:
        return await _publish_form(catalog, namespace, name, request, who)
    span = tracing.root("mol.catalog.publish", tracing.SERVER, request.headers, {
        "mol.adapter.namespace": namespace, "mol.adapter.name": name})
    if span is None:
        return await _publish_form(catalog, namespace, name, request, who)
    try:
        body, created = await _publish_form(catalog, namespace, name, request, who)
    except ApiError as exc:
        span.set_attribute("http.response.status_code", exc.status)
        span.set_attribute("error.type", str(exc.status))
        raise
    else:
        span.set_attribute("mol.adapter.version", int(body.get("version", 0)))
        span.set_attribute("mol.publish.created", created)
        span.set_attribute("http.response.status_code", 201 if created else 200)
    finally:
        span.end()
    return body, created


async def _publish_form(catalog: Catalog, namespace: str, name: str, request: Request,
                        who: Principal) -> tuple[dict[str, Any], bool]:
    try:
        upload = await receive_upload(request, catalog.settings.max_upload_bytes)
        try:
            body, created = await publish(catalog, namespace, name, upload, who)
        finally:
            upload.cleanup()
    except ApiError as exc:
        result = ("incompatible" if isinstance(exc, Incompatible)
                  else "bad_signature" if isinstance(exc, SignatureRejected)
                  else {413: "too_large"}.get(exc.status, "invalid"))
        catalog.metrics.publishes.labels(result).inc()
        raise
    catalog.metrics.publishes.labels("created" if created else "existing").inc()
    return body, created
