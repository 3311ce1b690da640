"""Acceptance: the engine plugin counts adapter loads where the real vLLM engine makes
them, and the simulator counts the same loads for the same requests.

A real engine of its own (the plugin loaded with ``MOL_COUNT_ADAPTER_LOADS``, no
catalog; one GPU slot, two adapters in host memory, three adapters) and a simulator
configured alike get the same requests, one at a time. After a warm-up that leaves
both in the same state (the last two adapters asked for in host memory, the last in
the slot), each request must add to ``mol_engine_adapter_loads_total`` exactly what
vLLM's LRU caches imply, on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mol_platform.apps.demo import DemoResult
from mol_testkit.engine import Engine, running_engine
from mol_testkit.simulator import SimConfig, SimulatorCluster

pytestmark = pytest.mark.e2e

ADAPTERS = ("chat", "coding", "agent")
MAX_CPU_LORAS = 2


@pytest.fixture(scope="module")
def counting_engine(engine_venv: Path, demo_assets: DemoResult) -> Iterator[Engine]:
    with running_engine(
        engine_venv, demo_assets.base,
        lora_modules={n: demo_assets.adapters[n] for n in ADAPTERS},
        served_model_name="demo-base", max_loras=1, max_lora_rank=16,
        extra_args=["--max-cpu-loras", str(MAX_CPU_LORAS)], plugins=("mol_resolver",),
        env={"MOL_COUNT_ADAPTER_LOADS": "true", "OMP_NUM_THREADS": "1",
             "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
    ) as eng:  # fmt: skip
        yield eng


@pytest.fixture(scope="module")
def simulator(demo_assets: DemoResult) -> Iterator[str]:
    config = SimConfig(model="demo-base", model_path=str(demo_assets.base),
                       lora_modules={n: str(demo_assets.adapters[n]) for n in ADAPTERS},
                       max_loras=1, max_cpu_loras=MAX_CPU_LORAS, itl_s=0.002)  # fmt: skip
    with SimulatorCluster(config=config) as cluster:
        yield cluster.urls[0]


def loads(client: httpx.Client) -> dict[str, float]:
    text = client.get("/metrics").text
    return {s.labels["tier"]: s.value
            for f in text_string_to_metric_families(text)
            if f.name == "mol_engine_adapter_loads"
            for s in f.samples if s.name.endswith("_total")}  # fmt: skip


def deltas(url: str, sequence: list[str]) -> list[tuple[float, float]]:
    """(gpu, cpu) loads each request of ``sequence`` (adapter names) adds."""
    out = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for name in ADAPTERS:  # warm-up: the same state on both sides
            r = client.post("/v1/completions", json={"model": name, "prompt": "hi",
                                                     "max_tokens": 1})  # fmt: skip
            assert r.status_code == 200, r.text
        for name in sequence:
            before = loads(client)
            r = client.post("/v1/completions", json={"model": name, "prompt": "hello",
                                                     "max_tokens": 1})  # fmt: skip
            assert r.status_code == 200, r.text
            after = loads(client)
            out.append((after["gpu"] - before["gpu"], after["cpu"] - before["cpu"]))
    return out


def test_the_engine_counts_loads_as_vllms_caches_make_them(
        counting_engine: Engine, simulator: str) -> None:  # fmt: skip
    chat, coding, agent = ADAPTERS
    # After the warm-up: host memory {coding, agent}, the slot holds agent.
    sequence = [agent, coding, chat, agent, agent]
    real = deltas(counting_engine.base_url, sequence)
    assert real == [
        (0, 0),  # in its slot already
        (1, 0),  # into the slot from host memory
        (1, 1),  # read from disk (evicting agent from host memory), into the slot
        (1, 1),  # agent again: from disk
        (0, 0),
    ], real
    assert deltas(simulator, sequence) == real
