"""Eval report request and response bodies.

The patterns and limits are ``mol_platform.contract.evals``'s: the validators check them
with full matches (422 otherwise) and the JSON schema documents the same ones.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mol_catalog.util import ResponseBody, Text
from mol_platform.contract import evals
from mol_platform.contract.refs import DIGEST_PATTERN, RefError


def _checked(check: object) -> AfterValidator:
    def run(value: str) -> str:
        try:
            return check(value)  # type: ignore[operator, no-any-return]
        except RefError as exc:
            raise ValueError(str(exc)) from None
    return AfterValidator(run)


SuiteName = Annotated[str, _checked(evals.check_suite), Field(
    max_length=63, json_schema_extra={"pattern": f"^{evals.SUITE_PATTERN}$"})]
SuiteVersion = Annotated[str, _checked(evals.check_suite_version), Field(
    max_length=63, json_schema_extra={"pattern": f"^{evals.SUITE_VERSION_PATTERN}$"})]
MetricName = Annotated[str, _checked(evals.check_metric), Field(
    max_length=64, json_schema_extra={"pattern": f"^{evals.METRIC_PATTERN}$"})]
MetricValue = Annotated[float, Field(strict=True, allow_inf_nan=False,
                                     ge=-evals.MAX_METRIC_MAGNITUDE,
                                     le=evals.MAX_METRIC_MAGNITUDE)]
Digest = Annotated[str, _checked(lambda v: _digest(v)), Field(
    max_length=71, json_schema_extra={"pattern": f"^{DIGEST_PATTERN}$"})]


def _digest(value: str) -> str:
    if evals.DIGEST_RE.fullmatch(value) is None:
        raise RefError(f"invalid dataset digest {value[:80]!r}: expected sha256:<64 hex>")
    return value


class EvalAttach(BaseModel):
    """``POST /v1/adapters/{ns}/{name}/versions/{version}/evals``."""

    model_config = ConfigDict(extra="forbid")

    suite: SuiteName = Field(description="The evaluation suite, e.g. humaneval")
    suite_version: SuiteVersion = Field(default="1", description=(
        "The suite's own version; attaching the same suite and suite version again "
        "replaces the report"))
    metrics: dict[MetricName, MetricValue] = Field(
        min_length=1, max_length=evals.MAX_METRICS,
        description="Metric name -> value (finite numbers)",
        json_schema_extra={"additionalProperties": False, "propertyNames": {
            "pattern": f"^{evals.METRIC_PATTERN}$", "maxLength": 64}})
    dataset_digest: Digest | None = Field(default=None, description=(
        "sha256:<hex> of the evaluation data set"))
    judge_model: Text | None = Field(default=None, min_length=1,
                                     max_length=evals.MAX_JUDGE_CHARS, description=(
        "The model that judged the answers, for judged suites"))
    report: Text | None = Field(default=None, max_length=evals.MAX_REPORT_BYTES, description=(
        "A free-form report (text: Markdown, JSON Lines, ...), at most 1 MiB as UTF-8; "
        "stored in the blob store"))


class EvalOut(ResponseBody):
    adapter: str
    version: int
    suite: str
    suite_version: str
    metrics: dict[str, float]
    dataset_digest: str | None
    judge_model: str | None
    report_digest: str | None
    report_size: int | None
    created_by: str | None
    created_at: str | None


class EvalAttachedOut(EvalOut):
    created: bool
    replaced: bool


class EvalListOut(ResponseBody):
    items: list[EvalOut]
