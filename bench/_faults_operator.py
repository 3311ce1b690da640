"""The operator killed (SIGKILL) and restarted in the middle of a canary step
(bench/faults.py): the rollout must carry on from the MoLDeployment's status, not
start over, and the router's config must never see another weight meanwhile.

`mol operator run` is its own process, against the Kubernetes API emulator (in this
process) and the real catalog (`mol catalog serve`'s code on SQLite, auth on), as in
bench/operator_scale.py. A deployment's coding expert canaries bench/coding@candidate
at steps 25, 50, 100 every ``interval``; no Prometheus is reachable, so when a step is
due the weight holds (no data never promotes). The router's ConfigMap is sampled every
50 ms from creation to the end.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from _faults_scenarios import Row
from _machine import Proc, wait_http
from mol_platform.clients.catalog import CatalogClient
from mol_testkit.kube import KubeServer
from mol_testkit.kube_client import ResourceSpec
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port
from operator_scale import ADMIN, start_catalog

MOLDS = "/apis/mol.dev/v1alpha1/namespaces/default/moldeployments"
NAME = "canary-restart"


def manifest(interval_s: int) -> dict[str, Any]:
    return {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": NAME, "namespace": "default"},
        "spec": {
            "baseModel": {"name": "tiny-llama", "uri": "pvc://models/tiny-llama"},
            "engine": {"maxLoras": 4, "maxLoraRank": 16}, "replicas": 2,
            "adapterNamespaces": ["bench"],
            "experts": [{"name": "chat", "adapter": "bench/chat@stable"},
                        {"name": "coding", "adapter": "bench/coding@stable",
                         "canary": {"adapter": "bench/coding@candidate",
                                    "steps": [25, 50, 100], "interval": f"{interval_s}s"}}],
            "router": {"mode": "explicit", "default": "chat", "replicas": 1},
        },
    }


def canary(client: httpx.Client) -> dict[str, Any] | None:
    obj = client.get(f"{MOLDS}/{NAME}").json()
    for e in (obj.get("status") or {}).get("experts") or []:
        if e.get("name") == "coding" and e.get("canary"):
            return dict(e["canary"])
    return None


def router_weight(client: httpx.Client) -> float | None:
    r = client.get(f"/api/v1/namespaces/default/configmaps/{NAME}-router")
    if r.status_code != 200:
        return None
    cfg = yaml.safe_load(r.json()["data"]["router.yaml"])
    coding = next(e for e in cfg["experts"] if e["name"] == "coding")
    return float(coding["canary"]["weight"]) if coding.get("canary") else None


def operator(kube: KubeServer, catalog_url: str, work: Path) -> tuple[Proc, str]:
    metrics = free_port()
    env = {**os.environ, "MOL_OPERATOR_CATALOG_TOKEN": ADMIN,
           "MOL_OPERATOR_PROMETHEUS_URL": "http://127.0.0.1:9"}
    proc = Proc("operator", [str(Path(sys.executable).parent / "mol"), "operator", "run",
                             "--kube-url", kube.url, "--catalog-url", catalog_url,
                             "--metrics-port", str(metrics), "--resync-seconds", "2"],
                env=env, log=work / "operator.log")
    url = f"http://127.0.0.1:{metrics}"
    wait_http(url + "/healthz", proc, timeout=60)
    return proc, url


def run(work: Path, interval_s: int = 12) -> Row:
    work.mkdir(parents=True, exist_ok=True)
    catalog, catalog_url = start_catalog(work)
    kube = KubeServer().start()
    procs: list[Proc] = [catalog]
    try:
        for plural, kind in (("roles", "Role"), ("rolebindings", "RoleBinding")):
            kube.register(ResourceSpec("rbac.authorization.k8s.io", "v1", plural, kind,
                                       subresources=()))
        model = SyntheticLlama()
        cfg, weights = model.lora_files(8, seed=7)
        with CatalogClient(catalog_url, ADMIN) as c:
            c.request("POST", "/v1/adapters/bench/coding/versions",
                      data={"base": f"{model.name}@{model.revision}", "alias": "candidate"},
                      files={"adapter_config.json": ("adapter_config.json", cfg),
                             "adapter_model.safetensors": ("adapter_model.safetensors",
                                                           weights)})
        first, _ = operator(kube, catalog_url, work)
        procs.append(first)
        weights_seen: list[float | None] = []
        with httpx.Client(base_url=kube.url, timeout=30) as client:
            client.post(MOLDS, json=manifest(interval_s)).raise_for_status()
            deadline = time.monotonic() + 60
            while (state := canary(client)) is None or state.get("weight") != 25.0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the canary never started: {state}")
                time.sleep(0.05)
            before = state
            began = time.monotonic()

            def sample_until(t: float) -> None:
                while time.monotonic() < t:
                    weights_seen.append(router_weight(client))
                    time.sleep(0.05)

            sample_until(began + interval_s / 3)
            first.popen.kill()  # SIGKILL: no cleanup, no last status write
            first.popen.wait(10)
            killed = time.monotonic()
            sample_until(killed + 2.0)
            second, metrics_url = operator(kube, catalog_url, work)
            procs.append(second)
            restarted = time.monotonic()
            resumed = None
            while resumed is None and time.monotonic() < restarted + 90:
                try:
                    text = httpx.get(metrics_url + "/metrics", timeout=5).text
                except httpx.HTTPError:  # its metrics server starts once it leads
                    text = ""
                if any(line.startswith("mol_operator_reconcile_total{") and 'result="ok"'
                       in line and not line.endswith(" 0.0") for line in text.splitlines()):
                    resumed = time.monotonic() - restarted
                weights_seen.append(router_weight(client))
                time.sleep(0.05)
            after_restart = canary(client)
            # past the step's end: due, and held (no data)
            sample_until(max(began + interval_s + 4, time.monotonic() + 4))
            at_due = canary(client)
    finally:
        for p in reversed(procs):
            p.stop()
        kube.stop()
    seen = sorted({w for w in weights_seen if w is not None})
    kept = (after_restart is not None and before is not None
            and all(after_restart.get(k) == before.get(k)
                    for k in ("weight", "step", "last_step_at", "version")))
    held = at_due is not None and at_due.get("weight") == 25.0 and at_due.get("step") == 0
    row = Row("operator SIGKILLed during a canary step (emulator), then restarted", "unplanned",
              [], 0)
    row.extra = {"router_weights_seen": seen, "status_kept_across_restart": kept,
                 "weight_held_when_due_without_data": held}
    row.notes = [f"router config weights seen across the kill and restart: {seen} "
                 f"({len(weights_seen)} samples)",
                 f"status (weight, step, step start, version) kept across the restart: {kept}",
                 f"when the step fell due with no metrics: weight {at_due and at_due['weight']} "
                 f"at step {at_due and at_due['step']} ({at_due and at_due['phase']})",
                 f"the new operator's first reconcile {resumed:.1f} s after it started (it "
                 "waits for the killed one's leader lease to expire)"
                 if resumed is not None else "the new operator never reconciled in 90 s",
                 "no traffic in this row: routers keep serving their config while no "
                 "operator runs"]
    return row


async def operator_restart(work: Path) -> Row:
    return await asyncio.to_thread(run, work)
