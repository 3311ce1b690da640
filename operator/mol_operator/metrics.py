"""The operator's Prometheus metrics (names from docs/design.md), one registry per operator.

A registry per :class:`OperatorMetrics` keeps several operators in one process (tests,
benchmarks) apart; ``--metrics-port`` serves :attr:`OperatorMetrics.registry`.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

CANARY_RESULTS = ("started", "advanced", "paused", "promoted", "rolled_back")
"""Values of ``mol_operator_canary_transitions_total{deployment,expert,result}``."""


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reconcile = Counter(
            "mol_operator_reconcile", "Reconciles of MoLDeployments by result.",
            ["result"], registry=r)  # fmt: skip
        self.reconcile_duration = Histogram(
            "mol_operator_reconcile_duration_seconds", "Time of one reconcile.", registry=r,
            # up to minutes: a reconcile queued behind a thousand others still lands in a bucket
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320),
        )
        self.canary_transitions = Counter(
            "mol_operator_canary_transitions",
            "Canary decisions by result (started, advanced, paused, promoted, rolled_back).",
            ["deployment", "expert", "result"], registry=r)  # fmt: skip
        self.canary_weight = Gauge(
            "mol_canary_weight", "Percent of an expert's traffic sent to its canary version.",
            ["deployment", "expert"], registry=r)  # fmt: skip
        self.warmups = Counter(
            "mol_operator_warmups", "Adapter warm-up requests by result (ok, failed).",
            ["result"], registry=r)  # fmt: skip
        self.writes = Counter(
            "mol_operator_writes", "Writes of child objects by verb (create, update, delete).",
            ["verb"], registry=r)  # fmt: skip

    def canary(self, deployment: str, expert: str, weight: float, result: str | None) -> None:
        """Record one canary step: the weight now and, when one was made, the decision."""
        self.canary_weight.labels(deployment, expert).set(weight)
        if result is not None:
            self.canary_transitions.labels(deployment, expert, result).inc()

    def forget_canary(self, deployment: str, expert: str) -> None:
        """Drop the weight series of a canary that no longer exists."""
        with contextlib.suppress(KeyError):
            self.canary_weight.remove(deployment, expert)
