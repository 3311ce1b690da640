"""Resolve response bodies."""

from __future__ import annotations

from pydantic import Field

from mol_catalog.adapters.schemas import FileOut, VerdictOut
from mol_catalog.util import ResponseBody


class ResolvedFileOut(FileOut):
    url: str = Field(description="Download URL: presigned (S3), under PUBLIC_URL, or a path "
                     "such as /v1/blobs/sha256/<hex> to join to the catalog URL")


class ResolveOut(ResponseBody):
    adapter: str
    version: int
    digest: str
    status: str
    yank_reason: str | None
    base: str
    files: list[ResolvedFileOut]
    verdict: VerdictOut | None
    signature: str | None = Field(description="the model-signing signature (a Sigstore "
                                  "bundle, JSON) checked at publish; null: unsigned")
    signed_by: str | None = Field(description="the id of the key that signed it")
    signer_key: str | None = Field(description="that key's PEM public key")
    signer_revoked: bool = Field(description="the key was revoked after the publish")
    signature_required: bool = Field(description="the profile's engines load only "
                                     "signed adapters (false without profile)")
