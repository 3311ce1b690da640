"""Webhook bodies. The patterns are what the server checks (``service.check_url``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from mol_catalog.util import ResponseBody

EVENT_KINDS = ("version.published", "version.yanked", "version.deleted", "alias.moved")
EventKind = Literal["version.published", "version.yanked", "version.deleted", "alias.moved"]
PORT = ("(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
        "|[1-9][0-9]{0,3})")
# http or https, a host name or IPv4 address, a port, a path and query: no user or
# password (no '@' anywhere), no spaces, no fragment.
URL_PATTERN = (rf"https?://[A-Za-z0-9](?:[A-Za-z0-9.-]{{0,251}}[A-Za-z0-9])?(?::{PORT})?"
               r"(?:/[A-Za-z0-9._~:/?\[\]!$&'()*+,;=%-]*)?")
MAX_URL = 2048
SECRET_PATTERN = r"[!-~]{16,256}"
_URL = re.compile(URL_PATTERN)
_SECRET = re.compile(SECRET_PATTERN)


def _url(value: str) -> str:
    if _URL.fullmatch(value) is None:
        raise ValueError("must be an http:// or https:// URL with a host, without user or "
                         "password ('@'), spaces or fragment")
    return value


def _secret(value: str) -> str:
    if _SECRET.fullmatch(value) is None:
        raise ValueError("must be 16 to 256 printable ASCII characters without spaces "
                         "(e.g. openssl rand -hex 32)")
    return value


Url = Annotated[str, AfterValidator(_url), Field(max_length=MAX_URL, json_schema_extra={
    "pattern": f"^{URL_PATTERN}$"})]
Secret = Annotated[str, AfterValidator(_secret), Field(
    json_schema_extra={"pattern": f"^{SECRET_PATTERN}$"}, description=(
        "Signs every delivery (X-Mol-Signature); stored, never returned"))]


class WebhookCreate(BaseModel):
    url: Url
    secret: Secret
    events: list[EventKind] = Field(min_length=1, max_length=len(EVENT_KINDS))


class WebhookOut(ResponseBody):
    id: int
    namespace: str
    url: str
    events: list[str]
    created_by: str | None
    created_at: str | None


class WebhookListOut(ResponseBody):
    items: list[WebhookOut]


class DeliveryOut(ResponseBody):
    delivery_id: str
    event_id: int
    status: str = Field(description="pending | delivered | failed")
    attempts: int
    next_attempt_at: str | None
    last_status: int | None = Field(description="The receiver's last HTTP status")
    last_error: str | None
    created_at: str | None
    delivered_at: str | None


class DeliveryListOut(ResponseBody):
    items: list[DeliveryOut]
