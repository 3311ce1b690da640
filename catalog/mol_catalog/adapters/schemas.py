"""Adapter request bodies and the parsed publish form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from mol_catalog.adapters.uploads import Upload
from mol_platform.compat import AdapterInfo


class AliasPut(BaseModel):
    version: int = Field(ge=1)


class YankBody(BaseModel):
    reason: str = Field(min_length=1, max_length=2000)


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
    alias: str | None = None
    parent: int | None = None
    source: str | None = None
    tags: list[str] | None = None
    labels: dict[str, str] | None = None
    created_by: str | None = None
    # The newest blob deletion id seen before the blobs were stored (blob_gc.guard).
    blobs_after: int = 0
    verdict_reasons: dict[str, list[str]] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"
