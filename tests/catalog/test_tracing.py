"""The catalog's spans (resolve, publish) over OTLP/HTTP to a receiver on loopback:
a caller's traceparent is their parent only when trusted; tracing off creates none."""

from __future__ import annotations

from typing import Any

import pytest

from mol_testkit.otlp import OtlpReceiver

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


async def _publish_and_resolve(client: Any, model: Any) -> None:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    r = await client.post("/v1/adapters/acme/bot/versions", files=model.files(model.adapter()),
                          headers={"traceparent": CALLER})
    assert r.status_code == 201, r.text
    ok = await client.get("/v1/resolve/acme/bot@v1", headers={"traceparent": CALLER})
    assert ok.status_code == 200
    missing = await client.get("/v1/resolve/acme/none@v1", headers={"traceparent": CALLER})
    assert missing.status_code == 404


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("trusted", [False, True])
async def test_resolve_and_publish_spans(trusted: bool, make_client: Any, model: Any) -> None:
    async with OtlpReceiver() as rx:
        client = await make_client(tracing_endpoint=rx.url, tracing_sample_ratio=1.0,
                                   tracing_trust_parent=trusted)
        await _publish_and_resolve(client, model)
        assert client.catalog.tracing is not None
        client.catalog.tracing.flush()
        spans = await rx.wait_for(3)
    (publish,) = [s for s in spans if s.name == "mol.catalog.publish"]
    resolves = [s for s in spans if s.name == "mol.catalog.resolve"]
    assert publish.kind == "SERVER"
    assert publish.service == "mol-catalog"
    assert publish.attributes["mol.adapter.namespace"] == "acme"
    assert publish.attributes["mol.adapter.version"] == 1
    assert publish.attributes["mol.publish.created"] is True
    assert [s.attributes["mol.adapter.ref"] for s in resolves] == ["acme/bot@v1",
                                                                    "acme/none@v1"]
    assert [s.attributes["http.response.status_code"] for s in resolves] == [200, 404]
    assert resolves[1].attributes["error.type"] == "404"
    for span in (publish, *resolves):
        if trusted:
            assert (span.trace_id, span.parent_id) == (CALLER_TRACE, "00f067aa0ba902b7")
        else:
            assert span.trace_id != CALLER_TRACE
            assert span.parent_id == ""


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_tracing_off_by_default(make_client: Any, model: Any) -> None:
    client = await make_client()
    assert client.catalog.tracing is None
    await _publish_and_resolve(client, model)
