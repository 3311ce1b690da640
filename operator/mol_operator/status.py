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

CONDITION_TYPES = ("Ready", "AdaptersResolved", "Compatible", "Progressing", "CanaryHealthy")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None


class CanaryState(_Model):
    version: int | None = None
    weight: float = 0.0
    phase: str = "Progressing"
    step: int = 0
    last_step_at: str | None = None
    message: str = ""


class ExpertStatus(_Model):
    name: str
    adapter: str
    version: int | None = None
    digest: str | None = None
    compatible: bool | None = None
    reasons: list[str] = Field(default_factory=list)
    serving: bool | None = None
    warmup_errors: list[str] = Field(default_factory=list)
    canary: CanaryState | None = None


class CatalogTokenStatus(_Model):
    id: int
    secret: str
    scopes: list[str] = Field(default_factory=list)


class MoLDeploymentStatus(_Model):
    """What ``kubectl get mold -o yaml`` shows under ``status``."""

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    replicas: int | None = None
    ready_replicas: int | None = None
    endpoint: str | None = None
    profile: str | None = None
    experts: list[ExpertStatus] = Field(default_factory=list)
    expert_count: int | None = None
    canary: str | None = None
    catalog_token: CatalogTokenStatus | None = None


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
