"""The catalog's answers about tools: the clients' typed answers; the document and the
check before each load are :mod:`mol_platform.contract.tools`'s."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields a newer catalog adds are kept


class ToolCheck(_Answer):
    name: str  # parses, defines_function, schema, names_match, example_runs
    ok: bool | None  # None: not run
    detail: str


class ToolLineage(_Answer):
    session_id: str | None
    deployment: str | None
    expert: str | None
    tenant: str | None


class ToolVersion(_Answer):
    """One immutable version of a proposed tool, with the automatic checks as advice."""

    namespace: str
    name: str
    version: int
    digest: str
    description: str
    parameters: dict[str, Any]
    source: str
    example: dict[str, Any] | None
    checks: list[ToolCheck]
    signed: bool
    signed_by: str | None
    lineage: ToolLineage
    approved: bool
    size_bytes: int
    created_by: str | None
    created_at: datetime


class ToolVersionList(_Answer):
    items: list[ToolVersion]  # newest first


class ToolItem(_Answer):
    namespace: str
    name: str
    latest_version: int
    latest: ToolVersion
    approved_version: int | None
    updated_at: datetime


class ToolList(_Answer):
    items: list[ToolItem]  # by name


class ToolApproval(_Answer):
    """A move of the ``approved`` alias (``version`` None: the approval was withdrawn)."""

    namespace: str
    name: str
    alias: str
    version: int | None
    previous: int | None
    digest: str | None
    forced: bool
    overridden: list[dict[str, Any]]


class ApprovedTool(_Answer):
    """What a loader needs to check a tool before it loads it
    (``contract.tools.verify_load``)."""

    namespace: str
    name: str
    version: int
    digest: str
    document: str
    signature: str | None
    signed_by: str | None
    signer_key: str | None
    signer_revoked: bool
    approved_by: str | None
    approved_at: datetime | None


class ApprovedToolList(_Answer):
    items: list[ApprovedTool]  # by name
    missing: list[str]  # names asked for with no approved version
