"""The ``MoLDeployment`` status: its model (the CRD's status schema comes from it) and
the condition bookkeeping.

Conditions follow Kubernetes conventions: ``lastTransitionTime`` moves only when the
status flips, so a reconcile that finds nothing new computes an identical status and
writes nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from mol_operator.gates import FAILED, MISSING

CONDITION_TYPES = ("Ready", "AdaptersResolved", "Compatible", "Progressing", "CanaryHealthy",
                   "OptionalApisAvailable", "AdaptersHealthy")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              use_attribute_docstrings=True)


class Condition(_Model):
    """One condition, Kubernetes style."""

    type: str
    """Ready, AdaptersResolved, Compatible, Progressing, CanaryHealthy,
    OptionalApisAvailable or AdaptersHealthy."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str
    """Why, in one CamelCase word."""
    message: str = ""
    """What happened and what to change, for people."""
    observed_generation: int | None = None
    """The spec generation the condition was computed for."""
    last_transition_time: str | None = None
    """When the status last flipped."""


class CanaryState(_Model):
    """Where a canary's rollout stands (kept here, so a restarted operator goes on)."""

    version: int | None = None
    """The canary's immutable version."""
    weight: float = 0.0
    """Percent of the expert's traffic sent to the canary."""
    phase: str = "Progressing"
    """Progressing, Paused, Promoted or RolledBack."""
    step: int = 0
    """Index into the expert's canary.steps."""
    last_step_at: str | None = None
    """When the current step began."""
    message: str = ""
    """The last decision, for people."""
    gate: str = ""
    """GateMissing or GateFailed while a promotion gate holds the canary (the message
    names the gate and why); empty otherwise."""


class ExpertStatus(_Model):
    """One expert as the catalog resolved it."""

    name: str
    """The expert's name."""
    adapter: str
    """The reference from the spec."""
    version: int | None = None
    """The version the reference resolved to."""
    digest: str | None = None
    """That version's manifest digest."""
    compatible: bool | None = None
    """Whether the version fits the deployment's serving profile."""
    reasons: list[str] = Field(default_factory=list)
    """Why it does not fit, when it does not."""
    serving: bool | None = None
    """False while the adapter failed to warm on some engine."""
    warmup_errors: list[str] = Field(default_factory=list)
    """``<pod>: <adapter>: <error>`` for each failed warm-up."""
    failing_on: list[str] = Field(default_factory=list)
    """The running engine pods where the expert's adapter fails to load now, as the
    routers saw (their adapter failures in Prometheus) and a probe of each pod confirmed;
    absent once it loads there again (the AdaptersHealthy condition says how it fails)."""
    canary: CanaryState | None = None
    """The canary's rollout, when the expert has one."""


class CatalogTokenStatus(_Model):
    """The deployment's catalog read token (the token itself is only in the Secret)."""

    id: int
    """The token's id in the catalog."""
    secret: str
    """The Secret holding it."""
    scopes: list[str] = Field(default_factory=list)
    """What it may read."""


class MoLDeploymentStatus(_Model):
    """What ``kubectl get mold -o yaml`` shows under ``status``."""

    observed_generation: int | None = None
    """The spec generation last reconciled."""
    conditions: list[Condition] = Field(default_factory=list)
    """Ready, AdaptersResolved, Compatible, Progressing, CanaryHealthy,
    OptionalApisAvailable, AdaptersHealthy."""
    replicas: int | None = None
    """Engine replicas wanted."""
    ready_replicas: int | None = None
    """Engine replicas ready."""
    endpoint: str | None = None
    """The router's OpenAI-compatible URL inside the cluster."""
    profile: str | None = None
    """The serving profile declared in the catalog."""
    experts: list[ExpertStatus] = Field(default_factory=list)
    """Every expert as resolved."""
    expert_count: int | None = None
    """How many experts the spec has."""
    canary: str | None = None
    """The running canary in one line (the Canary column)."""
    catalog_token: CatalogTokenStatus | None = None
    """The catalog read token the engines and the router use."""


def now_rfc3339() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(type_: str, ok: bool | None, reason: str, message: str = "") -> dict[str, Any]:
    """A condition dict without timestamps (``merge_conditions`` adds them)."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": type_, "status": status, "reason": reason, "message": message}


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], generation: int | None,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """New conditions, keeping ``lastTransitionTime`` of those whose status did not flip."""
    previous = {c.get("type"): c for c in old}
    stamp = now or now_rfc3339()
    out: list[dict[str, Any]] = []
    for cond in new:
        before = previous.get(cond["type"])
        same = before is not None and before.get("status") == cond["status"]
        ltt = before.get("lastTransitionTime") if same and before is not None else stamp
        out.append({**cond, "observedGeneration": generation, "lastTransitionTime": ltt})
    return out


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level status keys that differ (a merge patch); empty when unchanged.

    A key present before and absent now is set to None so the merge patch removes it.
    """
    patch: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) != v}
    for key in old:
        if key not in new and not key.startswith("kopf"):
            patch[key] = None
    return patch


def canary_condition(experts: list[dict[str, Any]], rolled_back: list[str], paused: list[str],
                     any_canary: bool) -> dict[str, Any]:
    """``CanaryHealthy``: False once a canary rolled back, or while a promotion gate fails
    (``GateFailed``); Unknown while a gate's eval report is missing (``GateMissing``) or
    a canary is held for want of a measurement (Prometheus unset or unreachable, or no
    canary traffic yet), since nothing has shown it healthy; True otherwise. The message
    names each expert, the gate and why."""
    def why(names: list[str]) -> str:
        return "; ".join(f"{e['name']}: {e['canary'].get('message', '')}".strip(": ")
                         for e in experts if e["name"] in names)
    if rolled_back:
        return condition("CanaryHealthy", False, "RolledBack", why(rolled_back))
    for reason, status in ((FAILED, False), (MISSING, None)):
        held = [e["name"] for e in experts
                if e["name"] in paused and (e.get("canary") or {}).get("gate") == reason]
        if held:
            return condition("CanaryHealthy", status, reason, why(held))
    if paused:
        return condition("CanaryHealthy", None, "NoMeasurement", why(paused))
    return condition("CanaryHealthy", True, "Healthy" if any_canary else "NoCanary")
