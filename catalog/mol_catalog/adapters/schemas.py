"""Adapter request bodies and the parsed publish form."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from mol_catalog.adapters.uploads import Upload
from mol_catalog.util import ResponseBody, Text
from mol_platform.contract.compat import AdapterInfo
from mol_platform.contract.refs import MAX_VERSION


class AliasPut(BaseModel):
    version: int = Field(ge=1, le=MAX_VERSION)
    force: bool = Field(False, description="Admin only: move a protected alias despite the "
                        "refusal reasons (recorded in the alias history and the event)")


class YankBody(BaseModel):
    reason: Text = Field(min_length=1, max_length=2000)


@dataclass
class PublishRequest:
    """A checked publish: the files, the adapter's facts and the form's options."""

    namespace: str
    name: str
    upload: Upload
    info: AdapterInfo
    config: dict[str, Any]
    tensors: dict[str, list[int]]
    base_model_id: int
    base_ref: str  # name@revision
    # sha256 digests of ``config`` and ``tensors`` (mol_catalog.shared_docs), stored already.
    config_digest: str
    tensors_digest: str
    alias: str | None = None
    parent: int | None = None
    source: str | None = None
    tags: list[str] | None = None
    labels: dict[str, str] | None = None
    force: bool = False  # the form's force=true (admin only)
    created_by: str | None = None
    admin: bool = False  # whether the publisher may force
    # Bindings seen since this count as the profiles an alias is served under.
    bindings_since: datetime | None = None
    # The model-signing signature checked before the blobs were stored, and its key's id.
    signature: str | None = None
    signed_by: str | None = None
    # The newest blob deletion id seen before the blobs were stored (blobs.orphans.guard).
    blobs_after: int = 0
    verdict_reasons: dict[str, list[str]] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"


class ReasonOut(ResponseBody):
    code: str
    message: str


class VerdictOut(ResponseBody):
    compatible: bool
    reasons: list[ReasonOut]


class RefusalOut(ResponseBody):
    code: str = Field(description="yanked | incompatible")
    message: str
    profile: str | None = Field(None, description="The serving profile (incompatible)")


class AliasRefusedOut(ResponseBody):
    alias: str
    reasons: list[RefusalOut]


class PublishOut(ResponseBody):
    adapter: str
    version: int
    digest: str
    created: bool
    status: str
    base: str
    verdicts: dict[str, VerdictOut]
    alias_refused: AliasRefusedOut | None = Field(None, description=(
        "The form's alias did not move (the version is stored): the reasons"))


class AdapterItemOut(ResponseBody):
    adapter: str
    namespace: str
    name: str
    base: str
    tags: list[str]
    labels: dict[str, str]
    latest_version: int | None
    updated_at: str | None


class AdapterPageOut(ResponseBody):
    items: list[AdapterItemOut]
    next_cursor: str | None


class AdapterOut(AdapterItemOut):
    aliases: dict[str, int]


class VersionItemOut(ResponseBody):
    version: int
    digest: str
    status: str
    rank: int
    alpha: float
    target_modules: list[str]
    size: int
    parent: int | None
    source: str | None
    created_by: str | None
    created_at: str | None
    yank_reason: str | None
    signed: bool = Field(description="a model-signing signature verified at publish")
    signed_by: str | None = Field(description="the id of the key that signed it")


class VersionPageOut(ResponseBody):
    items: list[VersionItemOut]
    next_cursor: str | None


class FileOut(ResponseBody):
    path: str
    digest: str
    size: int


class VersionOut(VersionItemOut):
    adapter: str
    base: str
    files: list[FileOut]
    signature: str | None = Field(description="the model-signing signature (a Sigstore "
                                  "bundle, JSON) over the files")
    verdicts: dict[str, VerdictOut]


class YankOut(VersionItemOut):
    adapter: str


class AliasOut(ResponseBody):
    alias: str
    version: int
    previous: int | None
    forced: bool = Field(False, description="An admin forced the move past ``overridden``")
    overridden: list[RefusalOut] | None = None


class AliasMoveOut(ResponseBody):
    version: int | None = Field(description="null: the alias was removed (its version "
                                "was deleted)")
    previous: int | None
    changed_by: str | None
    changed_at: str | None
    forced: bool
    overridden: list[RefusalOut] | None


class AliasHistoryOut(ResponseBody):
    items: list[AliasMoveOut]


class DeletedOut(ResponseBody):
    adapter: str
    version: int
    digest: str
    aliases_removed: list[str]
    latest_version: int | None
