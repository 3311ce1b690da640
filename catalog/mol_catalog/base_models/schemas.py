"""Base-model request bodies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class BaseModelCreate(BaseModel):
    name: str
    revision: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    architecture: str | None = Field(default=None, max_length=128)
    config: dict[str, Any]
    tensors: dict[str, list[int]]
