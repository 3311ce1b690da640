"""Warm a Ready engine pod and write what happened into its MoLDeployment's status.

Status tells the truth: an expert whose adapter failed to warm on a pod carries that
pod's error in ``status.experts[].warmupErrors`` and ``serving: false`` until a later
warm-up of that pod succeeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import kopf
from pydantic import ValidationError

from mol_operator.reconcile import Runtime
from mol_operator.warmup_plan import apply_results, model_names
from mol_platform.contract.spec import API_VERSION, PLURAL, MoLDeploymentSpec

MOLD_API, MOLD_PLURAL = API_VERSION, PLURAL


async def record_warmup(runtime: Runtime, pod: Mapping[str, Any]) -> None:
    meta = pod.get("metadata") or {}
    deployment = (meta.get("labels") or {}).get("app.kubernetes.io/instance")
    namespace = meta.get("namespace")
    if not deployment:
        return
    owner = await runtime.kube.get(MOLD_API, MOLD_PLURAL, namespace, deployment)
    if owner is None:
        return
    status = owner.get("status") or {}
    try:
        spec = MoLDeploymentSpec.model_validate(owner.get("spec") or {})
    except ValidationError:
        return  # the reconcile reports the bad spec
    names = model_names(spec, status)
    if not names:
        return  # not reconciled yet: the next pod event (or resync) warms it
    results = await runtime.warmer.warm([pod], sorted(names))
    if not results:
        return
    errors = {name: error for (_, name), error in results.items()}
    if runtime.metrics is not None:
        for error in errors.values():
            runtime.metrics.warmups.labels("ok" if error is None else "failed").inc()
    experts = apply_results(list(status.get("experts") or []), str(meta.get("name")), names,
                            errors)
    if experts != status.get("experts"):
        await runtime.kube.patch_status(MOLD_API, MOLD_PLURAL, namespace, deployment,
                                        {"experts": experts})
    bad = [f"{n}: {e}" for n, e in errors.items() if e is not None]
    if bad:
        kopf.event(cast(kopf.Body, owner), type="Warning", reason="WarmupFailed",
                   message=f"pod {meta.get('name')}: " + "; ".join(bad)[:900])
    else:
        kopf.event(cast(kopf.Body, owner), type="Normal", reason="Warmed",
                   message=f"pod {meta.get('name')}: warmed {len(errors)} adapters")
