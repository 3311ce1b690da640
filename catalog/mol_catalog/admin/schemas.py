"""Answers of the admin operations."""

from __future__ import annotations

from pydantic import BaseModel

from mol_catalog.util import ResponseBody


class GcOut(ResponseBody):
    deleted: list[str]
    kept: int
    leftovers_removed: int
    usage_rows_pruned: int  # daily usage roll-ups older than the retention window
    usage_batches_pruned: int  # usage batch ids older than two days
    routing_decisions_pruned: int  # unlabelled routing decisions older than the window
    routing_batches_pruned: int  # routing decision batch ids older than two days


class BadBlob(BaseModel):
    digest: str
    reason: str
    versions: list[str]  # "ns/name@vN", at most 100
    version_count: int


class VerifyReport(BaseModel):
    referenced: int  # distinct blobs versions reference
    checked: int
    ok: bool
    missing: list[BadBlob]
    corrupt: list[BadBlob]
