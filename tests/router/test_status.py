"""GET /status: the deployment as it runs (the console's stack page reads it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, max_loras=4, output_tokens=4)
KEY = "sk-status-test-0123456789"


async def test_status_lists_experts_canaries_and_engines_with_their_adapters(
        router_config: Any, start_router: Any, ready: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - tenant: ops\n    key: {KEY}\n")
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        cfg = router_config(sims.urls, api_keys_file=str(keys), experts=[
            {"name": "chat", "adapter": "demo/chat@v1", "description": "small talk"},
            {"name": "coding", "adapter": "demo/coding@v1",
             "canary": {"adapter": "demo/coding@v2", "weight": 25}}])
        auth = {"Authorization": f"Bearer {KEY}"}
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            async with http.get(router.url + "/status") as resp:
                assert resp.status == 401  # keys on: a key is needed, as for /v1/models
            async with http.post(router.url + "/v1/chat/completions", headers=auth, json={
                    "model": "chat", "messages": [{"role": "user", "content": "hi"}]}) as resp:
                assert resp.status == 200, await resp.text()
            async with http.get(router.url + "/status", headers=auth) as resp:
                assert resp.status == 200
                body = await resp.json()
    assert body["deployment"] == "demo"
    assert body["default"] == "chat"
    experts = {e["name"]: e for e in body["experts"]}
    assert experts["chat"]["stable"]["ref"] == "demo/chat@v1"
    assert experts["chat"]["canary"] is None
    # no catalog in this config: references go to engines as written, nothing is resolved
    # (tests/console resolves through a real catalog)
    assert experts["coding"]["canary"] == {"ref": "demo/coding@v2", "resolved": None,
                                           "compatible": None, "weight": 25.0}
    assert sorted(g["url"] for g in body["engines"]) == sorted(u.rstrip("/") for u in sims.urls)
    assert all(g["ready"] for g in body["engines"])
    assert any("demo/chat@v1" in g["adapters"] for g in body["engines"])
