"""Token request bodies."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from mol_catalog.util import ResponseBody
from mol_platform.contract.refs import SCOPE_PATTERN

# Printable, one line, no escape characters: a name is shown in `mol catalog token list`
# and in the log, where a newline or an ANSI escape would forge lines of their own.
TOKEN_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}"
# The start of a token name, as ``GET /v1/tokens?prefix=`` takes it (the same characters).
TOKEN_NAME_PREFIX = r"^[A-Za-z0-9._:@/+-]*$"
TOKEN_NAME_RULE = ("use 1-128 letters, digits, '.', '_', ':', '@', '/', '+' or '-', starting "
                   "with a letter or digit")
_TOKEN_NAME = re.compile(TOKEN_NAME_PATTERN)


def _token_name(value: str) -> str:
    if _TOKEN_NAME.fullmatch(value) is None:
        raise ValueError(f"invalid token name {value[:40]!r}: {TOKEN_NAME_RULE}")
    return value


# The patterns document what the server checks (the name here, 422; each scope with
# ``refs.check_scope``, 400).
TokenName = Annotated[str, AfterValidator(_token_name),
                      Field(json_schema_extra={"pattern": f"^{TOKEN_NAME_PATTERN}$"})]
Scope = Annotated[str, Field(json_schema_extra={"pattern": f"^{SCOPE_PATTERN}$"})]


class TokenCreate(BaseModel):
    name: TokenName
    scopes: list[Scope] = Field(min_length=1, max_length=100)


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
