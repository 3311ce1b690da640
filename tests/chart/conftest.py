"""Chart fixtures: the loaded chart and its renders with default, minimal and full values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "mol-platform"

MINIMAL: dict[str, Any] = {
    "catalog": {"enabled": False, "externalUrl": "http://catalog.mol.svc:8080"},
    "monitoring": {"dashboards": {"enabled": False}},
    "networkPolicy": {"enabled": False},
    "crds": {"install": False},
}
FULL: dict[str, Any] = {
    "imagePullSecrets": [{"name": "regcred"}],
    "tracing": {"endpoint": "http://otel-collector.observability:4318", "sampleRatio": 0.05},
    "adminToken": {"existingSecret": "mol-admin", "key": "token"},
    "catalog": {
        "replicas": 2, "publicUrl": "https://catalog.example.com",
        "webhooks": {"allow": ["10.20.0.0/16", "*.ci.svc.cluster.local"]},
        "database": {"existingSecret": "mol-postgres", "key": "url", "poolSize": 5},
        "blobs": {"url": "s3://adapters/prod", "s3": {
            "endpointUrl": "http://minio.minio.svc:9000", "region": "eu-west-1",
            "existingSecret": "mol-s3"}},
        "nodeSelector": {"pool": "cpu"}, "tolerations": [{"key": "cpu", "operator": "Exists"}],
        "podAnnotations": {"team": "ml"},
        "serviceAccount": {"annotations": {
            "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/mol-catalog"}},
        "podLabels": {"azure.workload.identity/use": "true"},
    },
    "operator": {"watchNamespaces": ["team-a", "team-b"], "metricsPort": 9100,
                 "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "op@p.iam"}},
                 "podLabels": {"team": "platform"}},
    "engine": {"resources": {"requests": {"cpu": "4", "memory": "32Gi"}}, "shmSize": "8Gi"},
    "harness": {"runtimeClassName": "gvisor", "warmPool": 4,
                "limits": {"memory": "1Gi", "timeoutSeconds": 20},
                "egress": {"allow": ["203.0.113.0/24"]}},
    "router": {
        "image": {"repository": "registry.example.com/mol", "tag": "0.1.0"},
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                      "limits": {"cpu": "2", "memory": "1Gi"}},
        "ingress": {"enabled": True, "className": "nginx", "hosts": [
            {"host": "chat.example.com", "deployment": "macaron", "namespace": "team-a",
             "tls": {"secretName": "chat-tls"}}]},
        "httpRoute": {"enabled": True, "parentRefs": [{"name": "public", "namespace": "gw"}],
                      "routes": [{"deployment": "macaron", "namespace": "team-a",
                                  "hostnames": ["chat.example.com"]}]},
    },
    "keda": {"enabled": True},
    "kserve": {"enabled": True},
    "monitoring": {"serviceMonitors": {"enabled": True, "labels": {"release": "prom"}},
                   "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
                   "dashboards": {"namespace": "grafana"}},
    "networkPolicy": {"catalogExtraFrom": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "ci"}}}]},
}
# Cluster-wide (the default RBAC mode) with every optional integration on.
INTEGRATIONS: dict[str, Any] = {
    "keda": {"enabled": True},
    "kserve": {"enabled": True},
    "monitoring": {"serviceMonitors": {"enabled": True}, "prometheusRule": {"enabled": True}},
}
VALUE_SETS = {"default": {}, "minimal": MINIMAL, "full": FULL, "integrations": INTEGRATIONS}


@pytest.fixture(scope="session")
def chart() -> helm.Chart:
    return helm.Chart.load(str(CHART))


def render(chart: helm.Chart, values: dict[str, Any], release: str = "mol"
           ) -> list[dict[str, Any]]:
    """Every object the chart renders for ``values`` (NOTES.txt left out)."""
    out = chart.render(values, name=release, namespace="mol-system", is_install=True)
    return [doc for path, text in sorted(out.items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]
