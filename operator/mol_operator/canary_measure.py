"""The canary's measurement: the router's own metrics for the canary and the stable
version, read from Prometheus (the queries and every decision on them are pure, in
:mod:`mol_operator.canary`)."""

from __future__ import annotations

import asyncio

import aiohttp

from mol_operator.canary import CanaryMeasurement, canary_queries, version_of
from mol_operator.prometheus import QUERY_TIMEOUT_S, PrometheusError, query, value


class CanaryAnalysisError(PrometheusError):
    """Prometheus could not be queried; the rollout holds until it can."""


async def measure_canary(
    prometheus_url: str,
    *,
    deployment: str,
    expert: str,
    stable_version: int,
    canary_version: int,
    window: str,
) -> CanaryMeasurement:
    """Measure the canary over the last ``window`` (a PromQL duration such as ``5m``).

    Raises :class:`CanaryAnalysisError` when Prometheus cannot answer."""
    requests_q, latency_q = canary_queries(
        deployment=deployment, expert=expert, stable_version=stable_version,
        canary_version=canary_version, window=window,
    )  # fmt: skip
    async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=QUERY_TIMEOUT_S)) as client:
        try:
            by_code, latency = await asyncio.gather(
                query(client, prometheus_url, requests_q),
                query(client, prometheus_url, latency_q)
            )
        except PrometheusError as exc:
            raise CanaryAnalysisError(str(exc)) from exc
    total = errors = 0.0
    for sample in by_code:
        count = value(sample) or 0.0
        total += count
        if str(sample["metric"].get("code", "")).startswith("5"):
            errors += count
    means = {version_of(s["metric"]): value(s) for s in latency}
    canary_mean, stable_mean = means.get(canary_version), means.get(stable_version)
    ratio = None
    if canary_mean is not None and stable_mean is not None and stable_mean > 0:
        ratio = canary_mean / stable_mean
    return CanaryMeasurement(
        error_rate=errors / total if total > 0 else None,
        latency_ratio=ratio,
        requests=total,
    )
