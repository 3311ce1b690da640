"""Tracing configured on the operator: a span per reconcile exported over OTLP/HTTP,
and the deployment's router and engines rendered to export to the same collector."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mol_testkit.kube_client import KubeClient
from mol_testkit.otlp import ReceivedSpan, receiver_thread

WAIT = 30.0


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def _reconciles(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == "mol.operator.reconcile"]


def test_reconcile_span_and_tracing_children(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    with receiver_thread() as rx:
        run_operator(tracing_endpoint=rx.url, tracing_sample_ratio=1.0)
        kube_client.create(make_manifest())
        kube_client.wait_for("MoLDeployment", "macaron",
                             lambda o: o.get("status", {}).get("observedGeneration") == 1,
                             timeout=WAIT)
        deadline = time.monotonic() + 10
        while not _reconciles(rx.spans):
            assert time.monotonic() < deadline, [s.name for s in rx.spans]
            time.sleep(0.05)
        span = _reconciles(rx.spans)[0]
        router = kube_client.get("Deployment", "macaron-router")
        engine = kube_client.get("Deployment", "macaron-engine")
        url = rx.url
    assert span.service == "mol-operator"
    assert span.parent_id == ""
    assert span.attributes["mol.deployment"] == "macaron"
    assert span.attributes["k8s.namespace.name"] == "default"
    assert span.attributes["mol.generation"] == 1
    assert span.attributes["mol.plan.writes"] > 0
    env = _env(router["spec"]["template"]["spec"]["containers"][0])
    assert env["MOL_ROUTER_TRACING_ENDPOINT"] == url
    assert env["MOL_ROUTER_TRACING_SAMPLE_RATIO"] == "1"
    vllm = engine["spec"]["template"]["spec"]["containers"][0]
    args = vllm["args"]
    assert args[args.index("--otlp-traces-endpoint") + 1] == url + "/v1/traces"
    assert _env(vllm)["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"


def test_tracing_off_renders_nothing_of_it(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any) -> None:
    run_operator()
    kube_client.create(make_manifest())
    kube_client.wait_for("MoLDeployment", "macaron",
                         lambda o: o.get("status", {}).get("observedGeneration") == 1,
                         timeout=WAIT)
    router = kube_client.get("Deployment", "macaron-router")
    engine = kube_client.get("Deployment", "macaron-engine")
    assert not any(k.startswith("MOL_ROUTER_TRACING")
                   for k in _env(router["spec"]["template"]["spec"]["containers"][0]))
    vllm = engine["spec"]["template"]["spec"]["containers"][0]
    assert "--otlp-traces-endpoint" not in vllm["args"]
    assert not any(k.startswith("OTEL_") for k in _env(vllm))
