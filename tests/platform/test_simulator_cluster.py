"""Many replicas: the sync cluster (background loop), the async one, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import pytest

from mol_testkit.simulator import (
    AsyncSimulatorCluster,
    SimConfig,
    SimulatorCluster,
    cli,
    reply_text,
)


def post_json(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def get_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as resp:
        status: int = resp.status
        return status


def test_sync_cluster_runs_independent_replicas():
    config = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
    with SimulatorCluster(replicas=3, config=config) as sims:
        assert len(sims) == 3
        assert len(set(sims.urls)) == 3
        assert all(u.startswith("http://127.0.0.1:") for u in sims.urls)
        for url in sims.urls:
            assert get_status(url + "/health") == 200
        for model in ["ns/a@v1", "ns/a@v1", "ns/b@v2"]:
            status, body = post_json(
                sims.urls[1] + "/v1/completions", {"model": model, "prompt": "p"}
            )
            assert status == 200
            assert body["choices"][0]["text"] == reply_text(model, "p", 3)
        states = sims.states()
        assert states[1].requests_by_model == {"ns/a@v1": 2, "ns/b@v2": 1}
        assert states[0].requests_by_model == {}
        assert sims.state(1).registered.keys() == {"ns/a@v1", "ns/b@v2"}

        sims.script_failure("ns/a@v1", status=503, replica=2)
        status, body = post_json(
            sims.urls[2] + "/v1/completions", {"model": "ns/a@v1", "prompt": "p"}
        )
        assert (status, body["error"]["code"]) == (503, 503)
        status, _ = post_json(sims.urls[0] + "/v1/completions", {"model": "ns/a@v1", "prompt": "p"})
        assert status == 200


def test_sync_cluster_replica_can_stop_and_come_back():
    with SimulatorCluster(replicas=2) as sims:
        url = sims.urls[0]
        sims.stop_replica(0)
        with pytest.raises(urllib.error.URLError):
            get_status(url + "/health")
        assert get_status(sims.urls[1] + "/health") == 200
        sims.start_replica(0)
        assert sims.urls[0] == url
        assert get_status(url + "/health") == 200


def test_cluster_arguments_are_checked():
    with pytest.raises(ValueError, match="either config"):
        SimulatorCluster(config=SimConfig(), configs=[SimConfig()])
    with pytest.raises(ValueError, match="replicas=2 but 1 configs"):
        SimulatorCluster(replicas=2, configs=[SimConfig()])
    with pytest.raises(ValueError, match="at least one replica"):
        SimulatorCluster(replicas=0)
    with pytest.raises(RuntimeError, match="not running"):
        SimulatorCluster().state(0)


async def test_async_cluster_with_one_config_per_replica():
    configs = [SimConfig(model="tiny", max_loras=1), SimConfig(model="tiny", max_loras=2)]
    async with AsyncSimulatorCluster(configs=configs) as sims, aiohttp.ClientSession() as http:
        for index, url in enumerate(sims.urls):
            async with http.get(url + "/metrics") as resp:
                assert resp.status == 200
            async with http.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 200
            async with http.get(url + "/metrics") as resp:
                assert f'max_lora="{index + 1}"' in await resp.text()
            assert sims[index].config.max_loras == index + 1


def test_cli_prints_urls_and_serves():
    proc = subprocess.Popen(
        [sys.executable, "-m", "mol_testkit.simulator", "--replicas", "2",
         "--port", "0", "--dynamic-loras", "--max-loras", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(2)]
        assert all(u.startswith("http://127.0.0.1:") for u in urls), urls
        assert proc.stdout.readline() == "\n"
        status, body = post_json(
            urls[1] + "/v1/chat/completions",
            {"model": "ns/x@v1", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert (status, body["model"]) == (200, "ns/x@v1")
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr


def test_cli_rejects_bad_settings(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--max-loras", "0"])
    assert exit_info.value.code == 2
    assert "max_loras must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--lora-modules", "=/path"])
    assert "expected NAME or NAME=PATH" in capsys.readouterr().err
