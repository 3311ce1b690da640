"""``model: auto`` routed by the semantic signal for real: ``mol router serve`` with the
demo deployment's example utterances and keywords, the packaged all-MiniLM-L6-v2 on a
real vLLM embedding engine, and simulated LLM engines behind (the experts' answers are
not the point; where each prompt goes is)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from mol_platform.apps.procs import stop_process_group
from mol_platform.contract.router_config import RouterConfig, RouterSemantic
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.engine import Engine
from mol_testkit.net import free_port
from mol_testkit.simulator import SimConfig, SimulatorCluster

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "macaron-local.yaml"
PROMPTS = {
    "coding": "Write a Python function that parses ISO 8601 dates and fix its off-by-one bug.",
    "ui": "Design a signup page for a travel app with a friendly layout.",
    "agent": "Book me a taxi to the train station for 7am tomorrow and text me the receipt.",
    "chat": "What's a fun fact about penguins?",
}


def _config(sims: list[str], embedding: Engine) -> RouterConfig:
    sem = MoLDeployment.from_yaml(EXAMPLE.read_text()).spec.router.semantic
    assert sem is not None
    return RouterConfig(
        deployment="macaron-local", profile="default.macaron-local", base_model="tiny",
        experts=[{"name": n, "adapter": f"demo/{n}@v1"} for n in PROMPTS],
        default="chat", mode="semantic", endpoints=sims,
        semantic=RouterSemantic.model_validate({
            "embeddingsUrl": embedding.base_url, "model": embedding.model,
            "threshold": sem.threshold, "margin": sem.margin,
            # every prompt through the real embedding (keywords first would settle some)
            "keywordsDecide": False,
            "experts": [e.model_dump() for e in sem.experts]}),
        timeouts={"embedding": 10.0})


@pytest.fixture
def router(tmp_path: Path, embedding_engine: Engine) -> Iterator[str]:
    with SimulatorCluster(replicas=1, config=SimConfig(model="tiny", dynamic_loras=True,
                                                       output_tokens=2)) as sims:
        path = tmp_path / "router.yaml"
        path.write_text(yaml.safe_dump(_config(sims.urls, embedding_engine).model_dump(
            mode="json", by_alias=True, exclude_none=True)))
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "mol_platform", "router", "serve",
                                 "--config", str(path), "--host", "127.0.0.1",
                                 "--port", str(port)], start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(timeout=2.0) as c:
                for _ in range(120):
                    try:
                        if c.get(url + "/readyz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    assert proc.poll() is None, "mol router serve exited"
                    time.sleep(0.25)
            yield url
        finally:
            stop_process_group(proc)


def test_auto_sends_each_kind_of_prompt_to_its_expert(router: str) -> None:
    with httpx.Client(timeout=60.0) as client:
        for expert, prompt in PROMPTS.items():
            resp = client.post(router + "/v1/chat/completions", json={
                "model": "auto", "max_tokens": 2,
                "messages": [{"role": "user", "content": prompt}]})
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-mol-expert"] == expert, (prompt, resp.headers["x-mol-route"])
            assert resp.headers["x-mol-route"].startswith("semantic; score=")
        metrics = client.get(router + "/metrics").text
    for expert in PROMPTS:
        assert (f'mol_router_route_decisions_total{{deployment="macaron-local",expert="{expert}",'
                f'mode="semantic",signal="semantic"}} 1.0') in metrics
