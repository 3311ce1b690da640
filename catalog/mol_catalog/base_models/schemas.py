"""Base-model request bodies."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from mol_catalog.util import MAX_BIGINT, ResponseBody, Text
from mol_platform.contract.refs import EXACT_NAME_PATTERN, REVISION_PATTERN

Dim = Annotated[int, Field(ge=0, le=MAX_BIGINT)]


class BaseModelCreate(BaseModel):
    # Checked by the service (400 InvalidName, as on every route); documented here.
    name: str = Field(json_schema_extra={"pattern": f"^{EXACT_NAME_PATTERN}$", "maxLength": 63})
    revision: str = Field(min_length=1, max_length=128, pattern=rf"^{REVISION_PATTERN}$")
    architecture: Text | None = Field(default=None, max_length=128)
    config: dict[str, Any]
    tensors: dict[Text, list[Dim]]


class BaseRevisionOut(ResponseBody):
    revision: str
    architecture: str | None
    config: dict[str, Any]
    tensors: dict[str, list[int]]
    num_layers: int
    created_at: str | None


class BaseModelOut(BaseRevisionOut):
    name: str


class BaseModelDetailOut(ResponseBody):
    name: str
    current: str
    revisions: list[BaseRevisionOut]
