"""Resolve an immutable adapter name through the catalog into a local folder.

The logic of the vLLM resolver plugin without vLLM, so it is tested on its own:
``MolResolver.resolve(name)`` returns a :class:`Resolved` (name, id, folder) or None
with the reason logged. It never raises: vLLM lets an exception escape the request,
so every failure becomes None (vLLM answers 404) and a log line; users get the
catalog's reasons from the router's 422.

Order of checks: the name must be immutable (``ns/name@vN`` or ``@sha256:<hex>``,
because vLLM caches an adapter under the requested name, a moving alias would keep
its first weights); the catalog resolves it under ``MOL_SERVING_PROFILE`` and its
verdict must be compatible; the files are fetched into the cache by digest. While the
catalog is unreachable, an adapter already in the cache still loads, if it was
compatible with this profile when it was cached.

When signatures are required (``MOL_REQUIRE_SIGNATURES`` or the profile's
``require_signatures``, which resolve answers as ``signature_required``), the version's
model-signing signature is checked against the catalog's file list before the download
and against the files on disk after it, every time the adapter is handed to vLLM (also
from the cache, also offline): a file changed in the blob store, in transit or in the
cache is never loaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from mol_platform.apps.vllm_plugin.cache import AdapterCache, CacheError
from mol_platform.apps.vllm_plugin.settings import ResolverSettings
from mol_platform.apps.vllm_plugin.signatures import (
    SignatureRefused,
    SignedBy,
    check_signature,
    verify_folder,
)
from mol_platform.clients.catalog import CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract import catalog_models
from mol_platform.contract.blob_files import BlobFile, BlobFileError, digest_hex
from mol_platform.contract.catalog_models import Verdict
from mol_platform.contract.model_signature import SignatureError, check_files
from mol_platform.contract.refs import AdapterRef, RefError

log = logging.getLogger("vllm.mol_platform.resolver")


def lora_id(digest: str) -> int:
    """A positive 31-bit id from the digest: the same adapter gets the same id everywhere."""
    return int(digest_hex(digest)[:8], 16) % (2**31 - 1) + 1


@dataclass(frozen=True)
class Resolved:
    name: str
    lora_id: int
    path: Path
    digest: str
    resolve_ms: float = 0.0  # the catalog's resolve call
    fetch_ms: float = 0.0  # download and verify (~0 when cached)


class Refused(Exception):
    """Why a name is not served (logged, then None is returned)."""


class MolResolver:
    """One per engine process; the catalog client is opened on first use (in vLLM's loop)."""

    def __init__(self, settings: ResolverSettings, *, client: AsyncCatalogClient | None = None,
                 cache: AdapterCache | None = None) -> None:
        if not settings.catalog_url:
            raise ValueError("MOL_CATALOG_URL is not set")
        self.settings = settings
        self.profile = settings.serving_profile
        self.cache = cache or AdapterCache(settings.adapter_cache_dir,
                                           settings.adapter_cache_bytes)
        self._client = client

    def _catalog(self) -> AsyncCatalogClient:
        if self._client is None:
            self._client = AsyncCatalogClient(self.settings.catalog_url,
                                              self.settings.catalog_token,
                                              timeout=self.settings.catalog_timeout)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        self.cache.close()

    async def resolve(self, lora_name: str) -> Resolved | None:
        """The adapter for ``lora_name``, or None with the reason logged. Never raises."""
        try:
            found = await self._resolve(lora_name)
        except Refused as exc:
            log.warning("MoL resolver: not serving %r: %s", lora_name, exc)
            return None
        except Exception as exc:
            log.exception("MoL resolver: failed to resolve %r: %s", lora_name, exc)
            return None
        log.info("MoL resolver: %s -> %s (%s; resolve %.1f ms, fetch %.1f ms)", lora_name,
                 found.digest, found.path, found.resolve_ms, found.fetch_ms)
        return found

    async def _resolve(self, lora_name: str) -> Resolved:
        try:
            ref = AdapterRef.parse(lora_name)
        except RefError as exc:
            raise Refused(f"not an adapter reference ({exc})") from None
        if not ref.immutable:
            raise Refused(
                f"@{ref.ref} is a mutable reference; engines accept only ns/name@vN or "
                "ns/name@sha256:<hex> (the router resolves aliases to versions)")
        started = time.perf_counter()
        try:
            answer = await self._catalog().resolve(lora_name, self.profile)
        except CatalogError as exc:
            if exc.status != 0:
                raise Refused(f"the catalog answered: {exc}") from None
            return await self._offline(ref, exc)
        resolved = time.perf_counter()
        found = await self._fetch(lora_name, ref, answer)
        return Resolved(found.name, found.lora_id, found.path, found.digest,
                        resolve_ms=(resolved - started) * 1000,
                        fetch_ms=(time.perf_counter() - resolved) * 1000)

    def _check_verdict(self, verdict: Verdict | None) -> None:
        if self.profile is None:
            return
        if verdict is None:
            raise Refused(f"the catalog gave no verdict for serving profile {self.profile!r}")
        if not verdict.compatible:
            reasons = "; ".join(r.message for r in verdict.reasons) or "no reason given"
            raise Refused(f"incompatible with serving profile {self.profile!r}: {reasons}")

    def _signed_files(self, signed: SignedBy, digest: str) -> dict[str, str]:
        try:
            return check_signature(signed, self.settings.trusted_keys)
        except SignatureRefused as exc:
            raise Refused(f"signature required, and {digest} fails it ({exc.code}): {exc}; "
                          "publish it with `mol catalog publish --sign-key`") from None

    @staticmethod
    def _check_listed(signed_files: dict[str, str], files: list[catalog_models.ResolvedFile],
                      digest: str) -> None:
        try:
            check_files(signed_files, {f.path: digest_hex(f.digest) for f in files})
        except (SignatureError, BlobFileError) as exc:
            raise Refused(f"signature required, and the catalog's file list of {digest} "
                          f"fails it: {exc}") from None

    async def _verify_on_disk(self, path: Path, digest: str, signed_files: dict[str, str],
                              listed: list[str]) -> None:
        try:
            await asyncio.to_thread(verify_folder, path, signed_files, listed)
        except SignatureRefused as exc:
            raise Refused(f"signature required, and the files of {digest} in {path} fail "
                          f"it ({exc.code}): {exc}") from None

    async def _fetch(self, lora_name: str, ref: AdapterRef,
                     answer: catalog_models.Resolved) -> Resolved:
        self._check_verdict(answer.verdict)
        digest, version = answer.digest, answer.version
        if ref.digest is not None and ref.digest != digest:
            raise Refused(f"the catalog answered digest {digest} for {ref.digest}")
        signed = SignedBy.of(answer.model_dump())
        required = self.settings.require_signatures or answer.signature_required
        signed_files: dict[str, str] = {}
        if required:  # refused before any download when the catalog's list does not match
            signed_files = self._signed_files(signed, digest)
            self._check_listed(signed_files, answer.files, digest)
        try:
            files = [BlobFile.parse(f) for f in answer.files]
            if not files:
                raise CacheError("the version lists no files")
            meta = {"adapter": ref.adapter, "version": version, "digest": digest,
                    "base": answer.base, **signed.as_meta(), "signature_required": required,
                    "profiles": {} if self.profile is None else {self.profile: True}}
            client = self._catalog()

            async def fetch(f: BlobFile, dest: Path) -> str:
                return await client.download(f.url, dest)

            path = await self.cache.ensure(digest, files, fetch, meta)
        except (CacheError, BlobFileError, CatalogError) as exc:
            raise Refused(f"cannot fetch {digest}: {exc}") from None
        if required:
            await self._verify_on_disk(path, digest, signed_files, [f.path for f in files])
        self.cache.remember_ref(ref.adapter, version, digest)
        if self.profile is not None:
            await self.cache.mark_compatible(digest, self.profile)
        return Resolved(lora_name, lora_id(digest), path, digest)

    async def _offline(self, ref: AdapterRef, exc: CatalogError) -> Resolved:
        digest = ref.digest
        if digest is None and ref.version is not None:
            digest = self.cache.ref_digest(ref.adapter, ref.version)
        meta = self.cache.meta(digest) if digest else None
        if digest is None or meta is None:
            raise Refused(f"the catalog is unreachable and the adapter is not cached ({exc})")
        if meta.get("adapter") != ref.adapter:
            raise Refused(f"the catalog is unreachable and cached {digest} belongs to "
                          f"{meta.get('adapter')!r}, not {ref.adapter!r}")
        if self.profile is not None and (meta.get("profiles") or {}).get(self.profile) is not True:
            raise Refused(f"the catalog is unreachable and the cached adapter was never "
                          f"checked against serving profile {self.profile!r}")
        path = await self.cache.pin(digest)
        if path is None:
            raise Refused(f"the catalog is unreachable and {digest} left the cache")
        if self.settings.require_signatures or meta.get("signature_required") is True:
            signed_files = self._signed_files(SignedBy.of(meta), digest)
            await self._verify_on_disk(path, digest, signed_files, list(signed_files))
        log.warning("MoL resolver: catalog unreachable, serving %s from the cache", ref)
        return Resolved(str(ref), lora_id(digest), path, digest)
