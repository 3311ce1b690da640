"""kopf end to end with the chart's hardening settings: what reaches the API server is
admitted in a Pod Security "restricted" namespace, engines get their NetworkPolicy and
monitors carry the labels Prometheus selects on."""

from __future__ import annotations

from typing import Any

from mol_testkit.kube_client import KubeClient
from mol_testkit.pod_security import pod_spec_of, restricted_violations

WAIT = 30.0
OPERATOR_PODS = {"app.kubernetes.io/name": "mol-platform",
                 "app.kubernetes.io/component": "operator"}


def test_hardened_children_reach_the_cluster(kube_client: KubeClient, run_operator: Any,
                                             make_manifest: Any) -> None:
    run_operator(network_policy=True, pod_namespace="mol-system", pod_labels=OPERATOR_PODS,
                 monitor_labels={"release": "kube-prometheus-stack"})
    kube_client.create(make_manifest())
    kube_client.wait_for("MoLDeployment", "macaron",
                         lambda o: o.get("status", {}).get("observedGeneration") == 1,
                         timeout=WAIT)

    policy = kube_client.get("NetworkPolicy", "macaron-engine")
    peers = policy["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mol-system"}},
            "podSelector": {"matchLabels": OPERATOR_PODS}} in peers
    for name in ("macaron-engine", "macaron-router"):
        monitor = kube_client.get("ServiceMonitor", name)
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        pod = pod_spec_of(kube_client.get("Deployment", name))
        assert pod is not None
        assert restricted_violations(pod) == [], name
