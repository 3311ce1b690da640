"""Eval reports through the REST API on SQLite and Postgres: attach, replace, list, the
report blob (kept by gc, gone with its version), the event feed, the service query, and
every bound the schema declares."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from mol_catalog.evals import service as evals
from tests.catalog.test_api import ADAPTER, publish, setup_base

Model = Any
EVALS = f"{ADAPTER}/versions/1/evals"
DATASET = "sha256:" + "ab" * 32
BODY: dict[str, Any] = {"suite": "humaneval", "suite_version": "2024.06",
                        "metrics": {"pass@1": 0.61, "pass@10": 0.8},
                        "dataset_digest": DATASET, "judge_model": "none"}


async def _published(client: httpx.AsyncClient, model: Model) -> None:
    await setup_base(client, model)
    assert (await publish(client, model)).status_code == 201


async def test_attach_list_replace_and_feed(client: Any, model: Model) -> None:
    await _published(client, model)
    r = await client.post(EVALS, json={**BODY, "report": "# HumanEval\n61/100 solved\n"})
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["created"] is True
    assert out["replaced"] is False
    assert out["metrics"] == {"pass@1": 0.61, "pass@10": 0.8}
    digest = "sha256:" + hashlib.sha256(b"# HumanEval\n61/100 solved\n").hexdigest()
    assert out["report_digest"] == digest
    assert out["report_size"] == 26
    same = await client.post(EVALS, json={**BODY, "report": "# HumanEval\n61/100 solved\n"})
    assert same.status_code == 200
    assert same.json()["created"] is False
    assert same.json()["replaced"] is False
    moved = await client.post(EVALS, json={**BODY, "metrics": {"pass@1": 0.7}})
    assert moved.status_code == 200
    assert moved.json()["replaced"] is True
    other = await client.post(EVALS, json={"suite": "mmlu", "metrics": {"acc": 55}})
    assert other.status_code == 201
    assert other.json()["suite_version"] == "1"
    listed = (await client.get(EVALS)).json()["items"]
    assert [(i["suite"], i["metrics"]) for i in listed] == [
        ("humaneval", {"pass@1": 0.7}), ("mmlu", {"acc": 55.0})]
    assert listed[0]["report_digest"] is None  # the replacement carried no report
    feed = (await client.get("/v1/events")).json()["items"]
    attached = [e for e in feed if e["type"] == "eval.attached"]
    assert [(e["version"], e["data"]["suite"], e["data"]["replaced"]) for e in attached] == [
        (1, "humaneval", False), (1, "humaneval", True), (1, "mmlu", False)]
    async with client.catalog.db.read() as conn:
        rows = await evals.reports_of(conn, "acme/coding", 1)
    assert [(r.suite, r.suite_version, r.metrics) for r in rows] == [
        ("humaneval", "2024.06", {"pass@1": 0.7}), ("mmlu", "1", {"acc": 55.0})]


async def test_report_blob_is_served_kept_by_gc_and_goes_with_the_version(
        client: Any, model: Model) -> None:
    await _published(client, model)
    text = "line one\nline two é\n"
    r = await client.post(EVALS, json={**BODY, "report": text})
    assert r.status_code == 201
    path = f"{EVALS}/humaneval/2024.06/report"
    got = await client.get(path)
    assert got.status_code == 200
    assert got.text == text
    gc = await client.post("/v1/admin/gc", params={"grace_seconds": 0})
    assert r.json()["report_digest"] not in gc.json()["deleted"]
    assert (await client.get(path)).text == text
    assert (await client.get(f"{EVALS}/mmlu/1/report")).status_code == 404
    assert (await client.delete(f"{ADAPTER}/versions/1")).status_code == 200
    assert (await client.get(path)).status_code == 404
    gc = await client.post("/v1/admin/gc", params={"grace_seconds": 0})
    assert r.json()["report_digest"] in gc.json()["deleted"]


@pytest.mark.parametrize(("change", "status"), [
    ({"suite": "Human Eval"}, 422),
    ({"suite": "humaneval\n"}, 422),
    ({"suite": "a" * 64}, 422),
    ({"suite_version": "-1"}, 422),
    ({"metrics": {}}, 422),
    ({"metrics": {"1st": 0.5}}, 422),
    ({"metrics": {"pass@1\n": 0.5}}, 422),
    ({"metrics": {"pass@1": "0.5"}}, 422),
    ({"metrics": {"pass@1": True}}, 422),
    ({"metrics": {"pass@1": 1e300}}, 422),
    ({"metrics": {f"m{i}": 1.0 for i in range(65)}}, 422),
    ({"dataset_digest": "sha256:abc"}, 422),
    ({"judge_model": "x" * 257}, 422),
    ({"judge_model": "a\x00b"}, 422),
    ({"report": "x" * ((1 << 20) + 1)}, 422),
    ({"extra": 1}, 422),
])
async def test_bad_reports_are_refused_and_nothing_is_written(
        client: Any, model: Model, change: dict[str, Any], status: int) -> None:
    await _published(client, model)
    r = await client.post(EVALS, json={**BODY, **change})
    assert r.status_code == status, r.text
    assert r.json()["error"]
    assert (await client.get(EVALS)).json()["items"] == []


async def test_non_finite_json_numbers_are_refused(client: Any, model: Model) -> None:
    await _published(client, model)
    raw = b'{"suite": "s", "metrics": {"m": NaN}}'
    r = await client.post(EVALS, content=raw, headers={"content-type": "application/json"})
    assert r.status_code in (400, 422), r.text
    assert (await client.get(EVALS)).json()["items"] == []


async def test_unknown_version_and_adapter_are_404(client: Any, model: Model) -> None:
    await _published(client, model)
    assert (await client.post(f"{ADAPTER}/versions/9/evals", json=BODY)).status_code == 404
    assert (await client.get("/v1/adapters/acme/nope/versions/1/evals")).status_code == 404
    assert (await client.get(f"{ADAPTER}/versions/0/evals")).status_code == 400


async def test_reports_per_version_are_bounded(client: Any, model: Model,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evals, "MAX_REPORTS_PER_VERSION", 2)
    await _published(client, model)
    for suite in ("a", "b"):
        assert (await client.post(EVALS, json={**BODY, "suite": suite})).status_code == 201
    r = await client.post(EVALS, json={**BODY, "suite": "c"})
    assert r.status_code == 409
    assert "replace one" in r.json()["detail"]
    assert (await client.post(EVALS, json={**BODY, "suite": "a",
                                           "metrics": {"x": 1}})).status_code == 200
