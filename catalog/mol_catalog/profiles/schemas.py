"""Serving-profile request bodies."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ProfilePut(BaseModel):
    base_model: str = Field(description="name@revision (or name: its newest revision)")
    engine: str = Field(min_length=1, max_length=128, description="e.g. vllm==0.32.0")
    max_lora_rank: int = Field(ge=1, le=65536)
    max_loras: int | None = Field(default=None, ge=1)
    supported_modules: list[str] | None = None
