"""How the ``MoLDeployment`` spec's fields are checked, each check said once for both sides.

The API server decides at ``kubectl apply`` from the CRD (schema patterns, bounds and
CEL rules in ``x-kubernetes-validations``); the operator and ``mol up`` decide from the
spec model. Both take their patterns, bounds and messages from here, so the two lines
refuse the same specs with the same field names.

Kubernetes evaluates ``pattern`` and CEL's ``matches`` as a search (unanchored), so
every schema pattern here is anchored; the model uses ``fullmatch`` on the bare form.
CEL rules stay in core CEL (``has``, ``size``, ``matches``, ``contains``, macros), guard
optional fields with ``has(x) ? ... : true`` (never evaluating what is absent), and
every list and string they reach is bounded, so the API server's cost estimate stays
far under its limits.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from mol_platform.contract import evals
from mol_platform.contract.refs import (
    ALIAS_PATTERN,
    DIGEST_PATTERN,
    DNS_LABEL_PATTERN,
    MAX_VERSION,
    NAME_PATTERN,
    NAME_RULE,
    REVISION_PATTERN,
    number_pattern,
)

DNS_1035_PATTERN = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
SUBDOMAIN_PATTERN = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
LABEL_VALUE_PATTERN = r"(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
METRIC_PATTERN = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
IMAGE_PATTERN = r"[^\s]+"
URI_PATTERN = r"\S(?:.*\S)?"
# A weights URI with a scheme (what urlparse sees as one) must be one the engine reads.
URI_SCHEME_PATTERN = r"^[a-zA-Z][a-zA-Z0-9+.-]*:"
URI_KNOWN_PATTERN = r"^(?:(?i:s3|pvc)://[^/?#]|(?i:hf)://.*[^/]|(?i:file):)"
DURATION_PATTERN = r"[0-9]{1,9}(?:s|m|h)"
# A Kubernetes resource quantity as people write CPU and memory: 500m, 2, 1.5, 2Gi, 512M.
QUANTITY_PATTERN = r"[0-9]{1,9}(?:\.[0-9]{1,9})?(?:m|k|Ki|M|Mi|G|Gi|T|Ti)?"
VERSION_REF_PATTERN = "v" + number_pattern(MAX_VERSION)
REF_PATTERN = (rf"{NAME_PATTERN}/{NAME_PATTERN}"
               rf"@(?:{DIGEST_PATTERN}|{VERSION_REF_PATTERN}|{ALIAS_PATTERN})")
# namespace/name@sha256:<64 hex>, the longest reference there is
REF_MAX_LENGTH = 63 + 1 + 63 + 1 + len("sha256:") + 64
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
TEXT_MAX = 1024
MAX_EXPERTS = 512
MAX_NAMESPACES = 128
MAX_CANARY_STEPS = 20
MAX_EXTRA_ARGS = 64
MAX_TOLERATIONS = 32
MAX_NODE_SELECTOR = 32

MSG_NO_DOTS = "must not contain '..'"
MSG_VERSION_REF = f"an @vN reference needs a version from 1 to {MAX_VERSION}"
MSG_STEPS = "canary.steps must be strictly increasing"
MSG_REPLICAS_XOR = "set either spec.replicas or spec.autoscaling, not both"
MSG_DEFAULT = "spec.router.default must name one of spec.experts"
MSG_CLASSIFIER = "spec.router.classifier.expert must name one of spec.experts"
MSG_AUTO = "spec.router.mode classifier (or auto) needs spec.router.classifier.expert"
MSG_SEMANTIC = ("spec.router.mode semantic and semantic-then-classifier need "
                "spec.router.semantic.experts")
MSG_GPUS = ("spec.nodePool.gpusPerReplica must be >= spec.engine.tensorParallelSize "
            "(0, a CPU engine, needs tensorParallelSize 1)")
MSG_CPU_LORAS = "spec.engine.maxCpuLoras must be >= spec.engine.maxLoras"
MSG_EMBEDDING = ("set either spec.router.semantic.embeddingsUrl (a server of your own) or "
                 "spec.router.semantic.engine (the one the operator runs), not both")
MSG_MIN_MAX = "spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas"
MSG_URI = ("baseModel.uri: use s3://<bucket>/<prefix>, pvc://<claim>/<path>, "
           "hf://<org>/<model>, file://<path> or a path in the image")
MSG_NAME = ("metadata.name must be a DNS-1035 label: at most 63 lowercase letters, digits "
            "and '-', starting with a letter and ending with a letter or digit (the "
            "deployment's Services carry it)")


def anchored(pattern: str) -> str:
    """The schema form of a pattern: Kubernetes searches, a field must match whole."""
    return f"^{pattern}$"


def cel(rule: str, message: str, *, field_path: str | None = None,
        reason: str | None = None, optional_old_self: bool = False) -> dict[str, Any]:
    """One ``x-kubernetes-validations`` entry. ``reason`` is the API's error type
    (``FieldValueInvalid`` by default, ``FieldValueForbidden``, ``FieldValueRequired``,
    ``FieldValueDuplicate``); ``field_path`` points the error at a field below the rule."""
    out: dict[str, Any] = {"rule": rule, "message": message}
    if field_path is not None:
        out["fieldPath"] = field_path
    if reason is not None:
        out["reason"] = reason
    if optional_old_self:
        out["optionalOldSelf"] = True
    return out


def schema(*, pattern: str | None = None, max_length: int | None = None,
           rules: tuple[dict[str, Any], ...] = (), **extra: Any) -> Any:
    """Field metadata that only the CRD needs (the model checks the same with a validator)."""
    out: dict[str, Any] = dict(extra)
    if pattern is not None:
        out["pattern"] = anchored(pattern)
    if max_length is not None:
        out["maxLength"] = max_length
    if rules:
        out["x-kubernetes-validations"] = list(rules)
    return Field(json_schema_extra=out)


def matching(pattern: str, what: str, rule: str, max_length: int) -> AfterValidator:
    """The model's side of a pattern: ``<what> '<value>' must be <rule>``."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > max_length or compiled.fullmatch(value) is None:
            raise ValueError(f"{what} {value[:80]!r} must be {rule}")
        return value

    return AfterValidator(check)


def _no_dots(what: str) -> AfterValidator:
    def check(value: str) -> str:
        if ".." in value:
            raise ValueError(f"{what} {value[:80]!r} {MSG_NO_DOTS}")
        return value

    return AfterValidator(check)


_NO_DOTS_RULE = cel("!self.contains('..')", MSG_NO_DOTS)
_DNS_RULE = ("a DNS label: lowercase letters, digits and '-', starting and ending with a "
             "letter or digit, at most 63 characters")
_NAME_RULE = NAME_RULE.removeprefix("use ")

ExpertName = Annotated[str, matching(DNS_LABEL_PATTERN, "expert name", _DNS_RULE, LABEL_MAX),
                       schema(pattern=DNS_LABEL_PATTERN, max_length=LABEL_MAX)]
"""An expert's name: a DNS label (it appears in headers, metrics and config keys)."""

CatalogName = Annotated[str, matching(NAME_PATTERN, "name", _NAME_RULE, LABEL_MAX),
                        _no_dots("name"),
                        schema(pattern=NAME_PATTERN, max_length=LABEL_MAX,
                               rules=(_NO_DOTS_RULE,))]
"""A catalog name (namespace, base model): refs.py's name form."""

Revision = Annotated[str, matching(REVISION_PATTERN, "baseModel.revision",
                                   "1-128 letters, digits, '.', '_' or '-'", 128),
                     schema(pattern=REVISION_PATTERN, max_length=128)]

ObjectName = Annotated[str, matching(SUBDOMAIN_PATTERN, "object name",
                                     "a DNS-1123 subdomain (lowercase, digits, '-', '.')",
                                     SUBDOMAIN_MAX),
                       schema(pattern=SUBDOMAIN_PATTERN, max_length=SUBDOMAIN_MAX)]
"""The name of a Secret (or any namespaced object) in the deployment's namespace."""

def _known_scheme(value: str) -> str:
    if re.match(URI_SCHEME_PATTERN, value) and not re.match(URI_KNOWN_PATTERN, value):
        raise ValueError(f"{MSG_URI}; got {value[:80]!r}")
    return value


WeightsUri = Annotated[str, matching(URI_PATTERN, "baseModel.uri", "s3://bucket/prefix, "
                                     "pvc://claim/path, hf://org/model or a path, not empty "
                                     "and without surrounding blanks", TEXT_MAX),
                       AfterValidator(_known_scheme),
                       schema(pattern=URI_PATTERN, max_length=TEXT_MAX, rules=(cel(
                           f"!self.matches('{URI_SCHEME_PATTERN}') || "
                           f"self.matches('{URI_KNOWN_PATTERN}')", MSG_URI),))]

Quantity = Annotated[str, matching(QUANTITY_PATTERN, "resource quantity",
                                   "a Kubernetes quantity such as 500m, 2, 512Mi or 2Gi", 32),
                     schema(pattern=QUANTITY_PATTERN, max_length=32)]
"""A CPU or memory amount of a rendered container."""

ImageRef = Annotated[str, matching(IMAGE_PATTERN, "engine.image", "an image reference "
                                   "without blanks, at most 512 characters", 512),
                     schema(pattern=IMAGE_PATTERN, max_length=512)]

EvalSuite = Annotated[str, matching(evals.SUITE_PATTERN, "gate suite",
                                    evals.SUITE_RULE.removeprefix("use "), LABEL_MAX),
                      schema(pattern=evals.SUITE_PATTERN, max_length=LABEL_MAX)]
"""An eval suite's name, as ``mol catalog eval attach --suite`` takes it."""
EvalSuiteVersion = Annotated[str, matching(evals.SUITE_VERSION_PATTERN, "gate suiteVersion",
                                           evals.SUITE_VERSION_RULE.removeprefix("use "),
                                           LABEL_MAX),
                             schema(pattern=evals.SUITE_VERSION_PATTERN, max_length=LABEL_MAX)]
EvalMetric = Annotated[str, matching(evals.METRIC_PATTERN, "gate metric",
                                     evals.METRIC_RULE.removeprefix("use "), 64),
                       schema(pattern=evals.METRIC_PATTERN, max_length=64)]
"""A metric of an eval report."""
MAX_GATES = 16  # promotion gates of one canary

MetricName = Annotated[str, matching(METRIC_PATTERN, "autoscaling.metric",
                                     "a Prometheus metric name", 200),
                       schema(pattern=METRIC_PATTERN, max_length=200)]

Duration = Annotated[str, matching(DURATION_PATTERN, "canary.interval",
                                   "a number and s, m or h, e.g. 5m", 16),
                     schema(pattern=DURATION_PATTERN, max_length=16)]

LabelValue = Annotated[str, matching(LABEL_VALUE_PATTERN, "nodeSelector value",
                                     "a label value (at most 63 letters, digits, '-', '_', "
                                     "'.', starting and ending alphanumeric)", LABEL_MAX),
                       schema(pattern=LABEL_VALUE_PATTERN, max_length=LABEL_MAX)]

ARG_RULES = schema(max_length=TEXT_MAX)
"""Bounds of one ``engine.extraArgs`` entry."""

REF_RULES = schema(pattern=REF_PATTERN, max_length=REF_MAX_LENGTH, rules=(
    _NO_DOTS_RULE,
    cel(f"!self.matches('@v[0-9]+$') || self.matches('@{VERSION_REF_PATTERN}$')",
        MSG_VERSION_REF),
))
"""The CRD's side of an adapter reference (the model's side is ``AdapterRef.parse``)."""


def steps_rule() -> dict[str, Any]:
    """Strictly increasing steps, in core CEL: CEL has no index range, so the indexes
    are a literal list as long as the longest allowed list."""
    indexes = ", ".join(str(i) for i in range(MAX_CANARY_STEPS - 1))
    return cel(f"[{indexes}].all(i, i + 1 < size(self) ? self[i] < self[i + 1] : true)",
               MSG_STEPS)


METADATA_NAME_RULE = cel(
    f"oldSelf.hasValue() || (self.metadata.name.size() <= {LABEL_MAX}"
    f" && self.metadata.name.matches('{anchored(DNS_1035_PATTERN)}'))",
    MSG_NAME, optional_old_self=True)
"""The root rule on ``metadata.name``: checked on create only (a name never changes, and
an object stored before the rule must stay updatable, finalizers included)."""
