"""Router head bodies: the alias move's request, and the answers as OpenAPI documents
them (the clients' typed answers are ``mol_platform.contract.router_heads``'s)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from mol_catalog.util import ResponseBody
from mol_platform.contract.refs import MAX_VERSION


class HeadAliasPut(BaseModel):
    version: int = Field(ge=1, le=MAX_VERSION, description="The version the alias names")


class RouterHeadVersionOut(ResponseBody):
    namespace: str
    name: str
    version: int
    digest: str = Field(description='"sha256:" + the sha256 of the stored document')
    experts: list[str]
    embedding_model: str = Field(description="embedding.model: what the router must embed "
                                 "turns with")
    dims: int = Field(description="embedding.dims")
    ngram_dims: int = Field(description=(
        "The n-gram inputs: ngrams.dims per gram length (ngrams.n and each of ngrams.also); "
        "0 when the head has no n-grams"))
    data_digest: str | None = Field(description="training.dataDigest: the labelled data")
    source: str | None = Field(description="training.source")
    cross_validation: dict[str, Any] | None = Field(description="training.crossValidation")
    size_bytes: int = Field(description="Of the stored (canonical JSON) document")
    created_by: str | None
    created_at: datetime


class RouterHeadVersionListOut(ResponseBody):
    items: list[RouterHeadVersionOut] = Field(description="Newest first")


class RouterHeadAliasOut(RouterHeadVersionOut):
    alias: str


class RouterHeadAliasSetOut(RouterHeadAliasOut):
    previous: int | None = Field(description="Where the alias pointed (null: it is new)")


class RouterHeadAliasItemOut(ResponseBody):
    alias: str
    version: int
    updated_at: datetime


class RouterHeadAliasListOut(ResponseBody):
    items: list[RouterHeadAliasItemOut]


class RouterHeadAliasDeletedOut(ResponseBody):
    namespace: str
    name: str
    alias: str
    version: int = Field(description="Where the alias pointed")


class RouterHeadItemOut(ResponseBody):
    namespace: str
    name: str
    latest_version: int
    latest: RouterHeadVersionOut
    aliases: dict[str, int]
    updated_at: datetime


class RouterHeadListOut(ResponseBody):
    items: list[RouterHeadItemOut] = Field(description="By name")
