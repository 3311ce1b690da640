"""Signing-key and signature-policy request and response bodies."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from mol_catalog.util import ResponseBody, Text
from mol_platform.contract.model_signature import KEY_ID_PATTERN, MAX_PUBLIC_KEY_BYTES
from mol_platform.contract.refs import NAME_PATTERN


def _full(pattern: str, rule: str) -> AfterValidator:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if compiled.fullmatch(value) is None:
            raise ValueError(f"{value[:80]!r}: {rule}")
        return value

    return AfterValidator(check)


# The patterns document what the validators check with a full match (422).
KeyId = Annotated[str, _full(KEY_ID_PATTERN, "a key id is 64 lowercase hex digits"), Field(
    json_schema_extra={"pattern": f"^{KEY_ID_PATTERN}$"}, description=(
        "sha256 hex of the key's PEM SubjectPublicKeyInfo (the hint model-signing writes "
        "into a signature)"))]
KeyName = Annotated[str, _full(NAME_PATTERN, "use 1-63 lowercase letters, digits, '.', '_' "
                               "or '-', starting and ending with a letter or digit"), Field(
    json_schema_extra={"pattern": f"^{NAME_PATTERN}$"},
    description="a label for people, e.g. release-2026")]


class KeyAdd(BaseModel):
    name: KeyName
    public_key: Text = Field(min_length=1, max_length=MAX_PUBLIC_KEY_BYTES, description=(
        "PEM public key on P-256, P-384 or P-521 (openssl ec -in key.pem -pubout)"))


class KeyOut(ResponseBody):
    namespace: str
    key_id: str
    name: str
    public_key: str
    created_by: str | None
    created_at: str | None
    revoked_at: str | None


class KeyListOut(ResponseBody):
    items: list[KeyOut]


class PolicyPut(BaseModel):
    require_signatures: bool
    keys: list[KeyId] | None = Field(default=None, max_length=100, description=(
        "only these of the namespace's keys may sign; null: any key registered and "
        "not revoked"))


class PolicyOut(ResponseBody):
    namespace: str
    require_signatures: bool
    keys: list[str] | None
