"""kopf end to end: a semantic router gets the embedding engine the operator runs, and
loses it when the deployment names its own embeddings server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from mol_testkit.kube_client import KubeClient

WAIT = 30.0
SEMANTIC = {"experts": [{"name": "coding", "examples": ["Fix this TypeError in my loop"],
                         "keywords": ["python"]}]}


def _at(generation: int) -> Callable[[dict[str, Any]], bool]:
    return lambda o: o.get("status", {}).get("observedGeneration") == generation


def _config(kube_client: KubeClient) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        kube_client.get("ConfigMap", "macaron-router")["data"]["router.yaml"])
    return data


def test_semantic_router_gets_an_embedding_engine_until_it_names_a_server(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any) -> None:
    runner = run_operator()
    router = {"mode": "semantic-then-classifier", "classifier": {"expert": "router"},
              "default": "chat", "replicas": 1, "semantic": SEMANTIC}
    kube_client.create(make_manifest(router=router))
    obj = kube_client.wait_for("MoLDeployment", "macaron", _at(1), timeout=WAIT)

    dep = kube_client.get("Deployment", "macaron-embedding")
    service = kube_client.get("Service", "macaron-embedding")
    assert dep["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--runner") + 1] == "pooling"
    port = service["spec"]["ports"][0]["port"]
    assert _config(kube_client)["semantic"]["embeddingsUrl"] == (
        f"http://macaron-embedding.default.svc:{port}")
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] != "InvalidSpec"

    # the deployment names its own server: the engine goes, the router points there
    kube_client.patch("MoLDeployment", "macaron", {"spec": {"router": {"semantic": {
        "embeddingsUrl": "http://embeddings.ml.svc:8000"}}}})
    kube_client.wait_for("MoLDeployment", "macaron", _at(2), timeout=WAIT)
    assert kube_client.find("Deployment", "macaron-embedding") is None
    assert kube_client.find("Service", "macaron-embedding") is None
    assert _config(kube_client)["semantic"]["embeddingsUrl"] == "http://embeddings.ml.svc:8000"
    assert kube_client.find("Deployment", "macaron-engine") is not None
    runner.stop()
