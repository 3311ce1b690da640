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
