"""API keys: 401 without a valid key, 403 for a namespace the key may not use, 429
with Retry-After over the request or token rate; tokens counted per tenant."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from mol_router.replicas.policy.prefix import prefix_keys
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=4)
MSG = [{"role": "user", "content": "hello"}]
ACME = "sk-acme-0123456789abcdef"
OPS = "sk-ops-0123456789abcdef0"


def _keys(path: Path, acme_rpm: int = 1000, acme_tpm: int | None = None) -> str:
    tpm = f"    tokensPerMinute: {acme_tpm}\n" if acme_tpm else ""
    path.write_text(
        "keys:\n"
        f"  - tenant: acme\n    key: {ACME}\n    namespaces: [acme]\n"
        f"    requestsPerMinute: {acme_rpm}\n{tpm}"
        f"  - tenant: ops\n    keySha256: {hashlib.sha256(OPS.encode()).hexdigest()}\n")
    return str(path)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_keys_namespaces_and_request_rate(router_config: Any, start_router: Any,
                                               ready: Any, tmp_path: Path) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, adapter_namespaces=["acme", "beta"],
                            api_keys_file=_keys(tmp_path / "keys.yaml", acme_rpm=3))
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            url = router.url + "/v1/chat/completions"
            async with http.post(url, json={"messages": MSG}) as resp:
                assert resp.status == 401
                assert "Authorization: Bearer" in (await resp.json())["error"]["message"]
            async with http.post(url, json={"messages": MSG}, headers=_auth("sk-wrong")) as r:
                assert r.status == 401
                assert (await r.json())["error"]["type"] == "authentication_error"
            async with http.post(url, json={"messages": MSG, "model": "beta/x@v1"},
                                 headers=_auth(ACME)) as resp:
                assert resp.status == 403
                assert "'beta'" in (await resp.json())["error"]["message"]
            async with http.post(url, json={"messages": MSG, "model": "acme/x@v1"},
                                 headers=_auth(ACME)) as resp:
                assert resp.status == 200
            async with http.post(url, json={"messages": MSG}, headers=_auth(ACME)) as resp:
                assert resp.status == 200
            async with http.post(url, json={"messages": MSG}, headers=_auth(ACME)) as resp:
                assert resp.status == 429
                assert int(resp.headers["Retry-After"]) >= 1
                assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"
            async with http.get(router.url + "/v1/models") as resp:
                assert resp.status == 401
            async with http.get(router.url + "/v1/models", headers=_auth(ACME)) as resp:
                ids = [m["id"] for m in (await resp.json())["data"]]
            assert "acme/<name>@<ref>" in ids
            assert "beta/<name>@<ref>" not in ids
            # Another tenant is not affected; a key given as its digest works.
            async with http.post(url, json={"messages": MSG, "model": "beta/x@v1"},
                                 headers=_auth(OPS)) as resp:
                assert resp.status == 200
            metrics = await (await http.get(router.url + "/metrics")).text()
    assert 'tenant="acme"' in metrics
    assert 'tenant="ops"' in metrics
    assert 'mol_router_rejections_total{deployment="demo",reason="rate_limited"} 1.0' in metrics


async def test_token_rate_limit(router_config: Any, start_router: Any, ready: Any,
                                tmp_path: Path) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls,
                            api_keys_file=_keys(tmp_path / "keys.yaml", acme_tpm=5))
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            url = router.url + "/v1/chat/completions"
            async with http.post(url, json={"messages": MSG}, headers=_auth(ACME)) as resp:
                assert resp.status == 200  # spends more than 5 tokens
            async with http.post(url, json={"messages": MSG, "stream": True},
                                 headers=_auth(ACME)) as resp:
                assert resp.status == 429
                assert int(resp.headers["Retry-After"]) >= 1


def _rewrite(path: Path, text: str) -> None:
    path.write_text(text)


async def test_keys_file_changes_are_picked_up(router_config: Any, start_router: Any,
                                               ready: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    _keys(keys)
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, api_keys_file=str(keys))
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            url = router.url + "/v1/chat/completions"
            new_key = "sk-new-0123456789abcdef0"
            async with http.post(url, json={"messages": MSG}, headers=_auth(new_key)) as r:
                assert r.status == 401
            _rewrite(keys, f"keys:\n  - tenant: newcomer\n    key: {new_key}\n")
            for _ in range(100):  # the reload interval is 0.1 s in tests
                async with http.post(url, json={"messages": MSG},
                                     headers=_auth(new_key)) as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.05)
            assert r.status == 200
            async with http.post(url, json={"messages": MSG}, headers=_auth(ACME)) as r:
                assert r.status == 401  # revoked with the file


def test_key_lookup_remembers_only_valid_headers_and_forgets_on_reload() -> None:
    from mol_platform.contract.router_config import ApiKeysFile
    from mol_router import tenants

    both = ApiKeysFile.model_validate({"keys": [{"tenant": "acme", "key": ACME},
                                                {"tenant": "ops", "key": OPS}]})
    table = tenants.KeyTable(both)
    first = table.lookup(f"Bearer {ACME}")
    assert first is not None
    assert first.name == "acme"
    assert table.lookup(f"Bearer {ACME}") is first  # the remembered answer
    assert table.lookup(f"bearer  {ACME} ") is first  # same key, other spelling
    assert table.lookup("Bearer sk-wrong-0123456789abcdef") is None
    assert table.lookup("Bearer sk-wrong-0123456789abcdef") is None
    assert table.lookup(ACME) is None  # no scheme
    assert len(table._seen) == 2  # only the valid headers were remembered
    ops_only = tenants.KeyTable(ApiKeysFile.model_validate(
        {"keys": [{"tenant": "ops", "key": OPS}]}), previous=table)
    assert ops_only.lookup(f"Bearer {ACME}") is None  # a removed key stops working
    assert ops_only.lookup(f"Bearer {OPS}") is table.lookup(f"Bearer {OPS}")  # buckets kept


async def test_cache_isolation_salts_each_tenant(router_config: Any, start_router: Any,
                                                ready: Any, tmp_path: Path) -> None:
    """``cacheIsolation: tenant``: the router sets vLLM's cache_salt per tenant (the
    client's own salt never wins), the same for a tenant's every request, different
    between tenants; shared (the default) leaves the body alone."""
    keys = _keys(tmp_path / "keys.yaml")
    long_prompt = [{"role": "system", "content": "house rules " * 100}, *MSG]
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        for isolation in ("tenant", "shared"):
            cfg = router_config(sims.urls, adapter_namespaces=["acme", "beta"],
                                api_keys_file=keys, cache_isolation=isolation)
            async with start_router(cfg) as router, aiohttp.ClientSession() as http:
                await ready(router)
                url = router.url + "/v1/chat/completions"
                for key, salt in ((ACME, None), (ACME, "mine"), (OPS, None)):
                    body: dict[str, Any] = {"messages": long_prompt}
                    if salt is not None:
                        body["cache_salt"] = salt
                    async with http.post(url, json=body, headers=_auth(key)) as resp:
                        assert resp.status == 200, await resp.text()
                index = router.runtime.tracker.prefix
                entries = len(index)
            got = [r.body.get("cache_salt") for r in sims.state(0).received[-3:]]
            if isolation == "tenant":
                assert got[0] == got[1] is not None  # acme twice, its own salt overridden
                assert got[2] is not None
                assert got[2] != got[0]
                assert isinstance(got[0], str)
                assert len(got[0]) == 32
                # two tenants, two key chains: nothing shared between them in the index
                assert entries == 2 * len(prefix_keys(orjson.dumps(long_prompt), "x"))
            else:
                assert got == [None, "mine", None]
