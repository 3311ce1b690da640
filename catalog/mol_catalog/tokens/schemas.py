"""Token request bodies."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=128)
    scopes: list[str] = Field(min_length=1)
