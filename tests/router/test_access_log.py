"""The router's access log (one JSON line per request on ``mol.router.access``) and
the HTTP libraries' INFO lines kept out of the log unless the level is DEBUG."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from typing import Any

import httpx
import pytest

from mol_testkit.otlp import OtlpReceiver
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=4)
MSG = {"messages": [{"role": "user", "content": "hi"}]}


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records
            if r.name == "mol.router.access"]


async def test_one_line_per_request_with_what_served_it(
        caplog: pytest.LogCaptureFixture, router_config: Any, start_router: Any,
        ready: Any) -> None:
    caplog.set_level(logging.INFO, logger="mol.router.access")
    async with OtlpReceiver() as rx, AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(router_config(sims.urls), tracing_endpoint=rx.url,
                         tracing_sample_ratio=1.0) as router, \
            httpx.AsyncClient(timeout=10) as http:
        await ready(router)
        whole = await http.post(router.url + "/v1/chat/completions",
                                json={**MSG, "model": "coding"},
                                headers={"x-request-id": "req-1"})
        streamed = await http.post(router.url + "/v1/chat/completions",
                                   json={**MSG, "stream": True})
        bad = await http.post(router.url + "/v1/chat/completions", content=b"{")
    assert (whole.status_code, streamed.status_code, bad.status_code) == (200, 200, 400)
    lines = _lines(caplog)
    assert len(lines) == 3
    first, second, third = lines
    assert first["request_id"] == "req-1"
    assert (first["status"], first["expert"], first["version"]) == (200, "coding", 1)
    assert first["adapter"] == "demo/coding"
    assert first["replica"] == sims.urls[0]
    assert first["ttft_s"] is None  # not streamed
    assert first["duration_s"] > 0
    assert first["completion_tokens"] == 4
    roots = {s.attributes["mol.request_id"]: s for s in rx.named("chat coding")}
    assert first["trace_id"] == roots["req-1"].trace_id
    assert (second["status"], second["expert"], second["route"]) == (200, "chat", "default")
    assert 0 < second["ttft_s"] <= second["duration_s"]
    assert len(second["trace_id"]) == 32
    assert third["status"] == 400
    assert third["expert"] is None
    assert third["path"] == "/v1/chat/completions"


async def test_no_trace_id_when_not_traced_and_off_by_setting(
        caplog: pytest.LogCaptureFixture, router_config: Any, start_router: Any,
        ready: Any) -> None:
    caplog.set_level(logging.INFO, logger="mol.router.access")
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        async with start_router(router_config(sims.urls)) as router, \
                httpx.AsyncClient(timeout=10) as http:
            await ready(router)
            r = await http.post(router.url + "/v1/chat/completions", json=MSG)
            assert r.status_code == 200
        (line,) = _lines(caplog)
        assert "trace_id" not in line
        assert line["status"] == 200
        logger = logging.getLogger("mol.router.access")
        logger.disabled = True  # what MOL_ROUTER_ACCESS_LOG=false sets (logs.configure)
        try:
            async with start_router(router_config(sims.urls)) as router, \
                    httpx.AsyncClient(timeout=10) as http:
                await ready(router)
                r = await http.post(router.url + "/v1/chat/completions", json=MSG)
                assert r.status_code == 200
        finally:
            logger.disabled = False
    assert len(_lines(caplog)) == 1


_PROGRAM = textwrap.dedent("""
    import http.server, logging, sys, threading
    import httpx
    from mol_router.telemetry.logs import configure
    from mol_router.settings import RouterSettings

    settings = RouterSettings()
    configure(settings.log_level, settings.access_log)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    httpx.get(f"http://127.0.0.1:{server.server_port}/")
    logging.getLogger("mol.router").info("router line")
    logging.getLogger("mol.router.access").info("access line")
    server.shutdown()
""")


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_http_library_lines_only_at_debug(level: str, tmp_path: Any) -> None:
    """``serve``'s logging setup, in a process of its own: httpx's per-call INFO line
    (the catalog event feed's long poll makes one every few seconds) shows only at
    DEBUG; the access log is off unless ``MOL_ROUTER_ACCESS_LOG=true``."""
    env = {"MOL_ROUTER_LOG_LEVEL": level, "PATH": "", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _PROGRAM],
                         env={**env, "MOL_ROUTER_ACCESS_LOG": "true"}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=True).stderr
    assert "router line" in out
    assert "access line" in out
    assert ("HTTP Request: GET" in out) is (level == "DEBUG")
    default = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, check=True).stderr
    assert "router line" in default
    assert "access line" not in default
