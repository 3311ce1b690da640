"""Service settings: one object, read from the environment with the prefix MOL_CATALOG_."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

GIB = 1024**3


class CatalogSettings(BaseSettings):
    """Everything the catalog needs to start; flags of ``mol catalog serve`` override these."""

    model_config = SettingsConfigDict(env_prefix="MOL_CATALOG_", extra="ignore")

    db_url: str = "sqlite:///.mol/catalog.db"
    blob_url: str = "file://.mol/blobs"
    s3_endpoint_url: str | None = None
    auth: Literal["on", "off"] = "on"
    admin_token: str | None = None
    max_upload_bytes: int = GIB
    public_url: str | None = None
    migrate: bool = True
    presign_seconds: int = 3600
    pool_size: int = 10
    # Ids a search for a common term scans in key order before the trigram index takes
    # over; 0: the index only.
    search_window: int = Field(default=20_000, ge=0)
    # Random names per process that tell rare search terms (straight to the trigram
    # index) from common ones; 0: every term is scanned for first.
    search_sample: int = Field(default=4000, ge=0)

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_words(cls, value: object) -> object:
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str):
            low = value.strip().lower()
            if low in {"1", "true", "yes", "on"}:
                return "on"
            if low in {"0", "false", "no", "off"}:
                return "off"
        return value

    @property
    def auth_enabled(self) -> bool:
        return self.auth == "on"
