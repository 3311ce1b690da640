"""Token request bodies."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mol_catalog.util import ResponseBody, Text


class TokenCreate(BaseModel):
    name: Text = Field(min_length=1, max_length=128)
    scopes: list[str] = Field(min_length=1, max_length=100)


class TokenOut(ResponseBody):
    id: int
    name: str
    scopes: list[str]
    created_at: str | None
    revoked_at: str | None


class TokenCreatedOut(ResponseBody):
    id: int
    name: str
    scopes: list[str]
    created_at: str | None
    token: str = Field(description="The bearer token; shown only in this answer")


class TokenListOut(ResponseBody):
    items: list[TokenOut]
