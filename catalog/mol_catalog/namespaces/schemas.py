"""Namespace policy bodies."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from mol_catalog.util import ResponseBody
from mol_platform.contract.evals import SUITE_PATTERN, SUITE_RE
from mol_platform.contract.refs import ALIAS_PATTERN, ALIAS_RE


def _alias(value: str) -> str:
    if ALIAS_RE.fullmatch(value) is None:
        raise ValueError(f"invalid alias {value[:63]!r}: use 1-63 lowercase letters, digits, "
                         "'_' or '-', starting with a letter")
    return value


# The pattern is the whole rule: a name no alias can take (``latest``, ``v3``) may be
# listed, and protects nothing.
Alias = Annotated[str, AfterValidator(_alias), Field(
    max_length=63, json_schema_extra={"pattern": f"^{ALIAS_PATTERN}$"})]


def _suite(value: str) -> str:
    if SUITE_RE.fullmatch(value) is None:
        raise ValueError(f"invalid eval suite {value[:63]!r}: use 1-63 lowercase letters, "
                         "digits, '.', '_' or '-', starting and ending with a letter or digit")
    return value


Suite = Annotated[str, AfterValidator(_suite), Field(
    max_length=63, json_schema_extra={"pattern": f"^{SUITE_PATTERN}$"})]


class ProtectedPut(BaseModel):
    protected_aliases: list[Alias] = Field(max_length=100, description=(
        "Aliases whose moves are checked (empty: none); replaces the current list"))
    required_evals: list[Suite] = Field(default_factory=list, max_length=32, description=(
        "Eval suites a protected alias's target version must have a report of (mol "
        "catalog eval attach); replaces the current list"))


class ProtectedOut(ResponseBody):
    namespace: str
    protected_aliases: list[str]
    required_evals: list[str]
    default: bool = Field(description="True: the namespace has no policy of its own yet "
                          "(only 'stable' is protected)")
    updated_by: str | None
    updated_at: str | None
