"""Canary rollouts inside a reconcile: measure, decide (``canary.canary_step``), promote.

The decision state lives in ``status.experts[].canary`` so a restarted operator carries
on. Promotion makes the canary version the stable one: when the expert's stable ref is
an alias the operator moves that alias in the catalog (the catalog keeps its history);
when it is pinned (``@vN``/``@sha256:``) the promotion is rendered into the
RouterConfig (the stable adapter becomes the canary's immutable version) and stays in
status until the spec changes. Before a step that would promote, the canary's promotion
gates are checked against both versions' eval reports, read from the catalog then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mol_operator.canary import (
    TERMINAL,
    CanaryMeasurement,
    canary_step,
    next_promotes,
    status_from_dict,
    status_to_dict,
    transition_result,
)
from mol_operator.canary_measure import CanaryAnalysisError, measure_canary
from mol_operator.catalog import CatalogFacts, Retry
from mol_operator.gates import MISSING, GateResult, check_gates, first_problem
from mol_operator.metrics import OperatorMetrics
from mol_platform.clients.catalog import CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract.refs import AdapterRef
from mol_platform.contract.spec import CanarySpec, MoLDeployment


@dataclass
class Rollout:
    """What the canaries decided this reconcile."""

    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    stable_overrides: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)


def previous_states(old_status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {e["name"]: e["canary"] for e in old_status.get("experts") or []
            if isinstance(e, Mapping) and e.get("canary")}


async def _measure(prometheus_url: str | None, deployment: str, expert: str, stable: int,
                   canary: int, window: str) -> tuple[CanaryMeasurement | None, str]:
    """The measurement, or None and why there is none (no data never promotes: the
    step holds, and the status says why)."""
    if not prometheus_url:
        return None, "no measurement: the operator has no Prometheus (--prometheus-url)"
    try:
        return await measure_canary(prometheus_url, deployment=deployment, expert=expert,
                                    stable_version=stable, canary_version=canary,
                                    window=window), ""
    except CanaryAnalysisError as exc:
        return None, f"no measurement from Prometheus: {str(exc)[:300]}"


async def step_canaries(
    obj: MoLDeployment, cat: CatalogFacts, old_status: Mapping[str, Any], *,
    catalog: AsyncCatalogClient, prometheus_url: str | None, metrics: OperatorMetrics | None,
    now: datetime, delay: float,
) -> Rollout:
    out = Rollout()
    before_all = previous_states(old_status)
    name = obj.metadata.name
    for e in obj.spec.experts:
        resolved = cat.canaries.get(e.name)
        if e.canary is None or resolved is None:
            if metrics is not None:
                metrics.forget_canary(name, e.name)
            continue
        before = status_from_dict(before_all.get(e.name))
        stable = cat.experts[e.name]
        measurement, missing = None, "no measurement from Prometheus"
        if before is not None and before.version == resolved.version and (
                before.phase not in TERMINAL):
            measurement, missing = await _measure(prometheus_url, name, e.name, stable.version,
                                                  resolved.version, e.canary.interval)
        gate = None
        if e.canary.gates and next_promotes(e.canary, before) and (
                before is not None and before.version == resolved.version):
            gate = await _gate_problem(catalog, e.canary, stable.ref, stable.version,
                                       resolved.version)
        after, message = canary_step(e.canary, before, resolved.version, measurement, now,
                                     missing, gate)
        ref = AdapterRef.parse(e.adapter)
        if after.phase == "Promoted":
            if ref.immutable or ref.ref == "latest":  # no alias to move
                out.stable_overrides[e.name] = f"{ref.adapter}@v{resolved.version}"
            elif stable.version != resolved.version:
                await _move_alias(catalog, ref, resolved.version, delay)
                cat.experts[e.name] = resolved
            out.weights[e.name] = 0.0
        else:
            out.weights[e.name] = after.weight
        out.states[e.name] = status_to_dict(after)
        if message:
            warn = after.phase in ("RolledBack", "Paused")
            out.events.append(("Warning" if warn else "Normal",
                               f"Canary{after.phase}", f"expert {e.name}: {message}"))
        if metrics is not None:
            metrics.canary(name, e.name, out.weights[e.name], transition_result(before, after))
    return out


async def _gate_problem(catalog: AsyncCatalogClient, spec: CanarySpec, stable_ref: str,
                        stable: int, canary: int) -> GateResult | None:
    """The promotion gate that does not hold (None: all hold), from both versions' eval
    reports; reports the catalog cannot give count as missing (no data never promotes)."""
    stable_adapter = AdapterRef.parse(stable_ref).adapter
    canary_adapter = AdapterRef.parse(spec.adapter).adapter
    try:
        theirs = await catalog.evals(stable_adapter, stable)
        mine = await catalog.evals(canary_adapter, canary)
    except CatalogError as exc:
        return GateResult("*", MISSING, f"eval reports for the promotion gates could not be "
                                        f"read from the catalog: {str(exc)[:300]}")
    return first_problem(check_gates(spec.gates, theirs, mine, stable, canary))


async def _move_alias(catalog: AsyncCatalogClient, ref: AdapterRef, version: int,
                      delay: float) -> None:
    try:
        await catalog.set_alias(ref.adapter, ref.ref, version)
    except CatalogError as exc:
        raise Retry("PromotionFailed",
                    f"moving {ref} to v{version} failed: {exc}; the canary stays at its last "
                    "weight until the catalog accepts it", delay,
                    condition="CanaryHealthy") from None
