"""Every PromQL expression of the dashboards and alert rules, evaluated by a real
Prometheus scraping a real catalog, router and operator (processes, driven with real
traffic) and simulated vLLM replicas (the engine's own metric families)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from mol_operator.crd import crd_manifest
from mol_router.auto.heads.model import Head
from mol_testkit.kube import KubeServer
from mol_testkit.kube_client import ResourceSpec
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port, stop_process, wait_port
from mol_testkit.prometheus import PrometheusServer
from mol_testkit.simulator import SimConfig, SimulatorCluster
from mol_testkit.simulator.embeddings import DIMS

from .conftest import CHART

pytestmark = pytest.mark.prometheus

VARIABLES = {"$__rate_interval": "1m", "$namespace": ".*", "$deployment": ".*", "$expert": ".*",
             "$max_error_rate": "0.02", "$max_latency_ratio": "1.25"}
# Expressions that only have data after a failure this test does not cause; the
# expression still has to evaluate.
NEEDS_AN_INCIDENT = {
    "MoLCatalog5xx": "a catalog failure (tests/catalog/test_outages.py makes them)",
    "MoLCanaryRolledBack": "a rollback (tests/operator/test_canary_prometheus.py makes one)",
    **{f"MoLAdapter{j}Jump": "an adapter's sustained jump (tests/chart/alerts/ has one)"
       for j in ("ErrorRate", "ColdLoads")},
    **{f"MoL{c}NotScraped": "a missing target (tests/chart/alerts/ has one)"
       for c in ("Catalog", "Operator", "Router")},
}
PROFILE = "default.macaron"
KEY, LIMITED_KEY = "k-acme-" + "a" * 20, "k-tiny-" + "b" * 20
RBAC = (ResourceSpec("rbac.authorization.k8s.io", "v1", "roles", "Role", subresources=()),
        ResourceSpec("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding",
                     subresources=()))


def dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for path in sorted((CHART / "files" / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for var, value in VARIABLES.items():
                    expr = expr.replace(var, value)
                out.append((f"{path.stem}: {panel['title']}", expr))
    return out


def rule_queries() -> list[tuple[str, str]]:
    rules = yaml.safe_load((CHART / "files" / "prometheus" / "mol-alerts.rules.yaml").read_text())
    out = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            expr = " ".join(str(rule["expr"]).split())
            out.append((rule["alert"], re.sub(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.]+\s*$", "", expr)))
    return out


def _mol(*args: str, env: dict[str, str] | None = None, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "mol_platform", *args],
                                env={**os.environ, **(env or {})},
                                stdout=out, stderr=subprocess.STDOUT)


def _seed_catalog(url: str) -> None:
    model = SyntheticLlama()
    with httpx.Client(base_url=url, timeout=60) as c:
        c.post("/v1/base-models", json=model.base_body()).raise_for_status()
        c.put(f"/v1/serving-profiles/{PROFILE}", json={
            "base_model": f"{model.name}@{model.revision}", "engine": "vllm==0.32.0",
            "max_lora_rank": 8, "max_loras": 4}).raise_for_status()

        def publish(name: str, seed: int, alias: str, rank: int = 8,
                    layers: int | None = None) -> httpx.Response:
            cfg, weights = model.lora_files(rank, seed=seed, layers=layers)
            return c.post(f"/v1/adapters/demo/{name}/versions", data={"alias": alias}, files={
                "adapter_config.json": ("adapter_config.json", cfg),
                "adapter_model.safetensors": ("adapter_model.safetensors", weights)})

        for name, seed, alias, rank in (("chat", 1, "stable", 8), ("coding", 2, "stable", 8),
                                        ("coding", 3, "candidate", 8), ("big", 4, "trial", 16)):
            publish(name, seed, alias, rank).raise_for_status()
        # Does not fit the base at all: a compatibility rejection.
        assert publish("broken", 5, "stable", layers=model.layers + 3).status_code == 422


def _router_config(tmp: Path, catalog: str, engines: list[str]) -> Path:
    keys = tmp / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [
        {"tenant": "acme", "key": KEY},
        {"tenant": "tiny", "key": LIMITED_KEY, "requestsPerMinute": 1}]}))
    cfg = tmp / "router.yaml"
    cfg.write_text(yaml.safe_dump({
        "deployment": "macaron", "profile": PROFILE, "catalogUrl": catalog,
        "baseModel": "tiny-llama", "mode": "explicit", "default": "chat",
        "experts": [{"name": "chat", "adapter": "demo/chat@stable"},
                    {"name": "coding", "adapter": "demo/coding@stable",
                     "canary": {"adapter": "demo/coding@candidate", "weight": 50}},
                    # too big for the profile: on an unprotected alias (stable is
                    # protected and would refuse the move)
                    {"name": "big", "adapter": "demo/big@trial"}],
        "handoffEnabled": True, "adapterNamespaces": ["demo"], "endpoints": engines,
        "apiKeysFile": str(keys)}))
    return cfg


def _publish_heads(url: str) -> None:
    """Two router heads over the simulator's embeddings: ``@stable`` and a candidate that
    names the experts the other way round (so the two disagree on every turn)."""
    rng = np.random.default_rng(7)
    weights = rng.normal(size=(2, DIMS))
    heads = [Head(experts, weights, np.zeros(2), 1.0, 0.0, "sim")
             for experts in (("chat", "coding"), ("coding", "chat"))]
    with httpx.Client(base_url=url, timeout=60) as c:
        for head, alias in zip(heads, ("stable", "candidate"), strict=True):
            r = c.post("/v1/namespaces/demo/router-heads/router/versions",
                       content=head.dumps(), headers={"Content-Type": "application/json"})
            r.raise_for_status()
            c.put(f"/v1/namespaces/demo/router-heads/router/aliases/{alias}",
                  json={"version": r.json()["version"]}).raise_for_status()


def _semantic_router_config(tmp: Path, catalog: str, engines: list[str]) -> Path:
    """A second deployment routing ``model: auto`` with the catalog's head, a candidate
    head on half of the users, and its decisions recorded for labelling."""
    cfg = tmp / "router-auto.yaml"
    cfg.write_text(yaml.safe_dump({
        "deployment": "macaron-auto", "profile": PROFILE, "catalogUrl": catalog,
        "baseModel": "tiny-llama", "mode": "semantic", "default": "chat",
        "experts": [{"name": "chat", "adapter": "demo/chat@stable"},
                    {"name": "coding", "adapter": "demo/coding@stable"}],
        "semantic": {"embeddingsUrl": engines[0], "model": "sim",
                     "head": "demo/router@stable", "recordDecisions": True,
                     "canary": {"head": "demo/router@candidate", "weight": 50}},
        "endpoints": engines}))
    return cfg


def _automatic_traffic(router: str, catalog: str) -> None:
    """Automatic turns for both heads, then a reviewer labels each recorded decision."""
    ids = []
    with httpx.Client(base_url=router, timeout=60) as c:
        for user in range(12):
            r = c.post("/v1/chat/completions", json={
                "model": "auto", "user": f"u{user}", "max_tokens": 2, "messages": [
                    {"role": "user", "content": f"fix the bug in line {user} of my code"}]})
            assert r.status_code == 200, r.text
            ids.append(r.headers["x-request-id"])
    with httpx.Client(base_url=catalog, timeout=60) as c:
        deadline = time.monotonic() + 30
        for rid in ids:
            while c.get(f"/v1/namespaces/demo/routing/decisions/{rid}").status_code == 404:
                assert time.monotonic() < deadline, f"decision {rid} never recorded"
                time.sleep(0.2)
            c.put(f"/v1/namespaces/demo/routing/labels/{rid}",
                  json={"expert": "coding"}).raise_for_status()


def _traffic(router: str, sims: SimulatorCluster) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    msg = [{"role": "user", "content": "hello there"}]
    with httpx.Client(base_url=router, timeout=60, headers=auth) as c:
        for user in range(8):
            r = c.post("/v1/chat/completions", json={"model": "coding", "messages": msg,
                                                     "user": f"u{user}", "max_tokens": 4})
            assert r.status_code == 200, r.text
        with c.stream("POST", "/v1/chat/completions", json={
                "model": "chat", "messages": msg, "stream": True, "max_tokens": 4}) as s:
            assert s.status_code == 200
            s.read()
        assert c.post("/v1/chat/completions", json={"model": "big", "messages": msg}
                      ).status_code == 422
        sims.script_tool_call("demo/chat@v1", "handoff",
                              {"expert": "coding", "summary": "wants code"}, times=1, replica=0)
        sims.script_tool_call("demo/chat@v1", "handoff",
                              {"expert": "coding", "summary": "wants code"}, times=1, replica=1)
        r = c.post("/v1/chat/completions", json={"model": "chat", "messages": msg})
        assert r.status_code == 200, r.text
        sims.clear_scripts()
        # Every replica fails: retried (upstream errors), then a 5xx for the client.
        sims.script_failure("demo/chat@v1", status=500, times=5)
        assert c.post("/v1/chat/completions", json={"model": "chat", "messages": msg}
                      ).status_code >= 500
        sims.clear_scripts()
        # The adapter fails to load on every replica once: each pair is avoided, and the
        # client gets 503 adapter_unavailable (mol_router_adapter_replica_failures_total).
        for version in ("demo/coding@v1", "demo/coding@v2"):  # stable or its canary
            sims.script_failure(version, status=400, times=1, message=(
                f"LoRA adapter '{version}' was found but could not be loaded."))
        r = c.post("/v1/chat/completions", json={"model": "coding", "messages": msg})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "adapter_unavailable"
        sims.clear_scripts()
        limited = {"Authorization": f"Bearer {LIMITED_KEY}"}
        codes = [c.post("/v1/chat/completions", headers=limited,
                        json={"model": "chat", "messages": msg}).status_code for _ in range(2)]
        assert codes[-1] == 429, codes


def _moldeployment(name: str, experts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"baseModel": {"name": SyntheticLlama().name, "uri": "/models/tiny"},
                     "engine": {"maxLoraRank": 8}, "replicas": 1, "experts": experts,
                     "router": {"default": "chat"}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    tmp = tmp_path_factory.mktemp("promql")
    procs: list[subprocess.Popen[bytes]] = []
    sims = SimulatorCluster(replicas=2, config=SimConfig(
        model="tiny-llama", dynamic_loras=True, output_tokens=4))
    with sims, KubeServer() as kube, PrometheusServer() as prom:
        try:
            cport, rport, oport = free_port(), free_port(), free_port()
            procs.append(_mol("catalog", "serve", "--port", str(cport), "--no-auth",
                              "--db", f"sqlite:///{tmp / 'c.db'}", "--blobs",
                              f"file://{tmp / 'blobs'}", log=tmp / "catalog.log"))
            wait_port(cport, timeout=60)
            catalog = f"http://127.0.0.1:{cport}"
            _seed_catalog(catalog)

            cfg = _router_config(tmp, catalog, sims.urls)
            procs.append(_mol("router", "serve", "--config", str(cfg), "--port", str(rport),
                              log=tmp / "router.log"))
            _publish_heads(catalog)
            aport = free_port()
            procs.append(_mol("router", "serve", "--config", str(_semantic_router_config(
                tmp, catalog, sims.urls)), "--port", str(aport), log=tmp / "router-auto.log"))
            wait_port(rport, timeout=60)
            wait_port(aport, timeout=60)

            kube.register_crd(crd_manifest())
            for spec in RBAC:
                kube.register(spec)
            procs.append(_mol(
                "operator", "run", "--kube-url", kube.url, "--catalog-url", catalog,
                "--prometheus-url", prom.url, "--metrics-port", str(oport),
                "--retry-seconds", "1", env={"MOL_OPERATOR_CANARY_TICK_SECONDS": "1"},
                log=tmp / "operator.log"))
            wait_port(oport, timeout=60)
            with kube.client() as k:
                k.create(_moldeployment("macaron", [
                    {"name": "chat", "adapter": "demo/chat@stable"},
                    {"name": "coding", "adapter": "demo/coding@stable",
                     "canary": {"adapter": "demo/coding@candidate", "steps": [50, 100],
                                "interval": "1m"}}]))
                # Two experts of one name: refused by the operator (an invalid spec).
                k.create(_moldeployment("twins", [
                    {"name": "chat", "adapter": "demo/chat@stable"},
                    {"name": "chat", "adapter": "demo/coding@stable"}]))

            # The job names the chart's and the operator's ServiceMonitors give.
            prom.configure({"mol-catalog": [f"127.0.0.1:{cport}"],
                            "mol-router": [f"127.0.0.1:{rport}", f"127.0.0.1:{aport}"],
                            "mol-operator": [f"127.0.0.1:{oport}"],
                            "mol-engine": [u.removeprefix("http://") for u in sims.urls]})
            prom.wait_for('count(up == 1) == 6', timeout=60)
            _traffic(f"http://127.0.0.1:{rport}", sims)
            _automatic_traffic(f"http://127.0.0.1:{aport}", catalog)
            # Two scrapes after the traffic, so that rate() has two samples of each.
            prom.wait_for("mol_router_handoffs_total", timeout=30)
            prom.wait_for("mol_catalog_routing_labels_total", timeout=30)
            prom.wait_for("mol_router_head_agreement_total", timeout=30)
            prom.wait_for('mol_operator_canary_transitions_total', timeout=60)
            prom.wait_for('mol_operator_reconcile_total{result!="ok"}', timeout=60)
            time.sleep(3)
            yield prom
        finally:
            for proc in procs:
                stop_process(proc)
            for log in sorted(tmp.glob("*.log")):
                sys.stderr.write(f"--- {log.name} (tail)\n{log.read_text()[-2000:]}\n")


@pytest.mark.parametrize(("where", "expr"), dashboard_queries() + rule_queries(),
                         ids=[w for w, _ in dashboard_queries() + rule_queries()])
def test_expression_evaluates_and_has_data(stack: PrometheusServer, where: str,
                                           expr: str) -> None:
    result = stack.query(expr)  # a PromQL error raises
    if where in NEEDS_AN_INCIDENT:
        return
    assert result, f"{where}: {expr!r} returned no data"
