"""The local stack as separate processes, for injecting faults into (bench/faults.py).

Every part is its own process group on loopback, started the way `mol up` starts it:
the catalog (`mol catalog serve` on SQLite and a blob folder), engine replicas (the
vLLM simulator, `python -m mol_testkit.simulator`, one process each so that one can
be killed or stopped alone), router replicas (`mol router serve` on one config file,
reloaded when it changes, which is how endpoints come and go), and, where there are
several routers, an L4 balancer in front (:mod:`_faults_lb`) that health-checks their
``/readyz`` as a Kubernetes Service with readiness gates would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from mol_platform.apps.procs import start_group, stop_process_group
from mol_platform.apps.up.supervisor import catalog_argv, mol_argv
from mol_platform.contract.router_config import RouterConfig
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port

PROFILE = "default.bench"
NAMESPACE = "bench"
ADAPTERS = 4  # bench/a0 .. a3, each with v1 (alias stable) and v2
SCRAPE_S = 1.0  # the router's production default scrape interval
RELOAD_S = 0.25  # how often routers look at their config file


@dataclass
class Proc:
    """One process group: its argv, port, log and health URL."""

    name: str
    argv: list[str]
    port: int
    log: Path
    health: str
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: float = 60.0) -> Proc:
        self.proc = start_group(self.argv, env={**os.environ, **self.env}, log_path=self.log)
        if wait:
            self.wait_healthy(wait)
        return self

    def wait_healthy(self, within: float) -> float:
        """Seconds until its health URL answered 200."""
        started = time.monotonic()
        deadline = started + within
        with httpx.Client(timeout=1.0) as client:
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); "
                                       f"log {self.log}")
                try:
                    if client.get(self.url + self.health).status_code == 200:
                        return time.monotonic() - started
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} not healthy within {within:g} s; "
                                       f"log {self.log}")
                time.sleep(0.05)

    def signal(self, sig: signal.Signals) -> None:
        """``sig`` to the whole group (a pod's container: every process in it)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)

    def terminate(self, within: float = 60.0) -> None:
        """SIGTERM and wait for the exit (the process drains on its own terms)."""
        self.signal(signal.SIGTERM)
        assert self.proc is not None
        self.proc.wait(within)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process_group(self.proc, grace=10.0)
        elif self.proc is not None:  # gone: reap what its group may have left
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)


def engine_proc(work: Path, name: str, *, port: int | None = None, output_tokens: int,
                itl_s: float, ttft_s: float) -> Proc:
    """A simulated vLLM replica that loads any adapter name (as a resolver plugin would)."""
    port = port or free_port()
    argv = [sys.executable, "-m", "mol_testkit.simulator", "--port", str(port),
            "--model", "tiny", "--dynamic-loras", "--no-check-adapter-paths",
            "--max-loras", "8", "--output-tokens", str(output_tokens), "--itl-s", str(itl_s),
            "--ttft-s", str(ttft_s)]
    return Proc(name, argv, port, work / f"{name}.log", "/health")


def router_proc(work: Path, name: str, config: Path, *, port: int | None = None,
                drain_delay: float = 1.0) -> Proc:
    port = port or free_port()
    argv = mol_argv("router", "serve", "--config", str(config), "--host", "127.0.0.1",
                    "--port", str(port))
    env = {"MOL_ROUTER_RELOAD_INTERVAL": str(RELOAD_S),
           "MOL_ROUTER_DRAIN_DELAY": str(drain_delay)}
    return Proc(name, argv, port, work / f"{name}.log", "/healthz", env)


def catalog_proc(work: Path, *, port: int | None = None) -> Proc:
    port = port or free_port()
    data = work / "catalog"
    data.mkdir(parents=True, exist_ok=True)
    return Proc("catalog", catalog_argv("127.0.0.1", port, data, auth=False), port,
                work / "catalog.log", "/healthz", {"MOL_CATALOG_URL": ""})


def seed_catalog(url: str) -> dict[str, str]:
    """A base, a serving profile and ADAPTERS adapters with two versions each (alias
    stable -> v1). Returns {reference: the immutable name it resolves to}."""
    model = SyntheticLlama()
    base = f"{model.name}@{model.revision}"
    resolved = {}
    with httpx.Client(base_url=url, timeout=30) as c:
        c.post("/v1/base-models", json=model.base_body()).raise_for_status()
        c.put(f"/v1/serving-profiles/{PROFILE}",
              json={"base_model": base, "max_lora_rank": 8, "max_loras": 8,
                    "engine": "vllm"}).raise_for_status()
        for i in range(ADAPTERS):
            for version in (1, 2):
                cfg, weights = model.lora_files(8, seed=10 * i + version)
                data = {"base": base, **({"alias": "stable"} if version == 1 else {})}
                r = c.post(f"/v1/adapters/{NAMESPACE}/a{i}/versions", data=data, files={
                    "adapter_config.json": ("adapter_config.json", cfg),
                    "adapter_model.safetensors": ("adapter_model.safetensors", weights)})
                r.raise_for_status()
            resolved[f"{NAMESPACE}/a{i}@stable"] = f"{NAMESPACE}/a{i}@v1"
    return resolved


def write_router_config(path: Path, endpoints: list[str], catalog_url: str | None,
                        **extra: Any) -> None:
    """The routers' config (written whole, then renamed: a reader never sees half)."""
    data: dict[str, Any] = {
        "deployment": "bench", "profile": PROFILE, "base_model": "tiny",
        "experts": [{"name": "chat", "adapter": f"{NAMESPACE}/a0@stable"}],
        "default": "chat", "endpoints": endpoints, "catalog_url": catalog_url,
        "adapter_namespaces": [NAMESPACE], "scrape_interval_seconds": SCRAPE_S,
    }
    data.update(extra)
    cfg = RouterConfig.model_validate(data)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))
    tmp.replace(path)


def router_ready_endpoints(router: str) -> set[str]:
    """The engines a router would send to now (its /status)."""
    with httpx.Client(timeout=2.0) as c:
        engines = c.get(router + "/status").json()["engines"]
    return {e["url"] for e in engines if e["ready"]}


def wait_router_sees(router: str, want: set[str], within: float) -> float:
    """Seconds until the router's ready endpoints are exactly ``want``."""
    started = time.monotonic()
    while True:
        try:
            if router_ready_endpoints(router) == want:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > within:
            raise RuntimeError(f"{router} never saw exactly {sorted(want)}")
        time.sleep(0.02)


def retries(router: str) -> float:
    """mol_router_retries_total summed over reasons (0 when the router is gone)."""
    try:
        text = httpx.get(router + "/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("mol_router_retries_total{"))
