"""The resolver plugin's signature check: the files the engine is about to load, hashed
on disk, must be exactly the ones a model-signing signature covers.

Runs when the serving profile requires signatures (the catalog's ``signature_required``)
or the engine is started with ``MOL_REQUIRE_SIGNATURES=true``. The catalog hands over the
signature with the signer's public key; ``MOL_TRUSTED_SIGNERS`` pins the key ids the engine
accepts, so a catalog that hands over another key is refused too. Verification uses
``mol_platform.contract.model_signature`` (``cryptography`` only: the engine image never
installs sigstore).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mol_platform.contract import model_signature as ms

CHUNK = 1024 * 1024


class SignatureRefused(Exception):
    """Why the engine does not load an adapter: a reason code and a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SignedBy:
    """What the catalog answered about a version's signature (also kept in the cache)."""

    signature: str | None
    key_id: str | None
    public_key: str | None
    revoked: bool = False

    @classmethod
    def of(cls, data: dict[str, Any]) -> SignedBy:
        return cls(data.get("signature"), data.get("signed_by"), data.get("signer_key"),
                   bool(data.get("signer_revoked")))

    def as_meta(self) -> dict[str, Any]:
        return {"signature": self.signature, "signed_by": self.key_id,
                "signer_key": self.public_key, "signer_revoked": self.revoked}


def check_signature(signed: SignedBy, trusted: Collection[str] = ()) -> dict[str, str]:
    """The signed files (path -> sha256 hex) when the signature holds; SignatureRefused
    otherwise. ``trusted``: the key ids accepted (empty: any key the catalog names)."""
    if signed.signature is None or signed.public_key is None or signed.key_id is None:
        raise SignatureRefused("missing_signature", "the version is not signed")
    if signed.revoked:
        raise SignatureRefused("revoked_key", f"its signing key {signed.key_id} was revoked")
    try:
        if ms.key_id(signed.public_key) != signed.key_id:
            raise SignatureRefused("wrong_key", f"the catalog's key does not have id "
                                   f"{signed.key_id}")
        if trusted and signed.key_id not in trusted:
            raise SignatureRefused("untrusted_key", f"signed by {signed.key_id}, which is not "
                                   "in MOL_TRUSTED_SIGNERS")
        return ms.verify(signed.signature, signed.public_key)
    except ms.SignatureError as exc:
        raise SignatureRefused(exc.code, exc.message) from None


def file_digests(folder: Path, names: Collection[str]) -> dict[str, str]:
    """sha256 hex of each of ``names`` present in ``folder``."""
    out: dict[str, str] = {}
    for name in names:
        path = folder / name
        if not path.is_file():
            continue
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
        out[name] = h.hexdigest()
    return out


def verify_folder(folder: Path, files: dict[str, str], listed: Collection[str]) -> None:
    """The adapter files in ``folder`` (``listed``: the version's file paths) must hash
    to the signed ``files``, none missing and none extra; SignatureRefused otherwise."""
    try:
        ms.check_files(files, file_digests(folder, set(listed) | set(files)))
    except ms.SignatureError as exc:
        raise SignatureRefused(exc.code, exc.message) from None
