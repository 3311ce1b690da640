"""Conformance: the simulator's KV-cache events are the ones a real vLLM 0.32 publishes.

The routing benchmark feeds llm-d's precise prefix scorer the simulator's KV events
(``mol_testkit.simulator.kvevents``), so they must be what a real engine says. A real
CPU engine (demo base, ``chat`` and ``coding``, ``--kv-events-config`` over ZMQ, 16 KV
blocks so that a few prompts evict) and the simulator's engine model configured alike
get the same token-id prompts: a prompt on an adapter, the same again (a hit: nothing
new is stored), on another adapter, under a ``cache_salt``, on the base model, then
prompts enough to evict. The event streams must match field for field: kinds, order,
tokens, block sizes, adapter names, extra keys, and the hash chain's shape. Hash
values differ (vLLM hashes with a per-install seed), so each side's hashes and adapter
ids are compared by first appearance: equal on one side exactly where equal on the other.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from mol_platform.apps.demo import DemoResult
from mol_testkit.engine import running_engine
from mol_testkit.net import free_port
from mol_testkit.simulator import SimConfig
from mol_testkit.simulator.model import SlotEngine

pytestmark = pytest.mark.e2e

LISTENER = Path(__file__).with_name("kv_events_listener.py")
BLOCKS = 16  # --num-gpu-blocks-override: 15 usable (block 0 is the null block)
BLOCK_SIZE = 128  # the CPU build's
PROMPT = list(range(100, 100 + 2 * BLOCK_SIZE + 20))  # 2 full blocks and a partial one
# (adapter, cache_salt, prompt token ids); the demo vocabulary has 2,048 ids.
SEQUENCE: list[tuple[str | None, str | None, list[int]]] = [
    ("chat", None, PROMPT), ("chat", None, PROMPT), ("coding", None, PROMPT),
    ("chat", "tenant-1", PROMPT), (None, None, PROMPT),
    *((None, None, list(range(250 * k, 250 * k + 260))) for k in range(2, 8)),
]  # fmt: skip


class Lines:
    """A process's stdout lines, read by a thread as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line.strip())

    def join(self) -> None:
        self._thread.join(10)

    def wait_for(self, predicate: Any, within: float) -> None:
        deadline = time.monotonic() + within
        while not predicate(self.lines):
            assert time.monotonic() < deadline, self.lines[-5:]
            time.sleep(0.05)


def decoded(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(s) for s in lines if s.startswith("{")]


@pytest.fixture(scope="module")
def real_events(engine_venv: Path, demo_assets: DemoResult) -> list[dict[str, Any]]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    listener = subprocess.Popen(
        [str(engine_venv / "bin" / "python"), str(LISTENER), endpoint, "kv"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = Lines(listener)
    try:
        lines.wait_for(lambda seen: "ready" in seen, 60)
        config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint,
                  "topic": "kv"}  # fmt: skip
        with running_engine(
            engine_venv, demo_assets.base,
            lora_modules={n: demo_assets.adapters[n] for n in ("chat", "coding")},
            served_model_name="demo-base", max_loras=2, max_lora_rank=16,
            extra_args=["--kv-events-config", json.dumps(config),
                        "--num-gpu-blocks-override", str(BLOCKS)],
            env={"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
        ) as eng, httpx.Client(base_url=eng.base_url, timeout=120) as http:  # fmt: skip
            for adapter, salt, ids in SEQUENCE:
                body: dict[str, Any] = {"model": adapter or "demo-base", "prompt": ids,
                                        "max_tokens": 1}  # fmt: skip
                if salt is not None:
                    body["cache_salt"] = salt
                r = http.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text
            # Published from a thread after each step: wait until the last prompt's
            # blocks are told.
            last = SEQUENCE[-1][2][0]
            lines.wait_for(lambda seen: any(e.get("token_ids", [None])[0] == last
                                            for e in decoded(seen)), 30)  # fmt: skip
        events = decoded(lines.lines)
    finally:
        listener.terminate()
        listener.wait(10)
        lines.join()  # EOF once the listener is gone
        assert listener.stdout is not None
        listener.stdout.close()
    return events


async def sim_events(demo_assets: DemoResult) -> list[dict[str, Any]]:
    engine = SlotEngine(SimConfig(
        model="demo-base", model_path=str(demo_assets.base),
        lora_modules={n: str(demo_assets.adapters[n]) for n in ("chat", "coding")},
        max_loras=2, block_size=BLOCK_SIZE, kv_cache_blocks=BLOCKS,
    ))  # fmt: skip
    engine.enable_kv_events()
    for adapter, salt, ids in SEQUENCE:
        request = engine.submit("demo-base", engine.resolve_model(adapter), token_ids=ids,
                                cache_salt=salt)  # fmt: skip
        engine.token(request)
        engine.finish(request, "stop")
    batch = engine.publish_kv_events(0.0)
    assert batch is not None
    return [{"kind": type(e).__name__, **json.loads(json.dumps(asdict(e)))} for e in batch.events]


def canonical(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hashes and adapter ids replaced by their order of first appearance."""
    labels: dict[tuple[str, Any], int] = {}

    def label(kind: str, value: Any) -> Any:
        return None if value is None else labels.setdefault((kind, value), len(labels))

    out = []
    for e in events:
        e = dict(e)
        e["block_hashes"] = [label("hash", h) for h in e["block_hashes"]]
        if "parent_block_hash" in e:
            e["parent_block_hash"] = label("hash", e["parent_block_hash"])
        if "lora_id" in e:
            e["lora_id"] = label("lora", e["lora_id"])
        out.append(e)
    return out


async def test_kv_events_match_the_real_engines(
    real_events: list[dict[str, Any]], demo_assets: DemoResult
) -> None:
    kinds = [e["kind"] for e in real_events]
    assert kinds.count("BlockStored") == len(SEQUENCE) - 1, kinds  # the repeat hits
    assert "BlockRemoved" in kinds, kinds  # 16 blocks: the last prompts evict
    simulated = await sim_events(demo_assets)
    assert canonical(simulated) == canonical(real_events)
