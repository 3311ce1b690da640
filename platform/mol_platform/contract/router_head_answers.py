"""The catalog's answers about router heads: the clients' typed answers (re-exported by
:mod:`mol_platform.contract.catalog_models`); the document itself is
:mod:`mol_platform.contract.router_heads`'s."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields a newer catalog adds are kept


class RouterHeadVersion(_Answer):
    """One immutable version of a router head: its digest and what its document says."""

    namespace: str
    name: str
    version: int
    digest: str
    experts: list[str]
    embedding_model: str
    dims: int
    ngram_dims: int  # the n-gram inputs: ngrams.dims per gram length (0: no n-grams)
    data_digest: str | None  # training.dataDigest
    source: str | None  # training.source
    cross_validation: dict[str, Any] | None  # training.crossValidation
    size_bytes: int  # of the stored (canonical) document
    created_by: str | None
    created_at: datetime


class RouterHeadVersionList(_Answer):
    items: list[RouterHeadVersion]  # newest first


class RouterHeadAlias(RouterHeadVersion):
    """The version an alias names, and the alias."""

    alias: str


class RouterHeadAliasSet(RouterHeadAlias):
    previous: int | None  # where the alias pointed before (None: it is new)


class RouterHeadAliasItem(_Answer):
    alias: str
    version: int
    updated_at: datetime


class RouterHeadAliasList(_Answer):
    items: list[RouterHeadAliasItem]


class RouterHeadAliasDeleted(_Answer):
    namespace: str
    name: str
    alias: str
    version: int  # where it pointed


class RouterHeadItem(_Answer):
    """A head name with its latest version and its aliases."""

    namespace: str
    name: str
    latest_version: int
    latest: RouterHeadVersion
    aliases: dict[str, int]
    updated_at: datetime


class RouterHeadList(_Answer):
    items: list[RouterHeadItem]  # by name
