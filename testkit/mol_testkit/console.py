"""The console's test stack and browser: a real catalog (auth on, seeded), simulated
engines and a real router in front of them, and headless Debian chromium driven by
Playwright. The browser tests and ``scripts/console_screenshots.py`` share them.

Playwright never downloads a browser here: it drives ``/usr/bin/chromium``
(``scripts/system-deps.sh`` installs it).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from playwright.sync_api import Browser, Page, sync_playwright

from mol_platform.apps.procs import start_group, stop_process_group
from mol_platform.apps.up.supervisor import Service, mol_argv, wait_healthy
from mol_platform.contract.router_config import RouterConfig
from mol_testkit.catalog import LiveCatalog
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ADMIN_TOKEN = "mol_console-test-admin-token"
PROFILE = "demo.default"
MAX_RANK = 16
REPO = Path(__file__).resolve().parents[2]
AXE = REPO / "catalog/mol_catalog/console/static/vendor/axe-core/axe.min.js"


@dataclass
class ConsoleStack:
    catalog: LiveCatalog
    router_url: str
    model: SyntheticLlama
    engine_url: str = ""  # the simulated engine (``POST /sim/script`` scripts its answers)

    @property
    def url(self) -> str:
        return self.catalog.url

    def api(self) -> httpx.Client:
        """The catalog's REST API as the admin."""
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"authorization": f"Bearer {ADMIN_TOKEN}"})

    def token(self, name: str, scopes: list[str]) -> str:
        with self.api() as api:
            r = api.post("/v1/tokens", json={"name": name, "scopes": scopes})
            r.raise_for_status()
            return str(r.json()["token"])

    def peft_folder(self, path: Path, *, rank: int = 8, seed: int = 0) -> Path:
        """A PEFT folder (adapter_config.json, adapter_model.safetensors) for the base."""
        cfg, weights = self.model.lora_files(rank, seed=seed)
        path.mkdir(parents=True, exist_ok=True)
        (path / "adapter_config.json").write_bytes(cfg)
        (path / "adapter_model.safetensors").write_bytes(weights)
        return path


def _publish(api: httpx.Client, model: SyntheticLlama, adapter: str, *, seed: int,
             data: dict[str, str]) -> None:
    cfg, weights = model.lora_files(8, seed=seed)
    files = {"adapter_config.json": ("adapter_config.json", cfg, "application/json"),
             "adapter_model.safetensors": ("adapter_model.safetensors", weights,
                                           "application/octet-stream")}
    r = api.post(f"/v1/adapters/{adapter}/versions", files=files, data=data)
    assert r.status_code in (200, 201), r.text


def seed(stack: ConsoleStack, extra_adapters: int) -> None:
    """The base, its profile, the deployment's experts (demo/chat, demo/coding with a
    second version as canary), another tenant's adapter and ``extra_adapters`` more in
    namespace ``lab`` (enough for a second page of the search)."""
    model = stack.model
    with stack.api() as api:
        api.post("/v1/base-models", json=model.base_body()).raise_for_status()
        api.put(f"/v1/serving-profiles/{PROFILE}", json={
            "base_model": f"{model.name}@{model.revision}", "engine": "vllm==0.32.0",
            "max_lora_rank": MAX_RANK, "max_loras": 4}).raise_for_status()
        _publish(api, model, "demo/chat", seed=1,
                 data={"alias": "stable", "tags": "chat,small-talk"})
        _publish(api, model, "demo/coding", seed=2,
                 data={"alias": "stable", "tags": "code", "source": "s3://runs/coding-1"})
        _publish(api, model, "demo/coding", seed=3, data={"parent": "1", "tags": "code"})
        _publish(api, model, "acme/support", seed=4, data={"alias": "stable",
                                                           "tags": "support"})
        for i in range(extra_adapters):
            _publish(api, model, f"lab/exp-{i:02d}", seed=10 + i, data={"tags": "lab"})


def _router_config(path: Path, stack_catalog: str, engine: str) -> None:
    cfg = RouterConfig.model_validate({
        "deployment": "demo", "profile": PROFILE, "base_model": "tiny",
        "experts": [
            {"name": "chat", "adapter": "demo/chat@stable", "description": "small talk"},
            {"name": "coding", "adapter": "demo/coding@stable", "description": "writes code",
             "canary": {"adapter": "demo/coding@v2", "weight": 20}},
        ],
        "default": "chat", "endpoints": [engine], "catalog_url": stack_catalog,
        "handoff_enabled": True,
        "adapter_namespaces": ["acme"], "scrape_interval_seconds": 0.5,
    })
    path.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json",
                                                  exclude_none=True)))


@contextlib.contextmanager
def simulator(log: Path) -> Iterator[str]:
    """One simulated engine (streams with a visible pace); yields its URL."""
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mol_testkit.simulator", "--model", "tiny",
             "--dynamic-loras", "--ttft-s", "0.05", "--itl-s", "0.02", "--output-tokens", "24"],
            stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    assert proc.stdout is not None
    try:
        url = proc.stdout.readline().decode().strip()
        assert url.startswith("http"), f"simulator printed {url!r}; see {log}"
        yield url
    finally:
        stop_process_group(proc)
        proc.stdout.close()


@contextlib.contextmanager
def console_stack(work: Path, *, extra_adapters: int = 27) -> Iterator[ConsoleStack]:
    """The whole stack, seeded; everything stops when the block ends."""
    work.mkdir(parents=True, exist_ok=True)
    router_port = free_port()
    router_url = f"http://127.0.0.1:{router_port}"
    catalog = LiveCatalog(work / "catalog", admin_token=ADMIN_TOKEN,
                          env={"MOL_CATALOG_ROUTER_URL": router_url})
    stack = ConsoleStack(catalog, router_url, SyntheticLlama())
    router: subprocess.Popen[bytes] | None = None
    with simulator(work / "simulator.log") as engine:
        stack.engine_url = engine
        try:
            catalog.start()
            seed(stack, extra_adapters)
            config = work / "router.yaml"
            _router_config(config, catalog.url, engine)
            argv = mol_argv("router", "serve", "--config", str(config), "--host", "127.0.0.1",
                            "--port", str(router_port))
            svc = Service("router", argv, f"{router_url}/readyz",
                          env={"MOL_CATALOG_TOKEN": ADMIN_TOKEN}, log_path=work / "router.log")
            svc.proc = router = start_group(argv, env={**os.environ, **svc.env},
                                            log_path=svc.log_path)
            wait_healthy(svc, timeout=60)
            yield stack
        finally:
            if router is not None:
                stop_process_group(router)
            catalog.stop()


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Debian chromium under Playwright (one per test session)."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                     headless=True)
        try:
            yield browser
        finally:
            browser.close()


def login(page: Page, base: str, token: str) -> None:
    page.goto(f"{base}/ui/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/ui/adapters")


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now."""
    if not AXE.is_file():
        raise FileNotFoundError(f"{AXE} is missing: `make assets` fetches axe-core from npm")
    page.add_script_tag(path=str(AXE))
    result: dict[str, Any] = page.evaluate("async () => await axe.run(document)")
    return [v for v in result["violations"] if v.get("impact") in ("serious", "critical")]
