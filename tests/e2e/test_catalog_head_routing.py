"""A trained head from training to serving on real parts: ``mol router train`` embeds
labelled prompts on the real vLLM embedding engine (all-MiniLM-L6-v2), ``mol catalog
head publish`` puts the head in a real catalog under ``@stable``, and ``mol router
serve`` with ``semantic.head`` resolves it there and routes prompts it never saw
(simulated LLM engines behind: where each prompt goes is the point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from mol_platform.apps.procs import stop_process_group
from mol_testkit.engine import Engine
from mol_testkit.net import free_port
from mol_testkit.simulator import SimConfig, SimulatorCluster
from tests.router.test_usage import PROFILE, Catalog
from tests.router.test_usage import catalog as catalog  # the real catalog's fixture

TRAIN = Path(__file__).resolve().parents[2] / "bench" / "auto_routing_prompts.jsonl"
EXPERTS = {"chat": "demo/chat@v1", "coding": "demo/coding@v1", "ui": "demo/chat@v1",
           "agent": "demo/coding@v1"}
UNSEEN = {  # not in the training file (checked below)
    "coding": "My Rust borrow checker complains about a mutable reference in this loop.",
    "ui": "Sketch a dashboard layout with a sidebar, cards and a dark theme.",
    "agent": "Reserve a table for four at an Italian place near me on Friday at 8.",
    "chat": "What do you think makes a good friendship last?",
}


def _mol(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mol_platform", *args], text=True,
                          capture_output=True, timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture
def router_file(tmp_path: Path, catalog: Catalog, embedding_engine: Engine) -> Path:
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump({
        "deployment": "demo", "profile": PROFILE, "baseModel": "tiny",
        "catalogUrl": catalog.url, "catalogTokenFile": str(catalog.token_file),
        "mode": "semantic", "default": "chat", "endpoints": ["http://127.0.0.1:9"],
        "experts": [{"name": n, "adapter": a} for n, a in EXPERTS.items()],
        "semantic": {"embeddingsUrl": embedding_engine.base_url,
                     "model": embedding_engine.model, "head": "demo/router@stable"}}))
    return path


def test_a_head_trained_published_and_served_routes_prompts_it_never_saw(
        tmp_path: Path, catalog: Catalog, router_file: Path) -> None:
    rows = [json.loads(line) for line in TRAIN.read_text().splitlines() if line.strip()]
    assert not {r.get("text", r.get("prompt")) for r in rows} & set(UNSEEN.values())
    # 30 prompts an expert (the benchmark's set, in order) and 3 folds: enough to route
    # clear prompts, and trained in seconds on the CPU engine
    kept: dict[str, int] = {}
    subset = tmp_path / "labelled.jsonl"
    with subset.open("w") as out:
        for r in rows:
            if kept.setdefault(r["expert"], 0) < 30:
                kept[r["expert"]] += 1
                out.write(json.dumps(r) + "\n")
    trained = _mol("router", "train", "--prompts", str(subset), "--config", str(router_file),
                   "--folds", "3", "-o", str(tmp_path / "head.json"), "--format", "json")
    assert trained.returncode == 0, trained.stderr
    head = json.loads((tmp_path / "head.json").read_text())
    assert head["training"]["dataDigest"].startswith("sha256:")
    with catalog.admin() as admin:
        token = admin.post("/v1/tokens", json={"name": "ci", "scopes": ["publish:demo"]}
                           ).json()["token"]
    published = _mol("catalog", "head", "publish", str(tmp_path / "head.json"),
                     "demo/router", "--alias", "stable", "-o", "json",
                     env={"MOL_CATALOG_URL": catalog.url, "MOL_CATALOG_TOKEN": token})
    assert published.returncode == 0, published.stderr
    version = json.loads(published.stdout)["version"]
    assert version["data_digest"] == head["training"]["dataDigest"]
    with SimulatorCluster(replicas=1, config=SimConfig(model="tiny", dynamic_loras=True,
                                                       output_tokens=2)) as sims:
        cfg = yaml.safe_load(router_file.read_text())
        router_file.write_text(yaml.safe_dump({**cfg, "endpoints": sims.urls}))
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "mol_platform", "router", "serve",
                                 "--config", str(router_file), "--host", "127.0.0.1",
                                 "--port", str(port)], start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, timeout=30.0) as c:
                for _ in range(240):
                    try:
                        if c.get("/readyz").status_code == 200:
                            heads = c.get("/status").json()["heads"]
                            if heads.get("stable", {}).get("head"):
                                break
                    except httpx.HTTPError:
                        pass
                    assert proc.poll() is None, "mol router serve exited"
                    time.sleep(0.25)
                assert heads["stable"]["digest"] == version["digest"], heads
                for expert, prompt in UNSEEN.items():
                    r = c.post("/v1/chat/completions", json={
                        "model": "auto", "messages": [{"role": "user", "content": prompt}]})
                    assert r.status_code == 200, r.text
                    assert r.headers["x-mol-expert"] == expert, (prompt,
                                                                 r.headers["x-mol-route"])
        finally:
            stop_process_group(proc)
