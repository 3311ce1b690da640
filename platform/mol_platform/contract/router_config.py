"""``RouterConfig``: the file the router reads (and hot-reloads).

The operator renders it into the router's ConfigMap; ``mol up`` writes it locally.
It is derived from a ``MoLDeployment`` by :func:`router_config_from_spec` so both
paths produce the same file. Secrets never go into it: the catalog token and the API
keys live in files (mounted Secrets) that the config names, and the router re-reads
them whenever it reloads. :class:`ApiKeysFile` is the format of the API keys file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from mol_platform.contract.names import child_name
from mol_platform.contract.refs import AdapterRef, check_name
from mol_platform.contract.routing_feedback import MAX_TEXT_CHARS
from mol_platform.contract.spec import MoLDeployment
from mol_platform.contract.spec_base import AdapterRefStr
from mol_platform.contract.spec_router import SEMANTIC_MODES, RoutingMode, canonical_mode

# Where the operator mounts the Secret named by ``spec.router.apiKeys.secretRef``; the
# Secret holds the API keys file under the key ``keys.yaml``.
API_KEYS_SECRET_KEY = "keys.yaml"
DEFAULT_API_KEYS_FILE = f"/etc/mol/api-keys/{API_KEYS_SECRET_KEY}"
DEFAULT_BODY_LIMIT = 4 * 1024 * 1024  # 4 MiB: long chat histories fit, floods do not
DEFAULT_POLICY = "mol-affinity"  # mol_router.replicas.policy.DEFAULT_POLICY
# The router's drain on SIGTERM (MOL_ROUTER_DRAIN_DELAY, MOL_ROUTER_DRAIN_TIMEOUT): new
# requests are served for the delay while load balancers notice, then requests in flight
# get the timeout. The operator sizes the router pod's grace period from the same numbers.
DRAIN_DELAY_SECONDS = 1.0
DRAIN_TIMEOUT_SECONDS = 20.0
DEFAULT_SANDBOX_URL = "http://127.0.0.1:8090"  # `mol sandbox serve`'s own default
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class RouterCanary(_Model):
    adapter: AdapterRefStr
    weight: float = Field(default=0.0, ge=0.0, le=100.0)  # percent of the expert's traffic


class RouterHeadCanary(_Model):
    """A candidate trained head on trial beside ``semantic.head``: it routes ``weight``
    percent of the automatic turns (sticky per user, as adapter canaries), and the
    router computes both heads' picks on every embedded turn, so their agreement (and,
    once labelled, their accuracy) can be compared before the alias moves."""

    head: AdapterRefStr  # ns/name@alias or ns/name@vN of a router head in the catalog
    weight: float = Field(default=10.0, ge=0.0, le=100.0)


class RouterExpert(_Model):
    name: str
    adapter: AdapterRefStr
    description: str = ""
    canary: RouterCanary | None = None
    harness: bool = False  # offered the code interpreter (the spec's experts[].harness)


class RouterHarness(_Model):
    """The code interpreter: where the sandbox service answers and how far one request's
    steps may go (docs/router.md). The sandbox's bearer token is not here: the caller's
    own API key when the router has keys, else ``MOL_ROUTER_SANDBOX_TOKEN``."""

    sandbox_url: str = DEFAULT_SANDBOX_URL
    max_steps: int = Field(default=8, ge=1, le=100)  # code runs per request
    budget_seconds: float = Field(default=120.0, gt=0, le=3600)  # the steps' time, in all
    # One sandbox call, the session's start included; above the sandbox's own call limit,
    # so that limit is what stops runaway code and says so.
    call_timeout_seconds: float = Field(default=40.0, gt=0, le=3600)
    # What a step's tool message may hold for the model (the client gets the whole step).
    result_chars: int = Field(default=16_384, ge=256, le=1_048_576)


class RouterSemanticExpert(_Model):
    """One expert's example utterances (embedded once per config) and keywords (whole
    words or phrases, matched case-insensitively in the user's turn)."""

    name: str
    examples: list[str] = Field(default_factory=list, max_length=256)
    keywords: list[str] = Field(default_factory=list, max_length=256)


class RouterSemantic(_Model):
    """The semantic signal: the latest user turn (its last ``maxChars``) is embedded
    through ``embeddingsUrl`` (OpenAI ``/v1/embeddings``) and compared with each
    expert's examples; see docs/router.md for the score and its thresholds."""

    embeddings_url: str
    model: str
    experts: list[RouterSemanticExpert] = Field(default_factory=list, max_length=64)
    # A trained head (``mol router train``): a file, read at start and whenever the
    # config changes (a new head: a new path). With one, the experts' examples are not
    # used, nor their keywords: the head carries those its training data found
    # unambiguous.
    head_file: str | None = Field(default=None, min_length=1, max_length=4096)
    # The same, published in the catalog (``mol catalog head publish``): ns/name@alias or
    # @vN, resolved at start and again whenever the alias moves (the catalog's event
    # feed); needs ``catalogUrl``. One of ``head`` and ``headFile``.
    head: AdapterRefStr | None = None
    canary: RouterHeadCanary | None = None
    threshold: float = Field(default=0.3, ge=-1.0, le=2.0)
    margin: float = Field(default=0.0, ge=0.0, le=2.0)
    max_chars: int = Field(default=2000, ge=16, le=100_000)
    cache_size: int = Field(default=1024, ge=0, le=1_000_000)  # embeddings of recent turns
    # A turn holding keywords of exactly one expert goes there without an embedding call.
    keywords_decide: bool = True
    # Report each automatic decision (the turn as embedded, the expert, what decided) to
    # the catalog (``POST /v1/routing/decisions``), where it can be labelled and exported
    # to train the next head. Off by default: it sends users' turns out of the router, to
    # be kept in the catalog's database, which a deployment must choose knowingly.
    record_decisions: bool = False

    @model_validator(mode="after")
    def _decides(self) -> RouterSemantic:
        if self.head is not None and self.head_file is not None:
            raise ValueError("semantic: set head (a catalog reference) or headFile, not both")
        if not self.experts and self.head_file is None and self.head is None:
            raise ValueError("semantic needs experts with examples or a trained head "
                             "(head or headFile)")
        if self.canary is not None and self.head is None and self.head_file is None:
            raise ValueError("semantic.canary trials a head against the serving one: set "
                             "semantic.head first")
        if self.record_decisions and self.max_chars > MAX_TEXT_CHARS:
            raise ValueError(f"recordDecisions records the turn as embedded: maxChars must "
                             f"be at most {MAX_TEXT_CHARS}, the catalog's bound")
        return self


class EndpointSliceSelector(_Model):
    namespace: str
    service_name: str
    port_name: str = "http"


class RouterTimeouts(_Model):
    """Seconds. ``upstream`` bounds a whole upstream request (streams included);
    ``headerRead``/``bodyRead`` bound how long a client may take to send its request."""

    classifier: float = Field(default=2.0, gt=0, le=60)
    embedding: float = Field(default=1.0, gt=0, le=60)
    connect: float = Field(default=2.0, gt=0, le=60)
    upstream: float = Field(default=600.0, gt=0, le=86400)
    header_read: float = Field(default=10.0, gt=0, le=600)
    body_read: float = Field(default=30.0, gt=0, le=600)
    queue: float = Field(default=30.0, ge=0, le=3600)  # wait for a ready engine, then 503


class RouterConfig(_Model):
    deployment: str
    namespace: str = "default"
    profile: str
    catalog_url: str | None = None
    experts: list[RouterExpert] = Field(min_length=1)
    mode: RoutingMode = "explicit"
    classifier: str | None = None
    semantic: RouterSemantic | None = None
    default: str
    handoff_enabled: bool = False
    handoff_max_hops: int = Field(default=2, ge=1)
    harness: RouterHarness | None = None  # needed when an expert sets harness
    cache_isolation: Literal["shared", "tenant"] = "shared"
    """``tenant``: the router sets vLLM's ``cache_salt`` per tenant (see the spec)."""
    adapter_namespaces: list[str] = Field(default_factory=list)
    endpoints: list[str] = Field(default_factory=list)  # static engine base URLs
    endpoint_slice: EndpointSliceSelector | None = None
    base_model: str = ""  # the engine's served model name
    catalog_token_file: str | None = None  # else env MOL_CATALOG_TOKEN
    api_keys_file: str | None = None  # an ApiKeysFile; when set, every request needs a key
    timeouts: RouterTimeouts = Field(default_factory=RouterTimeouts)
    body_limit_bytes: int = Field(default=DEFAULT_BODY_LIMIT, ge=1024, le=1 << 30)
    queue_limit: int = Field(default=1024, ge=0, le=1_000_000)  # requests waiting for engines
    max_attempts: int = Field(default=3, ge=1, le=10)  # upstream tries before the first byte
    policy: str = DEFAULT_POLICY
    policy_knobs: dict[str, Any] = Field(default_factory=dict)
    scrape_interval_seconds: float = Field(default=1.0, gt=0, le=60)
    eject_after_failures: int = Field(default=3, ge=1, le=100)
    readmit_after_seconds: float = Field(default=10.0, gt=0, le=3600)
    max_ejection_percent: int = Field(default=50, ge=0, le=100)
    """At most this share of the replicas whose health checks pass is out for failed
    requests at a time, and never all of them (replicas that do not answer at all are
    ejected regardless)."""

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, v: object) -> object:
        return canonical_mode(v)

    @model_validator(mode="after")
    def _check(self) -> RouterConfig:
        names = {e.name for e in self.experts}
        if self.default not in names:
            raise ValueError(f"default {self.default!r} is not an expert")
        if self.classifier is not None and self.classifier not in names:
            raise ValueError(f"classifier {self.classifier!r} is not an expert")
        if self.mode in SEMANTIC_MODES and self.semantic is None:
            raise ValueError(f"mode {self.mode!r} needs semantic (embeddingsUrl, model, "
                             "experts with examples)")
        if self.semantic is not None:
            for e in self.semantic.experts:
                if e.name not in names:
                    raise ValueError(f"semantic expert {e.name!r} is not an expert")
            if self.semantic.head is not None and self.catalog_url is None:
                raise ValueError("semantic.head is resolved in the catalog: set catalogUrl "
                                 "(or use headFile)")
            if self.semantic.canary is not None and self.catalog_url is None:
                raise ValueError("semantic.canary.head is resolved in the catalog: set "
                                 "catalogUrl")
        if not self.endpoints and self.endpoint_slice is None:
            raise ValueError("set endpoints or endpointSlice: the router needs engines")
        if len(names) != len(self.experts):
            raise ValueError("expert names must be unique")
        with_harness = [e.name for e in self.experts if e.harness]
        if with_harness and self.harness is None:
            raise ValueError(f"experts {with_harness} set harness: add harness "
                             "(sandboxUrl) so the router can reach the sandbox service")
        for ns in self.adapter_namespaces:
            check_name(ns, "adapter namespace")
        return self

    def expert(self, name: str) -> RouterExpert | None:
        for e in self.experts:
            if e.name == name:
                return e
        return None

    @property
    def home_namespace(self) -> str:
        """Where the recorded decisions of requests without a tenant namespace go (and
        so the namespace ``mol router label`` names for them): the first adapter
        namespace, else the catalog namespace of the default expert's adapter."""
        if self.adapter_namespaces:
            return self.adapter_namespaces[0]
        default = self.expert(self.default) or self.experts[0]
        return AdapterRef.parse(default.adapter).namespace


class ApiKey(_Model):
    """One client key: who it is (the ``tenant`` metric label), which catalog
    namespaces it may call adapters from by name (``"*"``: any of the deployment's
    ``adapterNamespaces``), and its limits (``None``: unlimited). Give the key itself
    or its sha256 hex digest, not both."""

    tenant: str
    key: str | None = Field(default=None, min_length=16, max_length=512)
    key_sha256: str | None = None
    namespaces: list[str] = Field(default_factory=lambda: ["*"])
    requests_per_minute: int | None = Field(default=None, ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(default=None, ge=1, le=10_000_000_000)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str) -> str:
        return check_name(v, "tenant")

    @field_validator("key_sha256")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not _SHA256_RE.fullmatch(v):
            raise ValueError("keySha256 must be 64 lowercase hex digits")
        return v

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            if ns != "*":
                check_name(ns, "namespace")
        return v

    @model_validator(mode="after")
    def _one_key(self) -> ApiKey:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"tenant {self.tenant!r}: set exactly one of key and keySha256")
        return self


class ApiKeysFile(_Model):
    """The API keys file (YAML or JSON), the ``keys.yaml`` entry of the Secret named by
    ``spec.router.apiKeys.secretRef``."""

    keys: list[ApiKey] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> ApiKeysFile:
        seen: set[str] = set()
        for k in self.keys:
            ident = k.key_sha256 or k.key or ""
            if ident in seen:
                raise ValueError(f"tenant {k.tenant!r}: the same key appears twice")
            seen.add(ident)
        return self

    @classmethod
    def load(cls, path: str | Path) -> ApiKeysFile:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        return cls.model_validate(data if data is not None else {})


def load_router_config(path: str | Path) -> RouterConfig:
    """Read and validate a RouterConfig file (YAML or JSON)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return RouterConfig.model_validate(data)


def profile_name(deployment: str, namespace: str = "default") -> str:
    """The serving profile a deployment declares in the catalog: ``<namespace>.<name>``,
    shortened with a hash past the catalog's 63 characters (``names.child_name``)."""
    return child_name(f"{namespace}.{deployment}")


def router_config_from_spec(
    obj: MoLDeployment,
    *,
    endpoints: list[str] | None = None,
    endpoint_slice: EndpointSliceSelector | None = None,
    catalog_url: str | None = None,
    canary_weights: dict[str, float] | None = None,
    catalog_token_file: str | None = None,
    api_keys_file: str | None = None,
    embeddings_url: str | None = None,
    sandbox_url: str | None = None,
    **overrides: Any,
) -> RouterConfig:
    """The router's config for a deployment. ``api_keys_file`` defaults to
    :data:`DEFAULT_API_KEYS_FILE` when the spec sets ``router.apiKeys``;
    ``embeddings_url`` is where the embedding engine that ``mol up`` started answers
    (``router.semantic.embeddingsUrl`` wins; one of them is needed when the spec sets
    ``router.semantic``); ``sandbox_url`` is where the sandbox service answers when
    experts set ``harness`` (default: :data:`DEFAULT_SANDBOX_URL`), its call timeout
    derived from ``spec.harness``'s; ``overrides`` set any other RouterConfig field
    (timeouts, policy, limits) by its Python name."""
    spec = obj.spec
    sem = spec.router.semantic
    semantic = None
    if sem is not None:
        url = sem.embeddings_url or embeddings_url
        if url is None:
            raise ValueError("router.semantic needs an embedding engine: set "
                             "router.semantic.embeddingsUrl")
        semantic = RouterSemantic(
            embeddings_url=url, model=sem.model, threshold=sem.threshold,
            margin=sem.margin, keywords_decide=sem.keywords_decide,
            record_decisions=sem.record_decisions, head=sem.head,
            canary=RouterHeadCanary(head=sem.canary.head, weight=float(sem.canary.weight))
            if sem.canary is not None else None,
            experts=[RouterSemanticExpert(name=e.name, examples=list(e.examples),
                                          keywords=list(e.keywords)) for e in sem.experts])
    ns = obj.metadata.namespace or "default"
    weights = canary_weights or {}
    experts = [
        RouterExpert(
            name=e.name,
            adapter=e.adapter,
            description=e.description,
            canary=(
                RouterCanary(adapter=e.canary.adapter, weight=weights.get(e.name, 0.0))
                if e.canary is not None
                else None
            ),
            harness=e.harness,
        )
        for e in spec.experts
    ]
    harness = None
    if spec.harness_experts:
        # the sandbox stops a call at its own limit; the router waits a little longer
        limit = spec.harness_settings.limits.timeout_seconds
        harness = RouterHarness(sandbox_url=sandbox_url or DEFAULT_SANDBOX_URL,
                                call_timeout_seconds=float(limit + 10))
    return RouterConfig(
        deployment=obj.metadata.name,
        namespace=ns,
        profile=profile_name(obj.metadata.name, ns),
        catalog_url=catalog_url,
        experts=experts,
        mode=spec.router.mode,
        classifier=spec.router.classifier.expert if spec.router.classifier else None,
        semantic=semantic,
        default=spec.default_expert,
        handoff_enabled=spec.router.handoff.enabled,
        cache_isolation=spec.router.cache_isolation,
        handoff_max_hops=spec.router.handoff.max_hops,
        harness=harness,
        adapter_namespaces=list(spec.adapter_namespaces),
        endpoints=list(endpoints or []),
        endpoint_slice=endpoint_slice,
        base_model=spec.base_model.name,
        catalog_token_file=catalog_token_file,
        api_keys_file=api_keys_file or (
            DEFAULT_API_KEYS_FILE if spec.router.api_keys is not None else None),
        **overrides,
    )
