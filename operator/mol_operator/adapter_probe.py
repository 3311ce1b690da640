"""The adapter health check's I/O: ask Prometheus what the routers saw, then the engine
pods themselves. The decisions are :mod:`mol_operator.adapter_health`'s.

Cheap when nothing fails: one Prometheus query per reconcile, and no pod is asked
anything. Pods are asked only for the adapters the routers named, with the warm-up's
one-token request, so a heal shows on the next look.
"""

from __future__ import annotations

from collections.abc import Mapping

from mol_operator.adapter_health import (
    AdapterHealth,
    assess,
    failing_adapters,
    failures_query,
    healthy,
    probe_names,
    unknown,
)
from mol_operator.prometheus import PrometheusError, query_one
from mol_operator.warmup import warm_adapters
from mol_operator.warmup_plan import ENGINE_POD_LABELS, pod_url
from mol_platform.clients.kube import KubeApi, KubeError


async def observe_adapter_health(kube: KubeApi, prometheus_url: str | None, *,
                                 deployment: str, namespace: str, names: Mapping[str, str],
                                 window: str, probe_timeout: float) -> AdapterHealth:
    """``names``: the immutable names the deployment serves now, each to its expert."""
    if not prometheus_url:
        return unknown("NoPrometheus", "the operator has no Prometheus (--prometheus-url), "
                       "so it cannot see which adapters the routers find failing")
    try:
        samples = await query_one(prometheus_url, failures_query(deployment, window))
    except PrometheusError as exc:
        return unknown("NoMeasurement", str(exc)[:300])
    todo = probe_names(failing_adapters(samples), names)
    if not todo:
        return healthy(window)
    labels = {**ENGINE_POD_LABELS, "app.kubernetes.io/instance": deployment}
    try:
        listed = await kube.list("v1", "pods", namespace, labels)
    except KubeError as exc:
        return unknown("NoMeasurement", f"listing the engine pods failed: {exc}"[:300])
    pods = {url: str((p.get("metadata") or {}).get("name"))
            for p in (listed[0] if listed else []) if (url := pod_url(p)) is not None}
    if not pods:
        return healthy(window)  # no running pod to fail on
    results = await warm_adapters(sorted(pods), todo, timeout=probe_timeout)
    by_pod = {(pods[url], name): error for (url, name), error in results.items()}
    return assess({n: names[n] for n in todo}, by_pod, window)
