"""Request and response bodies of ``/v1/namespaces/{ns}/tools`` (the clients' typed
answers are ``mol_platform.contract.tool_answers``'s)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from mol_catalog.util import ResponseBody, Text
from mol_platform.contract import tools as tc
from mol_platform.contract.refs import MAX_VERSION


def _lineage(value: str) -> str:
    try:
        return tc.check_lineage_value(value, "lineage value")
    except tc.ToolError as exc:
        raise ValueError(str(exc)) from None


Lineage = Annotated[str, AfterValidator(_lineage),
                    Field(max_length=128, json_schema_extra={"pattern": f"^{tc.LINEAGE_PATTERN}$"})]


class ToolPublish(BaseModel):
    """A proposed tool: one Python function and its JSON-schema parameters, with the
    session that wrote it."""

    model_config = ConfigDict(extra="forbid")

    source: Text = Field(min_length=1, max_length=tc.MAX_SOURCE_CHARS,
                         description="Python source defining the function named by the path")
    description: Text | None = Field(
        default=None, max_length=tc.MAX_DESCRIPTION_CHARS,
        description="What the model is told the tool does; default: the function's docstring")
    parameters: dict[str, Any] = Field(description="JSON schema of the arguments (an object "
                                       "schema); stored as given, checked as advice")
    example: dict[str, Any] | None = Field(
        default=None, description="Arguments of one call the sandbox check will run")
    session_id: Lineage | None = Field(default=None, description="The sandbox session that "
                                       "wrote the function")
    deployment: Lineage | None = Field(default=None, description="Its MoLDeployment")
    expert: Lineage | None = Field(default=None, description="The expert that wrote it")
    tenant: Lineage | None = Field(default=None, description="The tenant the session belongs to")
    signature: Text | None = Field(
        default=None, max_length=64 << 10,
        description=f"A model-signing signature of the document as file {tc.DOCUMENT_FILE!r}")


def _number(value: Any) -> Any:
    """A JSON number (1 or 1.0, as JSON Schema's integer), never a string or boolean."""
    if isinstance(value, str | bool):
        raise ValueError("a version is a JSON integer, not a string or boolean")
    return value


class ToolApprove(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Annotated[int, BeforeValidator(_number)] = Field(
        ge=1, le=MAX_VERSION, description="The version to approve")
    force: bool = Field(default=False, description="Approve past refusals (admin; on record)")


class ToolCheckOut(ResponseBody):
    name: str = Field(description="parses, defines_function, schema, names_match, "
                      "example_runs")
    ok: bool | None = Field(description="null: not run")
    detail: str


class ToolLineageOut(ResponseBody):
    session_id: str | None
    deployment: str | None
    expert: str | None
    tenant: str | None


class ToolVersionOut(ResponseBody):
    namespace: str
    name: str
    version: int
    digest: str = Field(description='"sha256:" + the sha256 of the stored document')
    description: str
    parameters: dict[str, Any]
    source: str
    example: dict[str, Any] | None
    checks: list[ToolCheckOut] = Field(description="Advice for the reviewer, not a verdict")
    signed: bool
    signed_by: str | None
    lineage: ToolLineageOut
    approved: bool = Field(description="The 'approved' alias names this version")
    size_bytes: int
    created_by: str | None
    created_at: datetime


class ToolVersionListOut(ResponseBody):
    items: list[ToolVersionOut] = Field(description="Newest first")


class ToolItemOut(ResponseBody):
    namespace: str
    name: str
    latest_version: int
    latest: ToolVersionOut
    approved_version: int | None = Field(description="null: no version is approved")
    updated_at: datetime


class ToolListOut(ResponseBody):
    items: list[ToolItemOut] = Field(description="By name")


class ToolApprovalOut(ResponseBody):
    namespace: str
    name: str
    alias: str
    version: int | None = Field(description="The approved version (null: withdrawn)")
    previous: int | None = Field(description="The version approved before (null: none)")
    digest: str | None
    forced: bool
    overridden: list[dict[str, Any]]


class ApprovedToolOut(ResponseBody):
    namespace: str
    name: str
    version: int
    digest: str
    document: str = Field(description="The stored document, exactly (ASCII JSON): a loader "
                          "hashes these bytes and compares them with digest")
    signature: str | None
    signed_by: str | None
    signer_key: str | None = Field(description="The PEM of the signing key")
    signer_revoked: bool
    approved_by: str | None
    approved_at: datetime | None


class ApprovedToolListOut(ResponseBody):
    items: list[ApprovedToolOut] = Field(description="By name")
    missing: list[str] = Field(description="Names asked for that have no approved version")
