"""The operator's fault rows (bench/faults.py).

Killed (SIGKILL) and restarted in the middle of a canary step: the rollout must carry
on from the MoLDeployment's status, not start over, and the router's config must never
see another weight meanwhile. And an adapter that starts failing on a running engine
pod (:func:`adapter_health`): the status must name the pod soon, and drop it soon after
the pod heals.

`mol operator run` is its own process, against the Kubernetes API emulator (in this
process) and the real catalog (`mol catalog serve`'s code on SQLite, auth on), as in
bench/operator_scale.py. In the canary row, a deployment's coding expert canaries
bench/coding@candidate at steps 25, 50, 100 every ``interval``; no Prometheus is
reachable, so when a step is due the weight holds (no data never promotes). The
router's ConfigMap is sampled every 50 ms from creation to the end. The failing-adapter
row uses the rigs of the operator's own end-to-end test: a real Prometheus scraping the
routers' failure counter, simulator replicas as the engine pods.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine
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


def operator(kube: KubeServer, catalog_url: str, work: Path, *,
             prometheus: str = "http://127.0.0.1:9", resync_s: float = 2,
             **settings: str) -> tuple[Proc, str]:
    """`mol operator run` against ``kube``; ``settings``: more of its MOL_OPERATOR_*
    settings (``retry_seconds="5"``). (The process, its metrics URL.)"""
    metrics = free_port()
    env = {**os.environ, "MOL_OPERATOR_CATALOG_TOKEN": ADMIN,
           "MOL_OPERATOR_PROMETHEUS_URL": prometheus,
           **{f"MOL_OPERATOR_{k.upper()}": v for k, v in settings.items()}}
    proc = Proc("operator", [str(Path(sys.executable).parent / "mol"), "operator", "run",
                             "--kube-url", kube.url, "--catalog-url", catalog_url,
                             "--metrics-port", str(metrics), "--resync-seconds",
                             f"{resync_s:g}"],
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


# -- an adapter that starts failing on a running pod ---------------------------------------

SHOP = "shop"
PODS = ("shop-engine-a", "shop-engine-b")
RESYNC_S = 10.0  # how often the operator looks at the deployment (production: 300 s) ...
RETRY_S = 5.0  # ... and how soon again while an adapter fails (production: 30 s)
WINDOW = "30s"  # how far back the routers' failures make it ask the pods (production: 10m)
SCRAPE_S = 1.0  # Prometheus's scrape interval of the routers
NOT_LOADED = "LoRA adapter '{}' was found but could not be loaded."


def shop_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": SHOP, "namespace": "default"},
        "spec": {
            "baseModel": {"name": "tiny-llama", "uri": "pvc://models/tiny-llama"},
            "engine": {"maxLoras": 4, "maxLoraRank": 16}, "replicas": 2,
            "adapterNamespaces": ["bench"],
            "experts": [{"name": "chat", "adapter": "bench/chat@stable"},
                        {"name": "coding", "adapter": "bench/coding@stable"}],
            "router": {"mode": "explicit", "default": "chat", "replicas": 1},
        },
    }


def engine_pod(name: str, port: int) -> dict[str, Any]:
    """A running, ready engine pod of the deployment, served by a simulator on ``port``."""
    from mol_operator.warmup_plan import ENGINE_POD_LABELS

    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {**ENGINE_POD_LABELS, "app.kubernetes.io/instance": SHOP}},
            "spec": {"containers": [{"name": "vllm", "image": "vllm",
                                     "ports": [{"name": "http", "containerPort": port}]}]}}


READY = {"phase": "Running", "podIP": "127.0.0.1",
         "conditions": [{"type": "Ready", "status": "True"}]}


def _within(check: Callable[[], Any], within: float) -> float | None:
    """Seconds until ``check()`` is truthy (polled every 50 ms), or None after ``within``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            return None
        time.sleep(0.05)
    return time.monotonic() - started


def _until(check: Callable[[], Any], what: str, within: float) -> float:
    """As :func:`_within`, for what the row needs before its fault: RuntimeError if not."""
    took = _within(check, within)
    if took is None:
        raise RuntimeError(f"{what}: not within {within:g} s")
    return took


def adapter_health(work: Path) -> Row:
    """Two engine pods (simulator replicas in the Kubernetes API emulator) serve a
    deployment; after their warm-up, pod b's copy of chat breaks and the routers count
    its failures (an exporter a real Prometheus scrapes, fed as a router retrying the
    pair does); then it heals. Measured: fault -> ``failingOn`` in the status, heal ->
    ``failingOn`` gone, with `mol operator run` as its own process."""
    from prometheus_client import CollectorRegistry, Counter, start_http_server

    from mol_operator.warmup_plan import model_names
    from mol_platform.contract.spec import MoLDeployment
    from mol_testkit.prometheus import PrometheusServer
    from mol_testkit.simulator.cluster import SimulatorCluster
    from mol_testkit.simulator.config import SimConfig

    work.mkdir(parents=True, exist_ok=True)
    catalog, catalog_url = start_catalog(work)
    procs: list[Proc] = [catalog]
    kube = KubeServer().start()
    registry = CollectorRegistry()
    failures = Counter("mol_router_adapter_replica_failures", "the routers' counter",
                       ["deployment", "adapter"], registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    prometheus = PrometheusServer(scrape_interval=f"{SCRAPE_S:g}s")
    stop = threading.Event()
    try:
        for plural, kind in (("roles", "Role"), ("rolebindings", "RoleBinding")):
            kube.register(ResourceSpec("rbac.authorization.k8s.io", "v1", plural, kind,
                                       subresources=()))
        prometheus.start([f"127.0.0.1:{server.server_port}"], "router")
        proc, _ = operator(kube, catalog_url, work, prometheus=prometheus.url,
                           resync_s=RESYNC_S, retry_seconds=f"{RETRY_S:g}",
                           adapter_failure_window=WINDOW)
        procs.append(proc)
        with kube.client() as k:
            manifest = shop_manifest()
            k.create(manifest)

            def status() -> dict[str, Any]:
                return dict(k.get("MoLDeployment", SHOP).get("status") or {})

            def experts() -> dict[str, dict[str, Any]]:
                return {e["name"]: e for e in status().get("experts") or []}

            def health() -> dict[str, Any]:
                return next((c for c in status().get("conditions") or []
                             if c["type"] == "AdaptersHealthy"), {})

            _until(lambda: status().get("observedGeneration") == 1 and health(),
                   "the first reconcile", 90)
            names = model_names(MoLDeployment.model_validate(manifest).spec, status())
            chat = next(n for n, e in names.items() if e == "chat")
            config = SimConfig(check_adapter_paths=False,
                               lora_modules={n: f"/cache/{n}" for n in names})
            with SimulatorCluster(replicas=2, config=config) as sims:
                for i, name in enumerate(PODS):
                    k.create(engine_pod(name, sims[i].port))
                    k.patch_status("Pod", name, READY)
                _until(lambda: all(e.get("serving") for e in experts().values()),
                       "the warm-ups", 60)
                before = health().get("status")
                # pod b's copy of chat breaks; the routers count each try of the pair
                sims.script_failure(chat, replica=1, status=400,
                                    message=NOT_LOADED.format(chat))

                def route() -> None:
                    while not stop.wait(0.3):
                        failures.labels(SHOP, chat.rsplit("@", 1)[0]).inc()

                feeder = threading.Thread(target=route, daemon=True)
                feeder.start()
                show_s = _within(lambda: experts()["chat"].get("failingOn") == [PODS[1]],
                                 RESYNC_S * 3 + 30)
                shown = health()
                others = [n for n, e in experts().items() if n != "chat" and e.get("failingOn")]
                warned = _within(lambda: any(e.get("reason") == "FailingOnPods"
                                             for e in k.list("Event")), 5) is not None
                sims.clear_scripts(replica=1)  # it heals: the pair works, no more failures
                stop.set()
                feeder.join(5)
                clear_s = _within(lambda: "failingOn" not in experts()["chat"],
                                  RETRY_S * 3 + 30)
                after = health().get("status")
                window_holds = bool(prometheus.query(
                    f"increase(mol_router_adapter_replica_failures_total[{WINDOW}]) > 0"))
    finally:
        stop.set()
        for p in reversed(procs):
            p.stop()
        prometheus.stop()
        server.shutdown()
        server.server_close()
        thread.join(5)
        kube.stop()
    return _health_row(chat, show_s, clear_s, before, shown, after, others, warned,
                       window_holds)


def _secs(value: float | None, within: float) -> str:
    return f"after {value:.1f} s" if value is not None else f"never within {within:g} s"


def _health_row(chat: str, show_s: float | None, clear_s: float | None, before: Any,
                shown: dict[str, Any], after: Any, others: list[str], warned: bool,
                window_holds: bool) -> Row:
    show_within, clear_within = RESYNC_S + 4 * SCRAPE_S, RETRY_S + 3.0
    met = (show_s is not None and show_s <= show_within and clear_s is not None
           and clear_s <= clear_within and shown.get("status") == "False" and not others
           and after == "True")
    return Row(
        "an adapter starts failing on a running pod (operator status, emulator)", "unplanned",
        [], None,
        notes=[f"{chat} refused by {PODS[1]} after its warm-up, the routers counting each try "
               f"(every 0.3 s): experts[chat].failingOn = [{PODS[1]}] "
               f"{_secs(show_s, RESYNC_S * 3 + 30)}, AdaptersHealthy {before} -> "
               f"{shown.get('status')} ({shown.get('reason')}); other experts marked: "
               f"{others or 'none'}; FailingOnPods Warning Event: {'yes' if warned else 'no'}",
               f"the pod loads it again: failingOn gone {_secs(clear_s, RETRY_S * 3 + 30)}, "
               f"AdaptersHealthy {after}, while Prometheus's {WINDOW} window still held the "
               f"failures ({window_holds})",
               f"operator at --resync-seconds {RESYNC_S:g}, --retry-seconds {RETRY_S:g}, "
               f"window {WINDOW}, Prometheus scraping every {SCRAPE_S:g} s: showing takes up "
               "to a resync plus two scrapes, clearing up to a retry (at the defaults, 300 s "
               "and 30 s)"],
        extra={"failing_on_shown_s": None if show_s is None else round(show_s, 2),
               "failing_on_cleared_s": None if clear_s is None else round(clear_s, 2),
               "condition_while_failing": shown.get("status"),
               "goal": f"an adapter failing on a running pod: in the MoLDeployment's status "
                       f"within {show_within:g} s (a resync, then 2 scrapes), gone within "
                       f"{clear_within:g} s of the heal",
               "goal_met": met})


async def adapter_starts_failing(work: Path) -> Row:
    return await asyncio.to_thread(adapter_health, work)


OPERATOR_SCENARIOS: dict[str, Callable[[Path], Coroutine[Any, Any, Row]]] = {
    "operator-restart": operator_restart,
    "adapter-health": adapter_starts_failing,
}
"""Scenarios on the operator (its own catalog, emulator and, where needed, Prometheus):
each takes its own work folder."""
