"""Operator benchmark: N MoLDeployments reconciled by `mol operator run` against the
Kubernetes API emulator and the real catalog.

    .venv/bin/python bench/operator_scale.py                # 1,000 deployments (the reported run)
    .venv/bin/python bench/operator_scale.py --count 100    # smoke run

The operator runs as its own process (`mol operator run`, as in a cluster) so its peak
RSS is its own; the emulator runs in this process and counts the requests each client
sends (by User-Agent: the operator's own client and kopf's). The catalog is `mol
catalog serve`'s code on SQLite with auth on. Measured: time from the first create
until every deployment reports observedGeneration 1 with its conditions, reconcile
p50/p99 (from the operator's `mol_operator_reconcile_duration_seconds` histogram,
interpolated within buckets), peak RSS (VmHWM), API calls per reconcile, and the
writes of one steady-state resync of every unchanged deployment (target: none).
Writes the "operator" section of docs/benchmarks.md. (The file is not called
``operator.py``: run as a script, that name would shadow the standard library's
``operator`` module for the whole interpreter.)
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx

from _machine import Proc, machine_info, quiet_check, wait_http
from _report import write_section
from mol_platform.clients.catalog import CatalogClient
from mol_testkit.kube import KubeServer
from mol_testkit.kube_client import ResourceSpec
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port, wait_port

ROOT = Path(__file__).resolve().parents[1]
ADMIN = "mol_" + "b" * 43
OPERATOR_AGENTS = ("mol-operator/", "kopf/")
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
MOLDS = "/apis/mol.dev/v1alpha1/namespaces/default/moldeployments"


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def start_catalog(tmp: Path) -> tuple[Proc, str]:
    port = free_port()
    code = (f"from mol_catalog.server import serve; serve('127.0.0.1', {port}, "
            f"'sqlite:///{tmp / 'catalog.db'}', 'file://{tmp / 'blobs'}')")
    env = {**os.environ, "MOL_CATALOG_AUTH": "on", "MOL_CATALOG_ADMIN_TOKEN": ADMIN}
    proc = Proc("catalog", [sys.executable, "-c", code], env=env, log=tmp / "catalog.log")
    wait_port(port, timeout=60)
    url = f"http://127.0.0.1:{port}"
    model = SyntheticLlama()
    with CatalogClient(url, ADMIN) as c:
        c.request("POST", "/v1/base-models", json=model.base_body())
        for i, name in enumerate(("chat", "coding")):
            cfg, weights = model.lora_files(8, seed=i)
            c.request("POST", f"/v1/adapters/bench/{name}/versions",
                      data={"base": f"{model.name}@{model.revision}", "alias": "stable"},
                      files={"adapter_config.json": ("adapter_config.json", cfg),
                             "adapter_model.safetensors": ("adapter_model.safetensors",
                                                           weights)})
    return proc, url


def manifest(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": f"bench-{i:04d}", "namespace": "default"},
        "spec": {
            "baseModel": {"name": "tiny-llama", "uri": "pvc://models/tiny-llama"},
            "engine": {"maxLoras": 4, "maxLoraRank": 16},
            "replicas": 2,
            "adapterNamespaces": ["bench"],
            "experts": [{"name": "chat", "adapter": "bench/chat@stable"},
                        {"name": "coding", "adapter": "bench/coding@stable"}],
            "router": {"mode": "explicit", "default": "chat", "replicas": 1},
        },
    }


def reconciled(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return status.get("observedGeneration") == 1 and any(
        c.get("type") == "AdaptersResolved" and c.get("status") == "True"
        for c in status.get("conditions") or [])


def operator_requests(kube: KubeServer, since: int = 0) -> tuple[int, int, Counter[str],
                                                                  Counter[str]]:
    """(all, writes, writes by what, all by what) of the operator's requests (its client
    and kopf) from index ``since`` of the emulator's request log."""
    def count() -> tuple[int, int, Counter[str], Counter[str]]:
        total = writes = 0
        what: Counter[str] = Counter()
        calls: Counter[str] = Counter()
        for request in kube.emulator._requests[since:]:
            agent = request.headers.get("User-Agent", "")
            if not agent.startswith(OPERATOR_AGENTS):
                continue
            total += 1
            method = str(request.method).upper().rsplit(".", 1)[-1]
            plural = request.resource.plural if request.resource is not None else "?"
            sub = f"/{request.subresource}" if request.subresource else ""
            if method == "GET" and request.params.get("watch") in ("true", "1"):
                method = "WATCH"
            elif method == "GET" and request.name is None:
                method = "LIST"
            label = f"{method} {plural}{sub} ({agent.split('/')[0]})"
            calls[label] += 1
            # kopf posts Events and its own bookkeeping too: count them, they are writes
            if method in WRITE_METHODS:
                writes += 1
                what[label] += 1
        return total, writes, what, calls

    return kube.call(count)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def histogram_quantile(text: str, name: str, q: float) -> float:
    """Prometheus-style quantile from a histogram's cumulative buckets."""
    buckets: list[tuple[float, float]] = []
    for le, value in re.findall(rf'^{name}_bucket{{le="([^"]+)"}} ([0-9.e+]+)$', text, re.M):
        buckets.append((float("inf") if le == "+Inf" else float(le), float(value)))
    buckets.sort()
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            width = count - prev_count
            return prev_le + (le - prev_le) * ((rank - prev_count) / width if width else 0)
        prev_le, prev_count = le, count
    return prev_le


def counter(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{name}{{{labels}}} ([0-9.e+]+)$" if labels else rf"^{name} ([0-9.e+]+)$",
                  text, re.M)
    return float(m[1]) if m else 0.0


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_now(kube: KubeServer, operator: Proc, catalog: Proc) -> dict[str, float]:
    """CPU seconds so far of the operator, the emulator's thread and the catalog: on a
    shared machine these say more than wall time about where the work goes."""
    return {"operator": cpu_seconds(operator.popen.pid),
            "emulator": kube.call(time.thread_time),
            "catalog": cpu_seconds(catalog.popen.pid)}


def run(count: int, resync: float, timeout: float) -> dict[str, Any]:
    ok, why = quiet_check(0.5)
    if not ok:
        log(f"warning: the machine is busy ({why}); figures will be noisy")
    with tempfile.TemporaryDirectory(prefix="mol-bench-operator-") as tmp_name:
        tmp = Path(tmp_name)
        catalog, catalog_url = start_catalog(tmp)
        kube = KubeServer().start()
        operator: Proc | None = None
        try:
            for plural, kind in (("roles", "Role"), ("rolebindings", "RoleBinding")):
                kube.register(ResourceSpec("rbac.authorization.k8s.io", "v1", plural, kind,
                                           subresources=()))
            metrics_port = free_port()
            env = {**os.environ, "MOL_OPERATOR_CATALOG_TOKEN": ADMIN,
                   "MOL_OPERATOR_PROMETHEUS_URL": "http://127.0.0.1:9"}
            operator = Proc("operator", [
                str(Path(sys.executable).parent / "mol"), "operator", "run",
                "--kube-url", kube.url, "--catalog-url", catalog_url,
                "--metrics-port", str(metrics_port), "--resync-seconds", str(resync),
            ], env=env, log=tmp / "operator.log")
            metrics_url = f"http://127.0.0.1:{metrics_port}"
            wait_http(metrics_url + "/healthz", operator, timeout=60)
            log(f"operator up; creating {count} MoLDeployments")
            cpu_before = cpu_now(kube, operator, catalog)
            started = time.perf_counter()
            # The emulator is shared with the operator under full load: be patient.
            with httpx.Client(base_url=kube.url, timeout=600) as client:
                for i in range(count):
                    client.post(MOLDS, json=manifest(i)).raise_for_status()
                created = time.perf_counter() - started
                log(f"created in {created:.1f}s; waiting for every reconcile")
                done = 0
                while True:
                    # Listing every deployment loads the emulator the operator is using:
                    # list only once the operator counts enough successful reconciles.
                    oks = counter(scrape(metrics_url + "/metrics"),
                                  "mol_operator_reconcile_total", 'result="ok"')
                    if oks >= count:
                        items = client.get(MOLDS).raise_for_status().json()["items"]
                        done = sum(reconciled(o) for o in items)
                    elapsed = time.perf_counter() - started
                    if done == count:
                        break
                    if elapsed > timeout or not operator.alive():
                        raise RuntimeError(f"{done}/{count} reconciled after {elapsed:.0f}s:\n"
                                           + operator.tail())
                    time.sleep(0.5)
            all_done = time.perf_counter() - started
            cpu_after = cpu_now(kube, operator, catalog)
            cpu = {k: cpu_after[k] - cpu_before[k] for k in cpu_after}
            load = os.getloadavg()[0]
            log("CPU seconds until all reconciled: "
                + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
            log(f"all {count} reconciled in {all_done:.1f}s")
            time.sleep(2)  # let kopf finish its own bookkeeping writes
            text = scrape(metrics_url + "/metrics")
            calls, _, _, by_what = operator_requests(kube)
            oks = counter(text, "mol_operator_reconcile_total", 'result="ok"')
            retries = counter(text, "mol_operator_reconcile_total", 'result="retry"')
            p50 = histogram_quantile(text, "mol_operator_reconcile_duration_seconds", 0.5)
            p99 = histogram_quantile(text, "mol_operator_reconcile_duration_seconds", 0.99)
            per = {k: v / max(oks, 1) for k, v in by_what.most_common()}
            log("calls per reconcile: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()))
            log(f"steady state: waiting {resync * 1.6:.0f}s for one resync of every deployment")
            mark = kube.call(lambda: len(kube.emulator._requests))
            time.sleep(resync * 1.6)
            after = scrape(metrics_url + "/metrics")
            resyncs = counter(after, "mol_operator_reconcile_total", 'result="ok"') - oks
            _, resync_writes, what, _ = operator_requests(kube, mark)
            if what:
                log(f"writes during the resync: {dict(what.most_common(6))}")
            rss = peak_rss_mib(operator.popen.pid)
            return {"count": count, "created_s": created, "all_s": all_done, "p50": p50,
                    "p99": p99, "rss": rss, "calls_per": calls / max(oks, 1), "oks": oks,
                    "retries": retries, "resyncs": resyncs,
                    "resync_writes": resync_writes, "resync_s": resync, "per": per,
                    "cpu": cpu, "load": load}
        except BaseException:
            if operator is not None:
                log("operator log tail:\n" + operator.tail())
            raise
        finally:
            if operator is not None:
                operator.stop()
            kube.stop()
            catalog.stop()


def render(r: dict[str, Any]) -> str:
    m = machine_info()
    cpu = r["cpu"]
    rows = [
        ("time until all reconciled", f"{r['all_s']:.1f} s", "<= 120 s", r["all_s"] <= 120),
        ("reconcile p50", f"{r['p50'] * 1000:.0f} ms", "-", None),
        ("reconcile p99", f"{r['p99'] * 1000:.0f} ms", "-", None),
        ("operator peak RSS", f"{r['rss']:.0f} MiB", "<= 300 MB", r["rss"] * 1.048576 <= 300),
        ("API calls per reconcile", f"{r['calls_per']:.1f}", "-", None),
        ("CPU until all reconciled: operator / emulator / catalog",
         f"{cpu['operator']:.0f} / {cpu['emulator']:.0f} / {cpu['catalog']:.0f} s", "-", None),
        ("writes in a steady-state resync of every deployment",
         f"{r['resync_writes']} ({r['resyncs']:.0f} resyncs)", "0", r["resync_writes"] == 0),
    ]
    table = ["| metric | measured | target | met? |", "|---|---:|---|---|"]
    for metric, value, target, met in rows:
        table.append(f"| {metric} | {value} | {target} | "
                     f"{'-' if met is None else ('yes' if met else '**no**')} |")
    calls = ", ".join(f"{k} {v:.2f}" for k, v in r["per"].items() if v >= 0.05)
    return "\n".join([
        "## Operator",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {m.markdown()} (load average "
        f"{r['load']:.1f} at the end of the run) with "
        f"`python bench/operator_scale.py --count {r['count']} --resync {r['resync_s']:g}`: "
        f"{r['count']:,} MoLDeployments (2 experts each, raw mode, fixed replicas) created in "
        f"{r['created_s']:.1f} s against the Kubernetes API emulator, reconciled by "
        "`mol operator run` (its own process, children read from its watch cache) with the "
        f"real catalog (SQLite, auth on). {r['oks']:.0f} reconciles succeeded, "
        f"{r['retries']:.0f} were retried. Reconcile percentiles come from the operator's "
        "`mol_operator_reconcile_duration_seconds` histogram (interpolated within buckets) "
        "and include the wait for the catalog and the API server under the full load. API "
        "calls count every request of the operator's client and of kopf (lists, watches, "
        "finalizers, status, Events) divided by the reconciles; per reconcile: "
        f"{calls}. CPU is user + system time from the first create until all were "
        "reconciled (the emulator's is its thread's). The resync check waits "
        f"{r['resync_s'] * 1.6:.0f} s and counts the operator's writes.",
        "",
        *table,
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="MoLDeployments (default 1000)")
    parser.add_argument("--resync", type=float, default=40.0,
                        help="--resync-seconds of the operator for the steady-state check")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="give up when not all are reconciled after this many seconds")
    parser.add_argument("--no-write", action="store_true",
                        help="print the section instead of updating docs/benchmarks.md")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    # SIGTERM unwinds like Ctrl-C, so the catalog and operator processes are stopped.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    result = run(args.count, args.resync, args.timeout)
    body = render(result)
    print(body)
    if not args.no_write:
        write_section(ROOT / "docs" / "benchmarks.md", "operator", body)
        log("wrote the operator section of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
