"""Prometheus metrics (names from docs/design.md); ``mol_catalog.middleware`` counts requests.

Each app gets its own registry, so several apps in one process (tests) never clash.
Label children are cached in dicts: a request costs two dict lookups, an increment
and a histogram observation.
"""

from __future__ import annotations

from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class UnusedCount(Protocol):
    """What the unused-adapter gauge shows (mol_catalog.usage.service.UnusedGauge)."""

    days: int
    value: int | None


class CatalogMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("mol_catalog_requests_total", "HTTP requests by route template "
                                "and status code", ["route", "code"], registry=self.registry)
        self.duration = Histogram("mol_catalog_request_duration_seconds", "HTTP request latency "
                                  "by route template", ["route"], buckets=BUCKETS,
                                  registry=self.registry)
        self.publishes = Counter("mol_catalog_publishes_total", "Publish attempts by result "
                                 "(created, existing, invalid, incompatible, bad_signature, "
                                 "too_large, error)",
                                 ["result"], registry=self.registry)
        self.compat_rejections = Counter("mol_catalog_compat_rejections_total", "Compatibility "
                                         "reasons found (publish rejections and false verdicts)",
                                         ["reason"], registry=self.registry)
        self.webhook_deliveries = Counter(
            "mol_catalog_webhook_deliveries_total", "Webhook delivery attempts by result "
            "(delivered, retry: failed and rescheduled, failed: out of attempts, refused: the "
            "host resolves to an address webhooks may not reach)", ["result"],
            registry=self.registry)
        self.usage_batches = Counter("mol_catalog_usage_batches_total", "Usage batches "
                                     "received, by result (counted, duplicate)", ["result"],
                                     registry=self.registry)
        self.routing_labels = Counter(
            "mol_catalog_routing_labels_total", "Routing decisions labelled for the first "
            "time, once per head that picked on the decision (the serving head and a canary's "
            "candidate): head ns/name@vN (ns/ and the first 12 hex of the digest when it "
            "is not a published router head of the namespace), the right expert, "
            "correct|wrong", ["head", "expert", "result"], registry=self.registry)
        self.unused_adapters = Gauge("mol_catalog_unused_adapters", "Adapters none of whose "
                                     "versions was used in the window (never used included)",
                                     ["window"], registry=self.registry)
        self._req_children: dict[tuple[str, int], Any] = {}
        self._dur_children: dict[str, Any] = {}

    def observe(self, route: str, code: int, seconds: float) -> None:
        key = (route, code)
        child = self._req_children.get(key)
        if child is None:
            child = self._req_children[key] = self.requests.labels(route, str(code))
        child.inc()
        dur = self._dur_children.get(route)
        if dur is None:
            dur = self._dur_children[route] = self.duration.labels(route)
        dur.observe(seconds)

    def label_counted(self, head: str, expert: str, result: str) -> None:
        """One first label of a decision ``head`` picked on; the other result's series
        is made too, at 0, so a ratio of the two has both sides from the first label."""
        self.routing_labels.labels(head, expert, result).inc()
        self.routing_labels.labels(head, expert, "wrong" if result == "correct"
                                   else "correct")

    def head_published(self, head: str, experts: list[str]) -> None:
        """A new router head version: its series start at 0, so that ``increase()``
        counts the first label of each (expert, result) instead of seeing a series
        appear already at 1 (Prometheus counts no increase into a series' first
        sample)."""
        for expert in experts:
            for result in ("correct", "wrong"):
                self.routing_labels.labels(head, expert, result)

    def render(self, unused: UnusedCount | None = None) -> tuple[bytes, str]:
        if unused is not None and unused.value is not None:
            self.unused_adapters.labels(f"{unused.days}d").set(unused.value)
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
