"""The router's part of the ``MoLDeployment`` spec (``spec.router``): routing modes,
the classifier expert, handoff, API keys and the semantic signal with its embedding
engine. Kept apart from :mod:`mol_platform.contract.spec`, which assembles it."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field, field_validator, model_validator

from mol_platform.contract.embedding_models import DEFAULT_EMBEDDING_MODEL, PACKAGED_LAYERS
from mol_platform.contract.spec_base import AdapterRefStr, SpecModel, defaulted, rules
from mol_platform.contract.spec_rules import (
    MSG_AUTO,
    MSG_EMBEDDING,
    MSG_SEMANTIC,
    ExpertName,
    ImageRef,
    ObjectName,
    Quantity,
    WeightsUri,
    cel,
)


class ClassifierSpec(SpecModel):
    """The L0 router: an expert asked to choose, its output constrained to expert names."""

    expert: ExpertName
    """The expert that classifies requests."""


class HandoffSpec(SpecModel):
    """Expert-to-expert handoff through a tool call."""

    enabled: bool = False
    """Offer the handoff tool (engines get --enable-auto-tool-choice)."""
    max_hops: int = Field(default=2, ge=1, le=8)
    """The most handoffs in one request."""


class SecretRef(SpecModel):
    """A Secret in the deployment's namespace."""

    secret_ref: ObjectName
    """The Secret's name."""


# --- automatic routing: modes and the semantic signal ---------------------------------
RoutingMode = Literal["explicit", "classifier", "semantic", "semantic-then-classifier"]
SEMANTIC_MODES = frozenset({"semantic", "semantic-then-classifier"})
CLASSIFIER_MODES = frozenset({"classifier", "semantic-then-classifier"})
_MODE_ALIASES = {"auto": "classifier"}  # the classifier mode's first name, accepted
_ROUTING_MODES: list[Any] = [*get_args(RoutingMode), *_MODE_ALIASES]  # the CRD enum


def canonical_mode(value: object) -> object:
    """``auto`` (the classifier mode's first name) -> ``classifier``; others unchanged."""
    return _MODE_ALIASES.get(value, value) if isinstance(value, str) else value


class SemanticExpertSpec(SpecModel):
    name: ExpertName = Field(description="The expert these utterances stand for.")
    examples: list[Annotated[str, Field(min_length=1, max_length=2000)]] = Field(
        default_factory=list, max_length=256,
        description="Example user turns this expert should answer (embedded once per "
        "config); 8-30 varied ones, see docs/router.md.")
    keywords: list[Annotated[str, Field(min_length=2, max_length=80)]] = Field(
        default_factory=list, max_length=256,
        description="Words or phrases that, found in the user's turn, add to this "
        "expert's score.")


EMBEDDING_IMAGE = "ghcr.io/mol-platform/vllm-mol-cpu:0.32.0"


class EmbeddingEngineSpec(SpecModel):
    """The embedding engine the operator runs for the semantic signal when
    ``embeddingsUrl`` is not set: a CPU Deployment and Service with vLLM's pooling
    runner (the flags ``mol up`` uses), beside the LLM engines."""

    uri: WeightsUri | None = Field(
        default=None,
        description="The sentence-embedding model's weights: a path in the image, "
        "hf://org/model, pvc://claim/path or s3://bucket/prefix (unset: the CPU engine "
        "image's copy of a packaged model, /models/embedding/<router.semantic.model>).")
    secret_ref: ObjectName | None = Field(
        default=None, description="A Secret with credentials for the weights (env).")
    image: ImageRef = Field(default=EMBEDDING_IMAGE,
                            description="The vLLM CPU image (the project's CPU engine image).")
    replicas: int = Field(default=1, ge=1, le=100, description="Embedding engine replicas.")
    cpu: Quantity = Field(default="1", description="CPU request (no CPU limit: a throttled "
                          "engine answers late).")
    memory: Quantity = Field(default="2Gi", description="Memory request and limit.")


MSG_HEAD_OR_EXPERTS = ("spec.router.semantic needs experts (example utterances) or head "
                       "(a trained head in the catalog)")
MSG_MODEL_WEIGHTS = (f"spec.router.semantic.model is not a packaged embedding model "
                     f"({', '.join(sorted(PACKAGED_LAYERS))}): set engine.uri to its weights "
                     f"or embeddingsUrl to a server of your own")
MSG_CANARY_HEAD = "spec.router.semantic.canary trials a head against spec.router.semantic.head"


class HeadCanarySpec(SpecModel):
    """A candidate trained head on trial: it routes ``weight`` percent of the automatic
    turns (sticky per user); the router compares both heads' picks on every embedded turn
    (``mol_router_head_agreement_total``) and, with labelled feedback, the catalog counts
    each head's accuracy (``mol_catalog_routing_labels_total``). Promote by moving the
    alias that ``head`` names."""

    head: AdapterRefStr = Field(description="The candidate: a router head in the catalog, "
                                "ns/name@alias or ns/name@vN.")
    weight: int = Field(default=10, ge=0, le=100,
                        description="Percent of the automatic turns the candidate routes.")


class SemanticSpec(SpecModel):
    model_config = ConfigDict(json_schema_extra=rules(
        cel("!(has(self.embeddingsUrl) && has(self.engine))", MSG_EMBEDDING,
            field_path=".engine", reason="FieldValueForbidden"),
        cel("has(self.head) || (has(self.experts) && size(self.experts) > 0)",
            MSG_HEAD_OR_EXPERTS, field_path=".experts", reason="FieldValueRequired"),
        cel("!has(self.canary) || has(self.head)", MSG_CANARY_HEAD, field_path=".head",
            reason="FieldValueRequired"),
        cel(f"has(self.embeddingsUrl) || (has(self.engine) && has(self.engine.uri)) || "
            f"!has(self.model) || self.model in {sorted(PACKAGED_LAYERS)}", MSG_MODEL_WEIGHTS,
            field_path=".model", reason="FieldValueInvalid")))

    model: str = Field(default=DEFAULT_EMBEDDING_MODEL, max_length=253,
                       description="The embedding model's served name. Packaged (mol up "
                       "and the CPU engine image carry them): all-minilm-l6-v2-l3 (the "
                       "default: all-MiniLM-L6-v2's first 3 layers, what trained heads "
                       "route best on) and all-minilm-l6-v2.")
    embeddings_url: str | None = Field(
        default=None, max_length=2048, pattern=r"^https?://",
        description="An OpenAI-compatible embeddings server to use (its base URL); unset, "
        "mol up (and the operator, see engine) runs one on the model.")
    engine: EmbeddingEngineSpec | None = Field(
        default=None, description="The embedding engine the operator runs when "
        "embeddingsUrl is unset (unset: its defaults).")
    threshold: float = Field(default=0.3, ge=-1.0, le=2.0,
                             description="The lowest winning score that decides.")
    margin: float = Field(default=0.0, ge=0.0, le=2.0,
                          description="How far the best score must lead the second.")
    keywords_decide: bool = Field(
        default=True, description="A turn holding keywords of exactly one expert goes to "
        "that expert without an embedding call (false: keywords only add to the score).")
    record_decisions: bool = Field(
        default=False, description="Report each automatic decision (the user's turn as "
        "embedded, the expert chosen and what decided) to the catalog, where reviewers "
        "label it and mol router train learns from it. Off by default: users' turns leave "
        "the router and are kept in the catalog.")
    experts: list[SemanticExpertSpec] = Field(
        default_factory=list, max_length=64,
        description="Example utterances and keywords per expert (not used with head).")
    head: AdapterRefStr | None = Field(
        default=None, description="A trained head published in the catalog (mol router "
        "train, then mol catalog head publish): ns/name@alias or ns/name@vN. It decides "
        "instead of the experts' examples; the router follows the alias when it moves.")
    canary: HeadCanarySpec | None = Field(
        default=None, description="A candidate head on trial beside head.")

    @model_validator(mode="after")
    def _one_server(self) -> SemanticSpec:
        if self.embeddings_url is not None and self.engine is not None:
            raise ValueError(MSG_EMBEDDING)
        if self.head is None and not self.experts:
            raise ValueError(MSG_HEAD_OR_EXPERTS)
        if self.canary is not None and self.head is None:
            raise ValueError(MSG_CANARY_HEAD)
        if (self.embeddings_url is None and (self.engine is None or self.engine.uri is None)
                and self.model not in PACKAGED_LAYERS):
            raise ValueError(MSG_MODEL_WEIGHTS)
        return self


class RouterSpec(SpecModel):
    """The per-deployment router."""

    model_config = ConfigDict(json_schema_extra=rules(
        cel("!(self.mode in ['auto', 'classifier']) || has(self.classifier)", MSG_AUTO,
            field_path=".classifier", reason="FieldValueRequired"),
        cel("!(self.mode in ['semantic', 'semantic-then-classifier']) || has(self.semantic)",
            MSG_SEMANTIC, field_path=".semantic", reason="FieldValueRequired")))

    mode: RoutingMode = Field(
        default="explicit", json_schema_extra={"enum": _ROUTING_MODES},
        description="How model 'auto' picks the expert: explicit (the default expert), "
        "classifier (the classifier expert; 'auto' is its former name), semantic (example "
        "utterances), semantic-then-classifier.")
    semantic: SemanticSpec | None = Field(
        default=None, description="The semantic signal (modes semantic, "
        "semantic-then-classifier).")
    classifier: ClassifierSpec | None = None
    """The classifier expert (needed by mode auto)."""
    default: ExpertName | None = None
    """The expert used when none is named or chosen; default: the first expert."""
    handoff: HandoffSpec = defaulted(HandoffSpec)
    """Expert-to-expert handoff."""
    api_keys: SecretRef | None = None
    """A Secret with API keys (and the catalog namespaces each may use); else open."""
    replicas: int = Field(default=2, ge=0, le=100)
    """Router replicas (a Deployment and a Service per MoLDeployment)."""
    cache_isolation: Literal["shared", "tenant"] = Field(
        default="shared", json_schema_extra={"enum": ["shared", "tenant"]},
        description="Prefix-cache isolation: shared (requests for the same adapter may "
        "reuse each other's cached prompt prefixes on an engine) or tenant (the router sets "
        "vLLM's cache_salt per API-key tenant, so tenants never share cached prefixes, and "
        "scores prefixes within a tenant only).")

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, v: object) -> object:
        return canonical_mode(v)
