"""The router's Prometheus metrics (names from docs/design.md), one registry per server.

A registry per :class:`RouterMetrics` keeps several routers in one process (tests,
benchmarks) apart. Label children used on every request are cached so the hot path
does one dict lookup per metric instead of prometheus_client's label validation.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 120.0, 300.0)


class RouterMetrics:
    def __init__(self, deployment: str) -> None:
        self.deployment = deployment
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "mol_router_requests", "Requests answered, by expert, adapter, version and status.",
            ["deployment", "expert", "adapter", "version", "code"], registry=r)
        self.duration = Histogram(
            "mol_router_request_duration_seconds", "Whole request time as the router saw it.",
            ["deployment", "expert", "version"], buckets=_LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram(
            "mol_router_time_to_first_token_seconds",
            "Time from the request's arrival to the first streamed content byte sent.",
            ["deployment", "expert", "version"], buckets=_LATENCY_BUCKETS, registry=r)
        self.tokens = Counter(
            "mol_router_tokens", "Tokens by tenant and expert; kind is prompt or completion.",
            ["deployment", "tenant", "expert", "kind"], registry=r)
        self.decisions = Counter(
            "mol_router_route_decisions",
            "Expert selections by how they were made (mode: router, model, adapter, default, "
            "or for model auto the routing mode) and the signal that decided (request, "
            "semantic, keywords, classifier, default).", ["deployment", "mode", "signal", "expert"],
            registry=r)
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
        self.pending = Gauge(
            "mol_router_pending_requests", "Requests waiting for a ready engine.",
            ["deployment"], registry=r)
        self.ready = Gauge(
            "mol_router_ready_endpoints", "Engine endpoints ready to take requests.",
            ["deployment"], registry=r)
        self.handoffs = Counter(
            "mol_router_handoffs", "Same-request switches from one expert to another.",
            ["deployment", "from", "to"], registry=r)
        self.canary_weight = Gauge(
            "mol_canary_weight", "Percent of an expert's traffic sent to its canary version.",
            ["deployment", "expert"], registry=r)
        self.rejections = Counter(
            "mol_router_rejections", "Requests refused before any upstream call, by reason.",
            ["deployment", "reason"], registry=r)
        self.config_reloads = Counter(
            "mol_router_config_reloads", "Config file reloads by result (ok, invalid).",
            ["result"], registry=r)
        self._children: dict[tuple[Any, ...], Any] = {}
        # Per-request metrics: one lookup on a plain tuple key, children created once.
        self._done: dict[tuple[str, str, str, int], tuple[Any, Any]] = {}
        self._tokens: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._decided: dict[tuple[str, str, str], Any] = {}
        self.pending_child = self.pending.labels(deployment)
        self.ready_child = self.ready.labels(deployment)
        self.loads_child = self.adapter_loads.labels(deployment)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def request_done(self, expert: str, adapter: str, version: str, code: int,
                     seconds: float) -> None:
        key = (expert, adapter, version, code)
        pair = self._done.get(key)
        if pair is None:
            d = self.deployment
            pair = self._done[key] = (
                self.requests.labels(d, expert, adapter, version, str(code)),
                self.duration.labels(d, expert, version))
        pair[0].inc()
        pair[1].observe(seconds)

    def first_token(self, expert: str, version: str, seconds: float) -> None:
        self._child(self.ttft, self.deployment, expert, version).observe(seconds)

    def count_tokens(self, tenant: str, expert: str, prompt: int, completion: int) -> None:
        pair = self._tokens.get((tenant, expert))
        if pair is None:
            d = self.deployment
            pair = self._tokens[(tenant, expert)] = (
                self.tokens.labels(d, tenant, expert, "prompt"),
                self.tokens.labels(d, tenant, expert, "completion"))
        if prompt:
            pair[0].inc(prompt)
        if completion:
            pair[1].inc(completion)

    def decision(self, mode: str, signal: str, expert: str) -> None:
        key = (mode, signal, expert)
        child = self._decided.get(key)
        if child is None:
            child = self._decided[key] = self.decisions.labels(
                self.deployment, mode, signal, expert)
        child.inc()

    def embedding_error(self, reason: str) -> None:
        self._child(self.embedding_errors, self.deployment, reason).inc()

    def upstream_error(self, reason: str) -> None:
        self._child(self.upstream_errors, self.deployment, reason).inc()

    def rejected(self, reason: str) -> None:
        self._child(self.rejections, self.deployment, reason).inc()

    def handoff(self, src: str, dst: str) -> None:
        self._child(self.handoffs, self.deployment, src, dst).inc()
