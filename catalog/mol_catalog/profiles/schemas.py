"""Serving-profile request bodies."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mol_catalog.util import ResponseBody, Text


class ProfilePut(BaseModel):
    base_model: str = Field(description="name@revision (or name: its newest revision)")
    engine: Text = Field(min_length=1, max_length=128, description="e.g. vllm==0.32.0")
    max_lora_rank: int = Field(ge=1, le=65536)
    max_loras: int | None = Field(default=None, ge=1, le=2**31 - 1)
    supported_modules: list[Text] | None = Field(default=None, max_length=1000)
    require_signatures: bool = Field(default=False, description=(
        "engines serving this profile load only adapters whose model-signing signature "
        "verifies (resolve answers signature_required)"))


class ProfileOut(ResponseBody):
    name: str
    base_model: str
    engine: str
    max_lora_rank: int
    max_loras: int | None
    supported_modules: list[str] | None
    require_signatures: bool
    generation: int
    updated_at: str | None


class ProfileListOut(ResponseBody):
    items: list[ProfileOut]
