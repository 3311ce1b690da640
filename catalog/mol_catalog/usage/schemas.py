"""Usage batches (what routers post) and usage answers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

from mol_catalog.util import ResponseBody
from mol_platform.contract import refs
from mol_platform.contract.refs import EXACT_NAME_PATTERN, MAX_VERSION
from mol_platform.contract.usage import (
    BATCH_ID_PATTERN,
    MAX_BATCH_ENTRIES,
    MAX_REQUESTS,
    MAX_TOKENS,
)

ADAPTER_PATTERN = f"^{EXACT_NAME_PATTERN}/{EXACT_NAME_PATTERN}$"


def _adapter(value: str) -> str:
    ns, sep, name = value.partition("/")
    if not sep or not refs.is_valid_name(ns) or not refs.is_valid_name(name):
        raise ValueError(f"invalid adapter {value[:80]!r}: expected namespace/name; "
                         f"{refs.NAME_RULE}")
    return value


def _in_utc(value: datetime) -> datetime:
    """In UTC, or refused (a timestamp whose UTC form leaves the calendar)."""
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValueError("timestamp out of range") from None


class UsageEntry(BaseModel):
    """One version's use since the router's last batch, on one UTC day (the day of
    ``last_used``)."""

    model_config = ConfigDict(extra="forbid")

    adapter: Annotated[str, AfterValidator(_adapter), Field(
        max_length=127, examples=["acme/coding"],
        json_schema_extra={"pattern": ADAPTER_PATTERN})]
    version: int = Field(ge=1, le=MAX_VERSION)
    requests: int = Field(ge=1, le=MAX_REQUESTS)
    input_tokens: int = Field(ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(ge=0, le=MAX_TOKENS)
    last_used: Annotated[AwareDatetime, AfterValidator(_in_utc)]


class UsageBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_id: str = Field(pattern=f"^{BATCH_ID_PATTERN}$", description=(
        "Chosen by the reporter, unique per batch; a batch id seen before is answered "
        "without counting again (retries are safe)"))
    entries: list[UsageEntry] = Field(min_length=1, max_length=MAX_BATCH_ENTRIES)


class UsageBatchOut(ResponseBody):
    batch_id: str
    duplicate: bool = Field(description="The batch was counted before; nothing changed")
    counted: int = Field(description="Entries added to the roll-ups")
    expired: int = Field(description="Entries older than the retention window (dropped)")
    unknown: list[str] = Field(description="ns/name@vN of entries naming no version "
                               "(deleted meanwhile); at most 100")


class UsageTotals(ResponseBody):
    requests: int
    input_tokens: int
    output_tokens: int
    last_used: str | None


class VersionUsageOut(UsageTotals):
    version: int


class DailyUsageOut(UsageTotals):
    version: int
    day: str = Field(description="UTC date, YYYY-MM-DD")


class AdapterUsageOut(ResponseBody):
    adapter: str
    days: int
    total: UsageTotals
    versions: list[VersionUsageOut]
    daily: list[DailyUsageOut]


class UsageItem(UsageTotals):
    adapter: str
    version: int | None = Field(description="None when grouped by adapter")


class UsagePageOut(ResponseBody):
    days: int
    items: list[UsageItem]
    next_offset: int | None
