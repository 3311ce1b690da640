"""Adapters that fail on engine pods already running, as the routers see them. Pure.

A router that gets "could not load the adapter" from one replica avoids that
(replica, adapter) pair and counts the answer in
``mol_router_adapter_replica_failures_total{deployment, adapter}`` (``adapter`` is
``ns/name``, or ``other`` past the routers' top K). Warm-up only looks at a pod when it
turns Ready, so a pod whose copy of an adapter breaks later would show only in the
routers' metrics. Each reconcile asks Prometheus which adapters of the deployment the
routers saw fail within a window (:func:`failures_query`, the alert's own expression);
for those, each ready engine pod is asked for the adapter's served versions with the
warm-up's one-token request (:func:`probe_names`), which names the pods where it fails
now. The outcome (:func:`assess`) goes into ``status.experts[].failingOn`` and the
``AdaptersHealthy`` condition; a pod where the adapter loads again drops out of
``failingOn`` on the next look, even while the window still holds the old failures.

This module decides; :mod:`mol_operator.adapter_probe` asks Prometheus and the pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from mol_operator.status import condition, merge_conditions

FAILURES_METRIC: Final = "mol_router_adapter_replica_failures_total"
OTHER: Final = "other"  # the routers' label for adapters past their top K
CONDITION: Final = "AdaptersHealthy"
DEFAULT_WINDOW: Final = "10m"  # the MoLAdapterFailsOnReplica alert's window


@dataclass(frozen=True)
class AdapterHealth:
    """What one look found.

    ``state``: ``healthy`` (no adapter fails on a ready pod), ``failing`` (``failing_on``
    maps each expert to the pods where one of its served versions fails, ``errors`` says
    how) or ``unknown`` (no Prometheus, or it did not answer: ``message`` says why, and
    the status keeps what the last look found)."""

    state: Literal["healthy", "failing", "unknown"]
    reason: str
    message: str
    failing_on: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def failing(self) -> bool:
        return self.state == "failing"


def _label(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def failures_query(deployment: str, window: str) -> str:
    """PromQL: the adapters (``ns/name`` or ``other``) whose failures to load on some
    replica of ``deployment`` the routers counted within ``window``."""
    return (f"sum by (adapter) (increase({FAILURES_METRIC}{{deployment={_label(deployment)}}}"
            f"[{window}])) > 0")


def failing_adapters(samples: Iterable[Mapping[str, Any]]) -> set[str]:
    """The ``adapter`` labels of a :func:`failures_query` answer."""
    return {str(s["metric"]["adapter"]) for s in samples
            if isinstance(s.get("metric"), Mapping) and s["metric"].get("adapter")}


def probe_names(failing: set[str], names: Mapping[str, str]) -> list[str]:
    """The immutable names (``ns/name@vN``, keys of ``names``) to ask the pods for: those
    of the adapters the routers named; every one when they named ``other`` (an adapter
    past their top K: which one is not known)."""
    if OTHER in failing:
        return sorted(names)
    return sorted(n for n in names if n.rsplit("@", 1)[0] in failing)


def healthy(window: str) -> AdapterHealth:
    return AdapterHealth("healthy", "Healthy",
                         f"no adapter failed to load on a running engine pod in the last "
                         f"{window}")


def unknown(reason: str, message: str) -> AdapterHealth:
    return AdapterHealth("unknown", reason, message)


def assess(names: Mapping[str, str], results: Mapping[tuple[str, str], str | None],
           window: str) -> AdapterHealth:
    """The health from the probes: ``names`` maps each probed immutable name to its
    expert, ``results`` each (pod, name) to None (it answered) or the error."""
    failing_on: dict[str, set[str]] = {}
    errors: list[str] = []
    for (pod, name), error in sorted(results.items()):
        if error is None:
            continue
        failing_on.setdefault(names[name], set()).add(pod)
        errors.append(f"{name} on {pod}: {error}")
    if not errors:
        return healthy(window)
    experts = ", ".join(f"{e} on {', '.join(sorted(p))}" for e, p in sorted(failing_on.items()))
    return AdapterHealth(
        "failing", "FailingOnPods",
        f"adapters fail to load on running engine pods (the routers avoid those pods for "
        f"them): {experts}. {'; '.join(errors)}"[:1000],
        {e: sorted(p) for e, p in failing_on.items()}, errors)


def apply_health(experts: Sequence[Mapping[str, Any]], health: AdapterHealth,
                 old: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``status.experts`` with ``failingOn`` set where an expert fails and left out where
    it does not; an unknown look keeps what the previous status said."""
    before = {e.get("name"): e.get("failingOn") for e in old if isinstance(e, Mapping)}
    out: list[dict[str, Any]] = []
    for e in experts:
        item = {k: v for k, v in e.items() if k != "failingOn"}
        pods = (before.get(e["name"]) if health.state == "unknown"
                else health.failing_on.get(e["name"]))
        if pods:
            item["failingOn"] = list(pods)
        out.append(item)
    return out


def health_condition(health: AdapterHealth) -> dict[str, Any]:
    """``AdaptersHealthy``: True when no adapter fails on a running pod, False while one
    does (``FailingOnPods``), Unknown without a measurement."""
    ok = None if health.state == "unknown" else not health.failing
    return condition(CONDITION, ok, health.reason, health.message)


def with_health(status: Mapping[str, Any], health: AdapterHealth, old: Mapping[str, Any],
                generation: Any) -> dict[str, Any]:
    """A reconcile's status with the look's outcome: ``failingOn`` per expert and the
    ``AdaptersHealthy`` condition (its ``lastTransitionTime`` kept while it holds)."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != CONDITION]
    mine = merge_conditions(old.get("conditions") or [], [health_condition(health)],
                            generation)
    return {**status,
            "experts": apply_health(status.get("experts") or [], health,
                                    old.get("experts") or []),
            "conditions": [*conditions, *mine]}
