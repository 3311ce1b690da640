"""The router's Prometheus metrics (names from docs/design.md), one registry per server.

A registry per :class:`RouterMetrics` keeps several routers in one process (tests,
benchmarks) apart. The families every request touches are plain tables
(:mod:`mol_router.telemetry.series`); the rare ones (errors, reloads, gauges) are
prometheus_client's, with the label children they use cached.

Bounded whatever the traffic: the ``adapter`` label carries the top K adapters by
recent traffic (:mod:`mol_router.telemetry.ranking`) or ``other``, and an adapter leaving the
top K takes its series with it. Experts and tenants come from the config and key
file, so they are always labelled. Latency histograms carry the request's trace id
as an exemplar (the ``traceparent`` trace id, else the request id).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from mol_router.routing.rules import ADAPTER_LABEL
from mol_router.telemetry.ranking import OTHER, TopAdapters
from mol_router.telemetry.series import Counters, FamilyCollector, Histograms, Index, drop

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 120.0, 300.0)
_LOAD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class RouterMetrics:
    def __init__(self, deployment: str, top_k: int = 100, half_life: float = 300.0) -> None:
        self.deployment = deployment
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.top = TopAdapters(top_k, half_life, on_leave=self._forget)
        self._index: Index = {}
        by_adapter = (self._index, "adapter")
        lat = _LATENCY_BUCKETS
        self.requests = Counters(
            "mol_router_requests", "Requests answered, by expert, adapter (top K or other), "
            "version and status.", ["deployment", "expert", "adapter", "version", "code"],
            by_adapter)
        self.duration = Histograms(
            "mol_router_request_duration_seconds", "Whole request time as the router saw it.",
            ["deployment", "expert", "version"], lat)
        self.ttft = Histograms(
            "mol_router_time_to_first_token_seconds",
            "Time from the request's arrival to the first streamed content byte sent.",
            ["deployment", "expert", "version"], lat)
        self.tokens = Counters(
            "mol_router_tokens", "Tokens by tenant and expert; kind is prompt or completion.",
            ["deployment", "tenant", "expert", "kind"])
        self.decisions = Counters(
            "mol_router_route_decisions",
            "Expert selections by how they were made (mode: router, model, adapter, default, "
            "or for model auto the routing mode) and the signal that decided (request, "
            "semantic, head, keywords, classifier, default).",
            ["deployment", "mode", "signal", "expert"])
        self.adapter_duration = Histograms(
            "mol_router_adapter_request_duration_seconds",
            "Whole request time by adapter (top K or other).", ["deployment", "adapter"], lat,
            by_adapter)
        self.adapter_ttft = Histograms(
            "mol_router_adapter_time_to_first_token_seconds",
            "Arrival to the first streamed content byte, by adapter (top K or other).",
            ["deployment", "adapter"], lat, by_adapter)
        self.adapter_tokens = Counters(
            "mol_router_adapter_tokens", "Tokens by adapter (top K or other); kind is prompt "
            "or completion.", ["deployment", "adapter", "kind"], by_adapter)
        self.cold = Counters(
            "mol_router_adapter_cold_requests", "Requests sent to an engine replica that did "
            "not hold their adapter (they wait for its load), by adapter (top K or other).",
            ["deployment", "adapter"], by_adapter)
        self.cold_start = Histograms(
            "mol_router_adapter_cold_start_seconds", "Streamed cold requests: from sending "
            "to the engine to its first event (the adapter's load, as far as the router sees "
            "it), by adapter (top K or other).", ["deployment", "adapter"], _LOAD_BUCKETS,
            by_adapter)
        self.tenant_requests = Counters(
            "mol_router_tenant_requests", "Requests answered, by tenant and status.",
            ["deployment", "tenant", "code"])
        self.tenant_duration = Histograms(
            "mol_router_tenant_request_duration_seconds", "Whole request time by tenant.",
            ["deployment", "tenant"], lat)
        self.tenant_ttft = Histograms(
            "mol_router_tenant_time_to_first_token_seconds",
            "Arrival to the first streamed content byte, by tenant.", ["deployment", "tenant"],
            lat)
        self.adapter_failures = Counters(
            "mol_router_adapter_replica_failures", "Answers of a replica saying it could "
            "not load the request's adapter (the replica is then avoided for that adapter "
            "for a back-off), by adapter (top K or other).", ["deployment", "adapter"],
            by_adapter)
        r.register(FamilyCollector([
            self.adapter_failures, self.requests, self.duration, self.ttft, self.tokens,
            self.decisions, self.adapter_duration, self.adapter_ttft, self.adapter_tokens,
            self.cold, self.cold_start, self.tenant_requests, self.tenant_duration,
            self.tenant_ttft]))
        self.embedding_errors = Counter(
            "mol_router_embedding_errors", "Failed embedding calls of the semantic signal by "
            "reason (timeout, connect, status, invalid); each fell back.",
            ["deployment", "reason"], registry=r)
        self.adapter_loads = Counter(
            "mol_router_adapter_loads", "Adapter loads seen on engines (estimated from "
            "vllm:lora_requests_info).", ["deployment"], registry=r)
        self.upstream_errors = Counter(
            "mol_router_upstream_errors", "Failed upstream attempts by reason (connect, "
            "status, timeout, stream).", ["deployment", "reason"], registry=r)
        self.retries = Counter(
            "mol_router_retries", "Requests sent again to another replica before any byte "
            "reached the client, by why the attempt before failed (connect, status, adapter: "
            "the engine could not load the adapter, broken: the answer broke before its "
            "first byte).", ["deployment", "reason"], registry=r)
        self.avoided = Gauge(
            "mol_router_avoided_adapter_replicas", "(replica, adapter) pairs avoided now "
            "because the adapter failed to load there.", ["deployment"], registry=r)
        self.ejections = Counter(
            "mol_router_ejections", "Replicas taken out of selection, by reason (down: no "
            "answer at all; failures: failed requests in a row).", ["deployment", "reason"],
            registry=r)
        self.pending = Gauge(
            "mol_router_pending_requests", "Requests waiting for a ready engine.",
            ["deployment"], registry=r)
        self.ready = Gauge(
            "mol_router_ready_endpoints", "Engine endpoints ready to take requests.",
            ["deployment"], registry=r)
        self.handoffs = Counter(
            "mol_router_handoffs", "Same-request switches from one expert to another.",
            ["deployment", "from", "to"], registry=r)
        self.harness_steps = Counter(
            "mol_router_harness_steps", "Code-interpreter steps (python calls of a model), "
            "by expert and outcome (ok, error: the code raised, timeout: it ran past its "
            "limit, limit: refused at the request's step limit or time budget, "
            "sandbox_unavailable).", ["deployment", "expert", "outcome"], registry=r)
        self.harness_duration = Histogram(
            "mol_router_harness_step_duration_seconds", "Time of a code-interpreter step "
            "through the sandbox service (a new session's start included).",
            ["deployment", "expert"], registry=r, buckets=_LATENCY_BUCKETS)
        self.canary_weight = Gauge(
            "mol_canary_weight", "Percent of an expert's traffic sent to its canary version.",
            ["deployment", "expert"], registry=r)
        self.rejections = Counter(
            "mol_router_rejections", "Requests refused before any upstream call, by reason.",
            ["deployment", "reason"], registry=r)
        self.config_reloads = Counter(
            "mol_router_config_reloads", "Config file reloads by result (ok, invalid).",
            ["result"], registry=r)
        self.head_decisions = Counter(
            "mol_router_head_decisions", "Automatic turns a trained head decided (its "
            "measured keywords included), by role (stable: semantic.head; candidate: "
            "semantic.canary.head), head (ns/name@version) and expert.",
            ["deployment", "role", "head", "expert"], registry=r)
        self.head_agreement = Counter(
            "mol_router_head_agreement", "Canary comparisons: turns where the other head "
            "picked the same expert (agree), another (disagree), none (undecided), or was "
            "not asked because too many comparisons were running (skipped).",
            ["deployment", "result"], registry=r)
        self.head_info = Gauge(
            "mol_router_head_info", "1 for each trained head in use, by role, head "
            "(ns/name@version) and digest.", ["deployment", "role", "head", "digest"],
            registry=r)
        self._head_labels: dict[str, tuple[str, str]] = {}
        self._children: dict[tuple[Any, ...], Any] = {}
        self.pending_child = self.pending.labels(deployment)
        self.ready_child = self.ready.labels(deployment)
        self.loads_child = self.adapter_loads.labels(deployment)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _forget(self, adapter: str) -> None:
        drop(self._index, adapter)

    # --- per request ------------------------------------------------------------------

    def saw(self, adapter: str, now: float) -> None:
        """A request (or a handoff hop) goes to ``adapter``: counts toward the top K."""
        self.top.add(adapter, now)

    def request_done(self, expert: str, adapter: str, version: str, tenant: str, code: int,
                     seconds: float, trace: str | None) -> None:
        """One answered request; ``adapter`` is ``""`` when none was chosen."""
        d = self.deployment
        label = adapter if adapter in self.top.members or not adapter else OTHER
        status = str(code)
        if label == OTHER and expert == ADAPTER_LABEL:
            version = ""  # folded with the adapter: versions of other adapters are unbounded
        self.requests.inc((d, expert, label, version, status))
        self.duration.observe((d, expert, version), seconds, trace)
        if adapter:
            self.adapter_duration.observe((d, label), seconds, trace)
        self.tenant_requests.inc((d, tenant, status))
        self.tenant_duration.observe((d, tenant), seconds, trace)

    def first_token(self, expert: str, version: str, adapter: str, tenant: str,
                    seconds: float, trace: str | None) -> None:
        d = self.deployment
        self.ttft.observe((d, expert, version), seconds, trace)
        self.adapter_ttft.observe((d, self.top.label(adapter)), seconds, trace)
        self.tenant_ttft.observe((d, tenant), seconds, trace)

    def count_tokens(self, tenant: str, expert: str, adapter: str, prompt: int,
                     completion: int) -> None:
        d = self.deployment
        label = self.top.label(adapter)
        if prompt:
            self.tokens.inc((d, tenant, expert, "prompt"), prompt)
            self.adapter_tokens.inc((d, label, "prompt"), prompt)
        if completion:
            self.tokens.inc((d, tenant, expert, "completion"), completion)
            self.adapter_tokens.inc((d, label, "completion"), completion)

    def cold_request(self, adapter: str) -> None:
        """A request sent to a replica the router believes does not hold ``adapter``."""
        self.cold.inc((self.deployment, self.top.label(adapter)))

    def cold_started(self, adapter: str, seconds: float, trace: str | None) -> None:
        self.cold_start.observe((self.deployment, self.top.label(adapter)), seconds, trace)

    def decision(self, mode: str, signal: str, expert: str) -> None:
        self.decisions.inc((self.deployment, mode, signal, expert))

    def embedding_error(self, reason: str) -> None:
        self._child(self.embedding_errors, self.deployment, reason).inc()

    def upstream_error(self, reason: str) -> None:
        self._child(self.upstream_errors, self.deployment, reason).inc()

    def rejected(self, reason: str) -> None:
        self._child(self.rejections, self.deployment, reason).inc()

    def handoff(self, src: str, dst: str) -> None:
        self._child(self.handoffs, self.deployment, src, dst).inc()

    def harness_step(self, expert: str, outcome: str, seconds: float) -> None:
        self._child(self.harness_steps, self.deployment, expert, outcome).inc()
        if outcome != "limit":  # refused: nothing ran
            self._child(self.harness_duration, self.deployment, expert).observe(seconds)

    def retried(self, reason: str) -> None:
        self._child(self.retries, self.deployment, reason).inc()

    def adapter_failed(self, adapter: str) -> None:
        self.adapter_failures.inc((self.deployment, self.top.label(adapter)))

    def ejected(self, reason: str) -> None:
        self._child(self.ejections, self.deployment, reason).inc()

    def head_decided(self, role: str, head: str, expert: str) -> None:
        self._child(self.head_decisions, self.deployment, role, head, expert).inc()

    def head_compared(self, result: str) -> None:
        self._child(self.head_agreement, self.deployment, result).inc()

    def head_in_use(self, role: str, head: str | None, digest: str | None) -> None:
        """The head now in ``role`` (None: none), replacing the series of the one before.
        A head no role uses any longer loses its decision series too: the ``head``
        label (``ns/name@vN``) then stays bounded by the two roles times the experts,
        however many versions a deployment goes through."""
        old = self._head_labels.pop(role, None)
        if old is not None:
            self.head_info.remove(self.deployment, role, *old)
        if head is not None and digest is not None:
            self._head_labels[role] = (head, digest)
            self.head_info.labels(self.deployment, role, head, digest).set(1)
            if role == "candidate":  # every result from 0: a ratio of rates has both sides
                for result in ("agree", "disagree", "undecided", "skipped"):
                    self._child(self.head_agreement, self.deployment, result)
        if old is not None and old[0] not in {h for h, _ in self._head_labels.values()}:
            gone = [k for k in self._children
                    if k[0] == id(self.head_decisions) and k[3] == old[0]]
            for key in gone:
                self.head_decisions.remove(*key[1:])
                del self._children[key]
