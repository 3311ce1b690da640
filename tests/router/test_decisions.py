"""Automatic routing decisions recorded for feedback (``semantic.recordDecisions``).

The recorder against a scripted sink: batches of at most the batch size, one namespace
each, the same batch id on every retry, pauses that double while the catalog is down,
the oldest batch dropped past the bound and a refused batch dropped, both counted. Then
the request path, a router in front of simulated engines, a scripted embedding server
and a scripted catalog that checks every batch against the wire contract: what a
keywords, a head and a below-confidence (default) decision record, the request id
equal to the ``x-request-id`` answered, the tenant's namespace where API keys are on,
and nothing recorded when it is off or for requests naming their expert; the config,
the MoLDeployment field and the operator's rendered config; and last, through the real
catalog, a recorded decision labelled and exported as training rows."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from mol_operator.builders import Defaults, Facts
from mol_operator.builders import router_config as rendered_config
from mol_platform.clients.catalog import CatalogError
from mol_platform.contract.router_config import ApiKey, RouterConfig
from mol_platform.contract.routing_feedback import (
    MAX_BATCH_DECISIONS,
    DecisionBatch,
    DecisionsRecorded,
)
from mol_platform.contract.spec import MoLDeployment
from mol_router.auto.heads.train import load_labelled
from mol_router.reporting.decisions import DecisionRecorder, home_namespace
from mol_router.tenants import OPEN, Tenant
from mol_testkit.simulator import AsyncSimulatorCluster
from tests.router.test_head_routing import EXPERTS, SIM, fake_embeddings, write_head
from tests.router.test_semantic import _config as semantic_config
from tests.router.test_semantic import fake_embeddings as semantic_embeddings
from tests.router.test_usage import Catalog
from tests.router.test_usage import catalog as catalog  # the real catalog's fixture

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _cfg(*, record: bool = True, catalog: str | None = "http://catalog:8080",
         **extra: Any) -> RouterConfig:
    data: dict[str, Any] = {
        "deployment": "demo", "profile": "default.demo", "catalog_url": catalog,
        "experts": [{"name": "chat", "adapter": "demo/chat@v1"},
                    {"name": "coding", "adapter": "demo/coding@v1"}],
        "default": "chat", "mode": "semantic", "endpoints": ["http://127.0.0.1:1"],
        "semantic": {"embeddingsUrl": "http://emb:8000", "model": "mini",
                     "experts": [{"name": "coding", "examples": ["fix my bug"]}],
                     "recordDecisions": record}}
    data.update(extra)
    return RouterConfig.model_validate(data)


class Sink:
    """Answers like the catalog (a batch id counted once), after failing with the
    statuses in ``fail`` (0: unreachable), one per call; keeps every call's body."""

    def __init__(self, fail: list[int] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.times: list[float] = []
        self.fail = list(fail or [])
        self.seen: set[str] = set()

    async def report_decisions(self, batch: dict[str, Any]) -> DecisionsRecorded:
        self.calls.append(batch)
        self.times.append(asyncio.get_running_loop().time())
        if self.fail:
            status = self.fail.pop(0)
            raise CatalogError(status, "Scripted", f"answered {status}")
        DecisionBatch.model_validate(batch)  # the wire contract, as the catalog checks it
        duplicate = batch["batch_id"] in self.seen
        self.seen.add(batch["batch_id"])
        return DecisionsRecorded(batch_id=batch["batch_id"], duplicate=duplicate,
                                 recorded=0 if duplicate else len(batch["decisions"]))


def _recorder(sink: Sink | None, **kw: Any) -> tuple[DecisionRecorder, CollectorRegistry]:
    registry = CollectorRegistry()
    rec = DecisionRecorder(lambda: sink, registry, clock=AT.timestamp, **kw)
    rec.configure(_cfg())
    return rec, registry


def _tenant(*namespaces: str) -> Tenant:
    spec = ApiKey(tenant="t", key="k" * 16, namespaces=list(namespaces))
    return Tenant("t", frozenset(namespaces), spec=spec)


def _count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


# --- the recorder ----------------------------------------------------------------------


async def test_batches_hold_at_most_the_batch_size_one_namespace_each() -> None:
    sink = Sink()
    rec, registry = _recorder(sink, batch_size=3)
    for i in range(7):
        rec.record(f"r{i}", OPEN, f"turn {i}", "coding", "semantic")
    assert [len(b.entries) for b in rec.outbox] == [3, 3]  # sealed as they filled
    rec.record("t0", _tenant("team-a"), "a turn", "chat", "keywords")
    assert await rec.flush() is True
    assert [[d["request_id"] for d in c["decisions"]] for c in sink.calls] == [
        ["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"], ["t0"]]
    assert {d["namespace"] for d in sink.calls[2]["decisions"]} == {"demo"}
    assert sink.calls[3]["decisions"] == [{
        "request_id": "t0", "namespace": "team-a", "deployment": "demo", "text": "a turn",
        "expert": "chat", "route": "keywords", "head": None, "at": AT.isoformat()}]
    assert len({c["batch_id"] for c in sink.calls}) == 4
    assert _count(registry, "mol_router_decisions_recorded_total") == 8
    assert rec.held() == 0
    full, _ = _recorder(Sink(), batch_size=10_000)
    assert full.batch_size == MAX_BATCH_DECISIONS  # the catalog's bound wins


async def test_a_batch_keeps_its_id_across_retries_and_pauses_double() -> None:
    sink = Sink(fail=[0, 503, 429, 0, 502])
    rec, registry = _recorder(sink, interval=0.02, backoff_max=5.0)
    rec.record("r1", OPEN, "hello", "chat", "default")
    rec.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while _count(registry, "mol_router_decisions_recorded_total") < 1:
            assert asyncio.get_running_loop().time() < deadline, "never delivered"
            await asyncio.sleep(0.01)
    finally:
        await rec.stop()
    assert len(sink.calls) == 6
    assert len({c["batch_id"] for c in sink.calls}) == 1  # one id for every try
    gaps = [b - a for a, b in zip(sink.times, sink.times[1:], strict=False)]
    # jittered halves of 0.02, 0.04, 0.08, 0.16, 0.32 s: the last pause is at least
    # 0.16 s, the first at most 0.02 s (plus scheduling)
    assert gaps[-1] >= 0.15 > 0.06 > gaps[0]
    assert _count(registry, "mol_router_decisions_dropped_total", reason="rejected") == 0


def test_the_pause_doubles_up_to_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, _ = _recorder(Sink(), interval=2.0, backoff_max=10.0)
    monkeypatch.setattr(random, "random", lambda: 1.0)
    assert [rec.pause(n) for n in range(6)] == [2.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    monkeypatch.setattr(random, "random", lambda: 0.0)
    assert rec.pause(3) == 4.0  # jitter: between half and all of it


async def test_past_the_bound_the_oldest_batch_is_dropped_and_counted() -> None:
    sink = Sink(fail=[0] * 100)
    rec, registry = _recorder(sink, batch_size=2, max_batches=2)
    for i in range(7):
        rec.record(f"r{i}", OPEN, "turn", "coding", "semantic")
    assert _count(registry, "mol_router_decisions_dropped_total", reason="overflow") == 2
    assert await rec.flush() is False  # unreachable: kept, in order
    assert _count(registry, "mol_router_decisions_dropped_total", reason="overflow") == 4
    assert [[d["request_id"] for d in b.entries] for b in rec.outbox] == [
        ["r4", "r5"], ["r6"]]
    assert rec.held() == 3
    ids = [b.batch_id for b in rec.outbox]
    sink.fail = []
    assert await rec.flush() is True
    assert [c["batch_id"] for c in sink.calls[-2:]] == ids
    assert _count(registry, "mol_router_decisions_recorded_total") == 3


async def test_a_refused_batch_is_dropped_and_counted_and_the_next_goes_on() -> None:
    sink = Sink(fail=[403])
    rec, registry = _recorder(sink, batch_size=2)
    for i in range(3):
        rec.record(f"r{i}", OPEN, "turn", "chat", "default")
    assert await rec.flush() is True
    assert _count(registry, "mol_router_decisions_dropped_total", reason="rejected") == 2
    assert _count(registry, "mol_router_decisions_recorded_total") == 1
    assert rec.held() == 0
    # an answer lost after the catalog took the batch: the retry is a duplicate, counted once
    rec.record("r9", OPEN, "turn", "chat", "default")
    rec.seal()
    await Sink.report_decisions(sink, {"batch_id": rec.outbox[0].batch_id,
                                       "decisions": rec.outbox[0].entries})
    assert await rec.flush() is True
    assert _count(registry, "mol_router_decisions_recorded_total") == 2


def test_off_without_the_flag_or_a_catalog_and_for_turns_the_catalog_cannot_keep() -> None:
    for cfg in (_cfg(record=False), _cfg(catalog=None)):
        rec = DecisionRecorder(lambda: Sink(), CollectorRegistry())
        rec.configure(cfg)
        rec.record("r1", OPEN, "hello", "chat", "default")
        assert (rec.on, rec.held()) == (False, 0)
    rec, _ = _recorder(Sink())
    rec.record("r1", OPEN, "   ", "chat", "default")
    rec.record("r2", OPEN, "hello", "not-an-expert", "default")
    rec.record("r4", OPEN, "nul \x00 inside", "chat", "default")  # Postgres refuses NUL
    rec.record("r5", OPEN, "half \ud800 a pair", "chat", "default")  # not encodable
    assert rec.held() == 0
    rec.record("r3", OPEN, "x" * 5000, "chat", "default")
    assert len(rec._open[0]["text"]) == 4000  # the catalog's bound


def test_the_namespace_is_the_tenants_else_the_deployments() -> None:
    rec, _ = _recorder(Sink())
    assert rec.namespace_of(OPEN) == "demo"  # no keys: the default expert's namespace
    assert rec.namespace_of(_tenant("*")) == "demo"
    assert rec.namespace_of(_tenant("team-a", "team-b")) == "team-a"
    assert rec.namespace_of(_tenant("*", "team-b")) == "team-b"
    assert home_namespace(_cfg(adapter_namespaces=["acme", "beta"])) == "acme"


# --- the config -------------------------------------------------------------------------


def test_record_decisions_is_opt_in_and_bounded_by_the_catalogs_text_limit() -> None:
    assert _cfg(record=False).semantic is not None
    plain = RouterConfig.model_validate({**_cfg().model_dump(), "semantic": {
        "embeddingsUrl": "http://emb:8000", "model": "mini",
        "experts": [{"name": "coding", "examples": ["x"]}]}})
    assert plain.semantic is not None
    assert plain.semantic.record_decisions is False
    with pytest.raises(ValidationError, match="maxChars must be at most 4000"):
        _cfg(semantic={"embeddingsUrl": "http://emb:8000", "model": "mini",
                       "experts": [{"name": "coding", "examples": ["x"]}],
                       "recordDecisions": True, "maxChars": 4001})


def test_the_deployments_field_reaches_the_rendered_router_config_and_the_crd() -> None:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["spec"]["router"] = {"mode": "semantic", "default": "chat", "semantic": {
        "embeddingsUrl": "http://emb:8000", "recordDecisions": True,
        "experts": [{"name": "coding", "examples": ["fix my bug"]}]}}

    def rendered() -> RouterConfig:
        return rendered_config(Facts(
            obj=MoLDeployment.model_validate(data), uid="u", token="mol_x", token_id=1,
            token_scopes=("read:acme",),
            defaults=Defaults(prometheus_url="http://prometheus:9090")))

    config = rendered()
    assert config.semantic is not None
    assert config.semantic.record_decisions is True
    assert config.catalog_url is not None  # the operator's catalog: decisions can go there
    del data["spec"]["router"]["semantic"]["recordDecisions"]
    off = rendered().semantic
    assert off is not None
    assert off.record_decisions is False
    crd = yaml.safe_load((ROOT / "deploy/crds/moldeployments.mol.dev.yaml").read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    semantic = props["spec"]["properties"]["router"]["properties"]["semantic"]["properties"]
    assert semantic["recordDecisions"]["default"] is False


# --- the request path ------------------------------------------------------------------


class FakeCatalog:
    """Resolves ``ns/name@vN`` as itself, has no events, and records decision batches,
    refusing (422) one the contract refuses."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self.url = ""

    async def resolve(self, request: web.Request) -> web.Response:
        name, ref = request.match_info["rest"].split("@", 1)
        return web.json_response({
            "adapter": f"{request.match_info['ns']}/{name}", "version": int(ref[1:]),
            "digest": "sha256:" + "0" * 64, "status": "ready", "yank_reason": None,
            "base": "tiny@main", "files": [], "verdict": {"compatible": True, "reasons": []},
            "signature": None, "signed_by": None, "signer_key": None,
            "signer_revoked": False, "signature_required": False})

    async def events(self, request: web.Request) -> web.Response:
        after = int(request.query.get("after", "0"))
        if "wait" in request.query:
            await asyncio.sleep(0.2)
        return web.json_response({"items": [], "last": after})

    async def decisions(self, request: web.Request) -> web.Response:
        body = await request.json()
        try:
            DecisionBatch.model_validate(body)
        except ValidationError as exc:
            return web.json_response({"detail": str(exc)}, status=422)
        self.batches.append(body)
        return web.json_response({"batch_id": body["batch_id"], "duplicate": False,
                                  "recorded": len(body["decisions"])})

    def decisions_recorded(self) -> list[dict[str, Any]]:
        return [d for b in self.batches for d in b["decisions"]]


@asynccontextmanager
async def fake_catalog() -> AsyncIterator[FakeCatalog]:
    fake = FakeCatalog()
    app = web.Application()
    app.router.add_get("/v1/resolve/{ns}/{rest}", fake.resolve)
    app.router.add_get("/v1/events", fake.events)
    app.router.add_post("/v1/routing/decisions", fake.decisions)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def _head_config(urls: list[str], router_config: Any, embeddings: str, head: Path,
                 catalog: str, **extra: Any) -> RouterConfig:
    semantic = {"embeddingsUrl": embeddings, "model": "mini", "headFile": str(head),
                "maxChars": 40, "recordDecisions": True, **extra.pop("semantic", {})}
    cfg: RouterConfig = router_config(
        urls, mode="semantic", default="chat", catalog_url=catalog,
        experts=[{"name": n, "adapter": f"demo/{n}@v1"} for n in EXPERTS.values()],
        semantic=semantic, timeouts={"embedding": 2.0}, **extra)
    return cfg


async def _ask(http: aiohttp.ClientSession, url: str, text: str, model: str = "auto",
               **headers: str) -> aiohttp.ClientResponse:
    body = {"model": model, "messages": [{"role": "system", "content": "be brief"},
                                         {"role": "user", "content": text}]}
    async with http.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        await resp.read()
        return resp


async def test_keywords_head_and_default_decisions_are_recorded_as_decided(
        tmp_path: Path, router_config: Any, start_router: Any, ready: Any) -> None:
    head = write_head(tmp_path / "head.json")
    long_turn = "tell me all about it please " * 3 + "fix the code now"
    async with fake_embeddings() as emb, fake_catalog() as cat, \
            AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _head_config(sims.urls, router_config, emb.url, tmp_path / "head.json", cat.url)
        async with start_router(cfg, decisions_interval=0.1) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            kw = await _ask(http, router.url, "booking for two", **{"x-request-id": "kw-1"})
            calls = len(emb.inputs)
            by_head = await _ask(http, router.url, long_turn)
            embedded = emb.inputs[calls]  # what the head's turn sent to the engine
            low = await _ask(http, router.url, "code page hello trip")
            named = await _ask(http, router.url, "fix the code now", model="coding")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while len(cat.decisions_recorded()) < 3:  # the background task delivers
                assert loop.time() < deadline, "decisions never reached the catalog"
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # the request naming its expert: nothing follows
            metrics = await (await http.get(router.url + "/metrics")).text()
    got = {d["request_id"]: d for d in cat.decisions_recorded()}
    assert kw.headers["x-request-id"] == "kw-1"  # the client's id, passed on
    assert set(got) == {"kw-1", by_head.headers["x-request-id"], low.headers["x-request-id"]}
    assert named.headers["x-request-id"] not in got
    assert got["kw-1"] == {"request_id": "kw-1", "namespace": "demo", "deployment": "demo",
                           "text": "booking for two", "expert": "agent", "route": "keywords",
                           # the head's measured keywords are part of its decision
                           "head": head.digest(), "at": got["kw-1"]["at"]}
    decided = got[by_head.headers["x-request-id"]]
    assert embedded == [decided["text"]] == [long_turn[-40:]]  # exactly as embedded
    assert (decided["expert"], decided["route"]) == ("coding", "head")
    assert by_head.headers["x-mol-expert"] == "coding"
    assert decided["head"] == head.digest() == "sha256:" + hashlib.sha256(
        (tmp_path / "head.json").read_bytes()).hexdigest()
    fallback = got[low.headers["x-request-id"]]
    assert (fallback["expert"], fallback["route"], fallback["head"]) == (
        "chat", "default", None)
    assert low.headers["x-mol-route"] == "default; semantic=below-confidence"
    at = datetime.fromisoformat(fallback["at"])
    assert at.tzinfo is not None
    assert abs((datetime.now(UTC) - at).total_seconds()) < 60
    assert "mol_router_decisions_recorded_total 3.0" in metrics


async def test_nothing_is_recorded_when_off_and_tenants_get_their_namespace(
        tmp_path: Path, router_config: Any, start_router: Any, ready: Any) -> None:
    write_head(tmp_path / "head.json")
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n"
                    "  - tenant: acme\n    key: sk-acme-0123456789abcdef\n"
                    "    namespaces: [acme]\n"
                    "  - tenant: ops\n    key: sk-ops-0123456789abcdef0\n")
    async with fake_embeddings() as emb, fake_catalog() as cat, \
            AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        off = _head_config(sims.urls, router_config, emb.url, tmp_path / "head.json",
                           cat.url, semantic={"recordDecisions": False})
        async with start_router(off, decisions_interval=0.05) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            await _ask(http, router.url, "booking for two")
            await _ask(http, router.url, "fix the code now")
            assert await router.runtime.decisions.flush() is True
            assert router.runtime.decisions.held() == 0
        assert cat.batches == []
        on = _head_config(sims.urls, router_config, emb.url, tmp_path / "head.json",
                          cat.url, adapter_namespaces=["shared"], api_keys_file=str(keys))
        async with start_router(on) as router, aiohttp.ClientSession() as http:
            await ready(router)
            acme = await _ask(http, router.url, "booking for two",
                              Authorization="Bearer sk-acme-0123456789abcdef")
            ops = await _ask(http, router.url, "booking for two",
                             Authorization="Bearer sk-ops-0123456789abcdef0")
            assert await router.runtime.decisions.flush() is True
    got = {d["request_id"]: d["namespace"] for d in cat.decisions_recorded()}
    assert got == {acme.headers["x-request-id"]: "acme",  # the key's namespace
                   ops.headers["x-request-id"]: "shared"}  # any namespace: the deployment's
    assert len(cat.batches) == 2  # one namespace a batch


# --- through the real catalog ------------------------------------------------------------


async def test_a_recorded_decision_is_labelled_and_exported_for_training(
        catalog: Catalog, router_config: Any, start_router: Any, ready: Any,
        tmp_path: Path) -> None:
    """The router's token (read:demo, usage:demo) records; a reviewer (admin) labels the
    request id the client saw; the export loads as ``mol router train --prompts`` rows."""
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(
            sims.urls, catalog_url=catalog.url, profile="default.demo",
            catalog_token_file=str(catalog.token_file), mode="semantic",
            experts=[{"name": "chat", "adapter": "demo/chat@v1"},
                     {"name": "coding", "adapter": "demo/coding@v1"}],
            semantic={"embeddingsUrl": "http://127.0.0.1:1", "model": "mini",
                      "experts": [{"name": "coding", "keywords": ["python"]}],
                      "recordDecisions": True})
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            answer = await _ask(http, router.url, "sort a list in python")
            assert answer.headers["x-mol-route"].startswith("keywords")
            assert await router.runtime.decisions.flush() is True
    rid = answer.headers["x-request-id"]
    assert _count(router.runtime.metrics.registry, "mol_router_decisions_recorded_total") == 1
    with catalog.admin() as admin:
        shown = admin.get(f"/v1/namespaces/demo/routing/decisions/{rid}")
        assert shown.status_code == 200, shown.text
        assert (shown.json()["expert"], shown.json()["route"], shown.json()["text"]) == (
            "coding", "keywords", "sort a list in python")
        r = admin.put(f"/v1/namespaces/demo/routing/labels/{rid}", json={"expert": "chat"})
        assert r.status_code == 200, r.text
        export = admin.get("/v1/namespaces/demo/routing/labels")
        assert export.status_code == 200, export.text
    path = tmp_path / "labels.jsonl"
    path.write_text(export.text, encoding="utf-8")
    rows = load_labelled(path)
    assert [(x.id, x.text, x.expert) for x in rows] == [(rid, "sort a list in python", "chat")]


async def test_example_and_classifier_decisions_are_recorded_as_such(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with semantic_embeddings() as emb, fake_catalog() as cat, \
            AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = semantic_config(sims.urls, router_config, emb.url, "semantic-then-classifier",
                              catalog_url=cat.url)
        assert cfg.semantic is not None
        cfg = cfg.model_copy(update={"semantic": cfg.semantic.model_copy(
            update={"record_decisions": True})})
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_text("demo/router@v1", "ui", when_prompt_contains="layout")
            by_examples = await _ask(http, router.url, "review my code please")
            by_classifier = await _ask(http, router.url, "a layout question")
            assert by_classifier.headers["x-mol-route"] == "classifier; semantic=below-threshold"
            assert await router.runtime.decisions.flush() is True
    got = {d["request_id"]: (d["expert"], d["route"], d["head"], d["text"])
           for d in cat.decisions_recorded()}
    assert got == {
        by_examples.headers["x-request-id"]: ("coding", "semantic", None,
                                              "review my code please"),
        by_classifier.headers["x-request-id"]: ("ui", "classifier", None,
                                                "a layout question")}
