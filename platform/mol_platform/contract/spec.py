"""The ``MoLDeployment`` custom resource spec (``mol.dev/v1alpha1``).

This is the model every component reads: the operator validates and renders it, ``mol
up`` runs it locally, the router's config derives from it. Field names are the CRD's
camelCase names; Python code uses snake_case. Validation here is what a user expects
at ``kubectl apply`` time, with messages that say what to change.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from mol_platform.contract.spec_base import AdapterRefStr, SpecModel, defaulted, rules
from mol_platform.contract.spec_router import (
    SEMANTIC_MODES,
    RouterSpec,
)
from mol_platform.contract.spec_rules import (
    ARG_RULES,
    DNS_1035_PATTERN,
    LABEL_MAX,
    MAX_CANARY_STEPS,
    MAX_EXPERTS,
    MAX_EXTRA_ARGS,
    MAX_GATES,
    MAX_NAMESPACES,
    MAX_NODE_SELECTOR,
    MAX_TOLERATIONS,
    MSG_AUTO,
    MSG_CLASSIFIER,
    MSG_CPU_LORAS,
    MSG_DEFAULT,
    MSG_GPUS,
    MSG_MIN_MAX,
    MSG_NAME,
    MSG_REPLICAS_XOR,
    MSG_SEMANTIC,
    MSG_STEPS,
    TEXT_MAX,
    CatalogName,
    Duration,
    EvalMetric,
    EvalSuite,
    EvalSuiteVersion,
    ExpertName,
    ImageRef,
    LabelValue,
    MetricName,
    ObjectName,
    Revision,
    WeightsUri,
    cel,
    steps_rule,
)
from mol_platform.contract.spec_sandbox import HarnessSpec

GROUP = "mol.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MoLDeployment"
PLURAL = "moldeployments"
SHORT_NAME = "mold"

# vLLM accepts only these for --max-lora-rank.
ALLOWED_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_DURATION_PART = re.compile(r"([0-9]+)([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_STEPS = (10, 25, 50, 100)
_DNS_1035_RE = re.compile(DNS_1035_PATTERN)


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


class BaseModelSpec(SpecModel):
    """The frozen base model every expert is a LoRA adapter of."""

    name: CatalogName
    """A base model registered in the catalog (``mol catalog base register``)."""
    revision: Revision | None = None
    """A pinned revision of the base; default: the catalog's current revision."""
    uri: WeightsUri
    """Where engines load the weights from: ``s3://bucket/prefix`` (synced by an init
    container), ``pvc://claim/path``, ``hf://org/model`` or a path in the image."""
    secret_ref: ObjectName | None = None
    """A Secret in the deployment's namespace with the credentials the weights need:
    AWS_* keys for s3://, HF_TOKEN for hf:// (passed to the engine with envFrom)."""


class EngineSpec(SpecModel):
    """The vLLM engines: each field maps to one vLLM flag."""

    model_config = ConfigDict(json_schema_extra=rules(
        cel("has(self.maxCpuLoras) ? self.maxCpuLoras >= self.maxLoras : true", MSG_CPU_LORAS,
            field_path=".maxCpuLoras")))

    image: ImageRef = "ghcr.io/mol-platform/vllm-mol:0.32.0"
    """The vLLM image, with the MoL resolver plugin installed (the project's engine image,
    deploy/images/engine.Dockerfile; runs as a non-root user)."""
    max_loras: int = Field(default=4, ge=1, le=256)
    """Adapters in one batch on the GPU (``--max-loras``)."""
    max_lora_rank: int = Field(
        default=64, json_schema_extra={"enum": list(ALLOWED_MAX_LORA_RANKS)}
    )
    """The largest adapter rank served (``--max-lora-rank``; vLLM's allowed values)."""
    max_cpu_loras: int | None = Field(default=32, ge=1, le=65536)
    """Adapters kept in host memory (``--max-cpu-loras``); null leaves vLLM's default."""
    max_model_len: int | None = Field(default=None, ge=16, le=16_777_216)
    """The context length (``--max-model-len``); default: the model's."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    """GPUs one replica shards the model over (``--tensor-parallel-size``)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    """The share of GPU memory vLLM may use (``--gpu-memory-utilization``)."""
    extra_args: list[Annotated[str, ARG_RULES]] = Field(default_factory=list,
                                                        max_length=MAX_EXTRA_ARGS)
    """More vLLM flags, passed after the ones above."""
    require_signatures: bool = False
    """Load only adapters whose model-signing signature verifies (the serving profile's
    ``require_signatures``: the resolver plugin checks the files before vLLM loads them)."""

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
            raise ValueError(f"{MSG_CPU_LORAS} ({self.max_cpu_loras} < {self.max_loras})")
        return self


class Toleration(BaseModel):
    """A Kubernetes toleration, passed to the engine pods as written."""

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)
    key: str | None = Field(default=None, max_length=317)
    """The taint key (empty with operator Exists: every taint)."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (the default)."""
    value: str | None = Field(default=None, max_length=LABEL_MAX)
    """The taint value, with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """The taint effect to tolerate; empty: all."""


class NodePoolSpec(SpecModel):
    """The GPU node pool the engines run on."""

    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict, max_length=MAX_NODE_SELECTOR,
        json_schema_extra={"maxProperties": MAX_NODE_SELECTOR})
    """Node labels an engine pod needs."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_TOLERATIONS)
    """Taints of the pool's nodes that engine pods tolerate."""
    gpus_per_replica: int = Field(default=1, ge=0, le=64)
    """``nvidia.com/gpu`` per engine replica; 0 is a CPU engine (kind clusters, CI)."""


class AutoscalingSpec(SpecModel):
    """Engine autoscaling: a KEDA ScaledObject on a Prometheus query of a vLLM metric."""

    model_config = ConfigDict(json_schema_extra=rules(
        cel("self.minReplicas <= self.maxReplicas", MSG_MIN_MAX, field_path=".minReplicas")))

    min_replicas: int = Field(default=1, ge=0, le=1000)
    """The fewest engines; 0 scales to zero (woken by the router's pending requests)."""
    max_replicas: int = Field(ge=1, le=1000)
    """The most engines."""
    metric: MetricName = "vllm:num_requests_waiting"
    """The vLLM metric summed over the engines."""
    target: float = Field(default=5.0, gt=0, le=1e9)
    """The metric's value per replica KEDA aims for."""

    @model_validator(mode="after")
    def _range(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"{MSG_MIN_MAX} ({self.min_replicas} > {self.max_replicas})")
        return self


class CanaryAnalysis(SpecModel):
    """When a canary counts as healthy; values at the limits pass."""

    max_error_rate: float = Field(default=0.02, ge=0.0, le=1.0)
    """The most canary 5xx per canary request."""
    max_latency_ratio: float = Field(default=1.25, gt=0.0, le=1000.0)
    """The most canary mean latency per stable mean latency."""


class PromotionGate(SpecModel):
    """An offline check a canary must pass before promotion: the canary version's eval
    report of ``suite`` must score ``metric`` at least ``minDelta`` above the stable
    version's (both reports from the catalog, ``mol catalog eval attach``)."""

    suite: EvalSuite
    """The eval suite both versions' reports must have."""
    metric: EvalMetric
    """The metric compared, e.g. pass@1."""
    min_delta: float = Field(default=0.0, ge=-1e6, le=1e6)
    """The least canary - stable difference that passes (0: no worse; negative: allows
    that much regression; a lower-is-better metric takes ``higherIsBetter: false``)."""
    higher_is_better: bool = True
    """False for metrics where less is better (loss, latency): the delta is then
    stable - canary."""
    suite_version: EvalSuiteVersion | None = None
    """Compare reports of this suite version only; default: the newest suite version
    both versions have."""


class CanarySpec(SpecModel):
    """A progressive rollout of another version of the expert's adapter."""

    adapter: AdapterRefStr
    """The version on trial (any reference; resolved in the catalog)."""
    steps: list[Annotated[int, Field(ge=1, le=100)]] = Field(
        default_factory=lambda: list(DEFAULT_STEPS), min_length=1,
        max_length=MAX_CANARY_STEPS, json_schema_extra={
            "default": list(DEFAULT_STEPS), "x-kubernetes-validations": [steps_rule()]})
    """Percent of the expert's traffic at each step, strictly increasing, in 1..100."""
    interval: Duration = "5m"
    """Time on each step: a number and s, m or h."""
    analysis: CanaryAnalysis = defaulted(CanaryAnalysis)
    """The health limits checked on every look."""
    gates: list[PromotionGate] = Field(default_factory=list, max_length=MAX_GATES)
    """Eval-report gates: the canary is promoted only when the live metrics are healthy
    and every gate holds; a missing or failing report pauses it before its last step."""

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        for a, b in itertools.pairwise(v):
            if b <= a:
                raise ValueError(f"{MSG_STEPS}; got {v}")
        return v

    @property
    def interval_seconds(self) -> int:
        return parse_duration(self.interval)


class ExpertSpec(SpecModel):
    """One expert: a LoRA adapter from the catalog, under a name clients can call."""

    name: ExpertName
    """The expert's name (a DNS label), unique in the deployment."""
    adapter: AdapterRefStr
    """``namespace/name@ref``: an alias (``stable``; ``latest`` = the newest ready
    version), a version (``v3``) or a digest (``sha256:...``)."""
    description: str = Field(default="", max_length=TEXT_MAX)
    """What the expert is for; the classifier reads it."""
    canary: CanarySpec | None = None
    """An optional progressive rollout of another version."""
    harness: bool = False
    """Offer this expert the code harness: a ``python`` tool run in an isolated sandbox
    session (``spec.harness`` sets the limits)."""


class ServingSpec(SpecModel):
    """How engines are run."""

    mode: Literal["raw", "kserve"] = "raw"
    """raw: a Deployment and a Service; kserve: a KServe LLMInferenceService."""


class MoLDeploymentSpec(SpecModel):
    """A base model on vLLM, LoRA experts from the catalog, and a router in front."""

    model_config = ConfigDict(json_schema_extra=rules(
        cel("!has(self.replicas) || !has(self.autoscaling)", MSG_REPLICAS_XOR,
            field_path=".autoscaling", reason="FieldValueForbidden"),
        cel("has(self.router.default) ? "
            "self.experts.exists(e, e.name == self.router.default) : true", MSG_DEFAULT,
            field_path=".router.default"),
        cel("has(self.router.classifier) ? "
            "self.experts.exists(e, e.name == self.router.classifier.expert) : true",
            MSG_CLASSIFIER,
            field_path=".router.classifier.expert"),
        cel("self.nodePool.gpusPerReplica >= self.engine.tensorParallelSize || "
            "(self.nodePool.gpusPerReplica == 0 && self.engine.tensorParallelSize == 1)",
            MSG_GPUS, field_path=".nodePool.gpusPerReplica"),
    ))

    base_model: BaseModelSpec
    """The base model."""
    engine: EngineSpec = defaulted(EngineSpec)
    """The vLLM engines."""
    node_pool: NodePoolSpec = defaulted(NodePoolSpec)
    """Where engines run."""
    replicas: int | None = Field(default=None, ge=0, le=1000)
    """Engine replicas (or autoscaling, not both); default 1."""
    autoscaling: AutoscalingSpec | None = None
    """Engine autoscaling (or replicas, not both)."""
    adapter_namespaces: list[CatalogName] = Field(
        default_factory=list, max_length=MAX_NAMESPACES,
        json_schema_extra={"x-kubernetes-list-type": "set"})
    """Catalog namespaces whose adapters clients may call by reference
    (``model: acme/support-bot@stable``): the multi-tenant pool."""
    experts: list[ExpertSpec] = Field(min_length=1, max_length=MAX_EXPERTS, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    """The experts, by unique name."""
    router: RouterSpec = defaulted(RouterSpec)
    """The router."""
    serving: ServingSpec = defaulted(ServingSpec)
    """How engines are run."""
    harness: HarnessSpec | None = None
    """The code harness's sandboxes (limits, runtime class, egress allowlist, warm pool);
    used when an expert sets ``harness: true``."""

    @field_validator("adapter_namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        dupes = sorted({ns for ns in v if v.count(ns) > 1})
        if dupes:
            raise ValueError(f"adapterNamespaces must be unique; repeated: {', '.join(dupes)}")
        return v

    @model_validator(mode="after")
    def _cross_field(self) -> MoLDeploymentSpec:
        if self.replicas is not None and self.autoscaling is not None:
            raise ValueError(MSG_REPLICAS_XOR)
        names = [e.name for e in self.experts]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"expert names must be unique; repeated: {', '.join(dupes)}")
        known = ", ".join(names)
        r = self.router
        if r.default is not None and r.default not in names:
            raise ValueError(f"{MSG_DEFAULT}: {r.default!r} is not one (experts: {known})")
        if r.classifier is not None and r.classifier.expert not in names:
            raise ValueError(f"{MSG_CLASSIFIER}: {r.classifier.expert!r} is not one "
                             f"(experts: {known})")
        if r.mode == "classifier" and r.classifier is None:
            raise ValueError(MSG_AUTO)
        if r.mode in SEMANTIC_MODES and r.semantic is None:
            raise ValueError(MSG_SEMANTIC)
        for s in r.semantic.experts if r.semantic is not None else ():
            if s.name not in names:
                raise ValueError(f"spec.router.semantic.experts: {s.name!r} is not an expert "
                                 f"(experts: {known})")
        gpus, tp = self.node_pool.gpus_per_replica, self.engine.tensor_parallel_size
        # gpusPerReplica 0 is a CPU engine (kind clusters, CI); it cannot shard.
        if gpus < tp and not (gpus == 0 and tp == 1):
            raise ValueError(f"{MSG_GPUS}; got {gpus} and {tp}")
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
    def harness_experts(self) -> list[str]:
        """The experts offered the code harness (none: no sandbox is rendered)."""
        return [e.name for e in self.experts if e.harness]

    @property
    def harness_settings(self) -> HarnessSpec:
        """``spec.harness``, or its defaults when the section is left out."""
        return self.harness or HarnessSpec()

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
        if len(v) > LABEL_MAX or not _DNS_1035_RE.fullmatch(v):
            raise ValueError(f"{MSG_NAME}; got {v[:80]!r}")
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
