"""The ``MoLDeployment`` custom resource spec (``mol.dev/v1alpha1``).

This is the model every component reads: the operator validates and renders it, ``mol
up`` runs it locally, the router's config derives from it. Field names are the CRD's
camelCase names; Python code uses snake_case. Validation here is what a user expects
at ``kubectl apply`` time, with messages that say what to change.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from mol_platform.contract.refs import DNS_LABEL_RE, AdapterRef, RefError, check_name

API_VERSION = "mol.dev/v1alpha1"
KIND = "MoLDeployment"
GROUP = "mol.dev"
PLURAL = "moldeployments"
SHORT_NAME = "mold"

# vLLM accepts only these for --max-lora-rank.
ALLOWED_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# What the CRD's interval fields accept (the schema's pattern): one number and unit.
_DURATION_RE = re.compile(r"^([0-9]+)(s|m|h)$")
_DURATION_PART = re.compile(r"([0-9]+)([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


def _check_ref(value: str) -> str:
    try:
        AdapterRef.parse(value)
    except RefError as exc:
        raise ValueError(str(exc)) from None
    return value


AdapterRefStr = Annotated[str, AfterValidator(_check_ref)]
"""An adapter reference (``ns/name@ref``) field, checked with the message users see."""


def parse_duration(value: str) -> int:
    """A duration as people write it -> seconds: bare seconds (``90``), one unit
    (``30s``, ``5m``, ``1h``, ``2d``) or several, largest first (``1h30m``); case and
    surrounding blanks ignored. ``ValueError`` names the accepted forms.

    The one duration parser of the platform: the CRD's intervals (whose schema allows
    only the one-unit form) and the CLI's ``--grace`` both use it."""
    text = value.strip().lower()
    if text.isascii() and text.isdigit():
        return int(text)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration {value[:40]!r}: use seconds or a number with s, "
                         "m, h or d, e.g. 90, 30s, 5m, 1h30m, 2d")
    return sum(int(n) * _DURATION_UNITS[u] for n, u in parts)


class BaseModelSpec(_Model):
    name: str
    revision: str | None = None
    uri: str
    # A Secret in the deployment's namespace with the credentials the weights need:
    # AWS_* keys for s3:// (synced by an init container), HF_TOKEN for hf://.
    secret_ref: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "base model name")

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("baseModel.uri must not be empty (s3://, pvc://, hf:// or a path)")
        return v


class EngineSpec(_Model):
    image: str = "ghcr.io/mol-platform/vllm-mol:0.32.0"
    max_loras: int = Field(default=4, ge=1, le=256)
    max_lora_rank: int = Field(
        default=64, json_schema_extra={"enum": list(ALLOWED_MAX_LORA_RANKS)}
    )
    max_cpu_loras: int | None = Field(default=32, ge=1)
    max_model_len: int | None = Field(default=None, ge=16)
    tensor_parallel_size: int = Field(default=1, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("max_lora_rank")
    @classmethod
    def _rank(cls, v: int) -> int:
        if v not in ALLOWED_MAX_LORA_RANKS:
            allowed = ", ".join(str(r) for r in ALLOWED_MAX_LORA_RANKS)
            raise ValueError(f"maxLoraRank {v} is not supported by vLLM; use one of {allowed}")
        return v

    @model_validator(mode="after")
    def _cpu_loras(self) -> EngineSpec:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"maxCpuLoras ({self.max_cpu_loras}) must be >= maxLoras ({self.max_loras})"
            )
        return self


class Toleration(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class NodePoolSpec(_Model):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    gpus_per_replica: int = Field(default=1, ge=0)


class AutoscalingSpec(_Model):
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(ge=1)
    metric: str = "vllm:num_requests_waiting"
    target: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _range(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"autoscaling.minReplicas ({self.min_replicas}) must be <= "
                f"maxReplicas ({self.max_replicas})"
            )
        return self


class CanaryAnalysis(_Model):
    max_error_rate: float = Field(default=0.02, ge=0.0, le=1.0)
    max_latency_ratio: float = Field(default=1.25, gt=0.0)


class CanarySpec(_Model):
    adapter: AdapterRefStr
    steps: list[int] = Field(default_factory=lambda: [10, 25, 50, 100], min_length=1)
    interval: str = Field(default="5m", json_schema_extra={"pattern": _DURATION_RE.pattern})
    analysis: CanaryAnalysis = Field(default_factory=CanaryAnalysis)

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        for a, b in itertools.pairwise(v):
            if b <= a:
                raise ValueError(f"canary.steps must be strictly increasing; got {v}")
        if v[0] <= 0 or v[-1] > 100:
            raise ValueError(f"canary.steps must be percentages in 1..100; got {v}")
        return v

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if _DURATION_RE.fullmatch(v) is None:
            raise ValueError(f"invalid duration {v[:40]!r}: use a number and s, m or h, e.g. 5m")
        return v

    @property
    def interval_seconds(self) -> int:
        return parse_duration(self.interval)


class ExpertSpec(_Model):
    name: str
    adapter: AdapterRefStr
    description: str = ""
    canary: CanarySpec | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not DNS_LABEL_RE.fullmatch(v):
            raise ValueError(
                f"expert name {v!r} must be a DNS label: lowercase letters, digits and '-', "
                "at most 63 characters"
            )
        return v


class ClassifierSpec(_Model):
    expert: str


class HandoffSpec(_Model):
    enabled: bool = False
    max_hops: int = Field(default=2, ge=1, le=8)


class SecretRef(_Model):
    secret_ref: str


# --- automatic routing: modes and the semantic signal ---------------------------------
RoutingMode = Literal["explicit", "classifier", "semantic", "semantic-then-classifier"]
SEMANTIC_MODES = frozenset({"semantic", "semantic-then-classifier"})
CLASSIFIER_MODES = frozenset({"classifier", "semantic-then-classifier"})
_MODE_ALIASES = {"auto": "classifier"}  # the classifier mode's first name, accepted
_ROUTING_MODES: list[Any] = [*get_args(RoutingMode), *_MODE_ALIASES]  # the CRD enum


def canonical_mode(value: object) -> object:
    """``auto`` (the classifier mode's first name) -> ``classifier``; others unchanged."""
    return _MODE_ALIASES.get(value, value) if isinstance(value, str) else value


class SemanticExpertSpec(_Model):
    name: str = Field(description="The expert these utterances stand for.")
    examples: list[Annotated[str, Field(min_length=1, max_length=2000)]] = Field(
        default_factory=list, max_length=256,
        description="Example user turns this expert should answer (embedded once per "
        "config); 8-30 varied ones, see docs/router.md.")
    keywords: list[Annotated[str, Field(min_length=2, max_length=80)]] = Field(
        default_factory=list, max_length=256,
        description="Words or phrases that, found in the user's turn, add to this "
        "expert's score.")


class SemanticSpec(_Model):
    model: str = Field(default="all-minilm-l6-v2", max_length=253,
                       description="The embedding model's served name.")
    embeddings_url: str | None = Field(
        default=None, max_length=2048, pattern=r"^https?://",
        description="An OpenAI-compatible embeddings server to use (its base URL); unset, "
        "mol up runs one on the packaged all-MiniLM-L6-v2.")
    threshold: float = Field(default=0.3, ge=-1.0, le=2.0,
                             description="The lowest winning score that decides.")
    margin: float = Field(default=0.0, ge=0.0, le=2.0,
                          description="How far the best score must lead the second.")
    experts: list[SemanticExpertSpec] = Field(
        min_length=1, max_length=64, description="Example utterances and keywords per expert.")


class RouterSpec(_Model):
    mode: RoutingMode = Field(
        default="explicit", json_schema_extra={"enum": _ROUTING_MODES},
        description="How model 'auto' picks the expert: explicit (the default expert), "
        "classifier (the classifier expert; 'auto' is its former name), semantic (example "
        "utterances), semantic-then-classifier.")
    semantic: SemanticSpec | None = Field(
        default=None, description="The semantic signal (modes semantic, "
        "semantic-then-classifier).")
    classifier: ClassifierSpec | None = None
    default: str | None = None
    handoff: HandoffSpec = Field(default_factory=HandoffSpec)
    api_keys: SecretRef | None = None
    replicas: int = Field(default=2, ge=0)

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, v: object) -> object:
        return canonical_mode(v)


class ServingSpec(_Model):
    mode: Literal["raw", "kserve"] = "raw"


class MoLDeploymentSpec(_Model):
    base_model: BaseModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    node_pool: NodePoolSpec = Field(default_factory=NodePoolSpec)
    replicas: int | None = Field(default=None, ge=0)
    autoscaling: AutoscalingSpec | None = None
    adapter_namespaces: list[str] = Field(default_factory=list)
    experts: list[ExpertSpec] = Field(min_length=1)
    router: RouterSpec = Field(default_factory=RouterSpec)
    serving: ServingSpec = Field(default_factory=ServingSpec)

    @field_validator("adapter_namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            check_name(ns, "adapter namespace")
        return v

    @model_validator(mode="after")
    def _cross_field(self) -> MoLDeploymentSpec:
        if self.replicas is not None and self.autoscaling is not None:
            raise ValueError("set either replicas or autoscaling, not both")
        names = [e.name for e in self.experts]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"expert names must be unique; repeated: {', '.join(dupes)}")
        known = ", ".join(names)
        r = self.router
        if r.default is not None and r.default not in names:
            raise ValueError(f"router.default {r.default!r} is not an expert (experts: {known})")
        if r.classifier is not None and r.classifier.expert not in names:
            raise ValueError(
                f"router.classifier.expert {r.classifier.expert!r} is not an expert "
                f"(experts: {known})"
            )
        if r.mode == "classifier" and r.classifier is None:
            raise ValueError("router.mode 'classifier' needs router.classifier.expert")
        if r.mode in SEMANTIC_MODES and r.semantic is None:
            raise ValueError(f"router.mode {r.mode!r} needs router.semantic.experts")
        for s in r.semantic.experts if r.semantic is not None else ():
            if s.name not in names:
                raise ValueError(f"router.semantic expert {s.name!r} is not an expert "
                                 f"(experts: {known})")
        gpus, tp = self.node_pool.gpus_per_replica, self.engine.tensor_parallel_size
        # gpusPerReplica 0 is a CPU engine (kind clusters, CI); it cannot shard.
        if gpus < tp and not (gpus == 0 and tp == 1):
            raise ValueError(
                f"nodePool.gpusPerReplica ({gpus}) must be >= engine.tensorParallelSize ({tp}):"
                " each replica shards the model over that many GPUs"
            )
        return self

    @property
    def effective_replicas(self) -> int:
        """The replica count to render: ``replicas``, else autoscaling's minimum, else 1."""
        if self.replicas is not None:
            return self.replicas
        if self.autoscaling is not None:
            return self.autoscaling.min_replicas
        return 1

    @property
    def default_expert(self) -> str:
        return self.router.default or self.experts[0].name

    def expert(self, name: str) -> ExpertSpec:
        for e in self.experts:
            if e.name == name:
                return e
        raise KeyError(name)


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str
    namespace: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not DNS_LABEL_RE.fullmatch(v):
            raise ValueError(f"metadata.name {v!r} must be a DNS label (lowercase, digits, '-')")
        return v


class MoLDeployment(BaseModel):
    """A whole ``MoLDeployment`` object as ``kubectl apply`` sends it."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)
    api_version: Literal["mol.dev/v1alpha1"] = Field(default="mol.dev/v1alpha1", alias="apiVersion")
    kind: Literal["MoLDeployment"] = "MoLDeployment"
    metadata: ObjectMeta
    spec: MoLDeploymentSpec

    @classmethod
    def from_yaml(cls, text: str) -> MoLDeployment:
        import yaml

        data: Any = yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ValueError("a MoLDeployment manifest must be a YAML mapping")
        return cls.model_validate(data)
