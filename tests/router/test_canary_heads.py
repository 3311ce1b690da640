"""Trained heads from the catalog (:mod:`mol_router.auto.heads.source`) and a candidate head
on trial (``semantic.canary``), against a fake catalog client and the scripted
embeddings server of ``test_head_routing``: the source checks the digest and the fit
before a head serves, keeps the serving head when an update does not fit, retries a
catalog that is down, follows the event feed; the candidate routes its share of users
(sticky), and both picks are compared off the request path."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from mol_platform.contract.router_config import RouterConfig, RouterSemantic
from mol_router.auto.heads import model as head_mod
from mol_router.auto.heads.source import HeadSource, from_bytes
from mol_router.auto.scores import Verdict
from mol_router.auto.semantic import SemanticSignal
from mol_testkit.simulator import AsyncSimulatorCluster
from tests.router.test_decisions import fake_catalog
from tests.router.test_head_routing import EXPERTS, SIM, fake_embeddings, write_head
from tests.router.test_usage import Catalog
from tests.router.test_usage import catalog as catalog  # the real catalog's fixture

REF = "demo/router@stable"
CANDIDATE = "demo/router@candidate"


class Meta:
    def __init__(self, version: int, digest: str) -> None:
        self.version, self.digest = version, digest


class FakeHeads:
    """What the router asks the catalog: an alias's version, then its document."""

    def __init__(self) -> None:
        self.docs: dict[int, bytes] = {}
        self.aliases: dict[str, int] = {}
        self.down = False
        self.lie = False  # answer a digest that is not the document's
        self.fetched: list[int] = []

    def publish(self, raw: bytes, alias: str) -> int:
        version = len(self.docs) + 1
        self.docs[version] = raw
        self.aliases[alias] = version
        return version

    async def router_head(self, namespace: str, name: str, ref: int | str) -> Meta:
        assert (namespace, name) == ("demo", "router")
        if self.down:
            raise OSError("connection refused")
        version = ref if isinstance(ref, int) else self.aliases[ref]
        digest = "sha256:" + hashlib.sha256(self.docs[version]).hexdigest()
        return Meta(version, "sha256:" + "0" * 64 if self.lie else digest)

    async def router_head_document(self, namespace: str, name: str, version: int) -> bytes:
        self.fetched.append(version)
        return self.docs[version]


@functools.cache
def _fitted(threshold: float, model: str) -> head_mod.Head:
    with tempfile.TemporaryDirectory() as tmp:
        return write_head(Path(tmp) / "head.json", threshold=threshold, model=model)


def fitted(threshold: float = 0.6, model: str = "mini") -> head_mod.Head:
    """A head fitted on the rig's prompts, once per setting (fitting cross-validates)."""
    return _fitted(threshold, model)


def swapped(head: head_mod.Head) -> head_mod.Head:
    """The same weights under the experts' names in another order: a head that
    disagrees with ``head`` on every turn its weights decide."""
    experts = head.experts[1:] + head.experts[:1]
    return head_mod.Head(experts, head.weights, head.bias, head.temperature, head.threshold,
                         head.model, {}, head.training, head.ngrams)


def source(client: FakeHeads, refs: dict[str, str | None], **kw: Any) -> HeadSource:
    return HeadSource(client, refs, list(EXPERTS.values()), "mini",  # type: ignore[arg-type]
                      retry_seconds=0.05, **kw)


async def test_a_head_is_fetched_checked_against_its_digest_and_followed() -> None:
    first = fitted()
    client = FakeHeads()
    client.publish(first.dumps(), "stable")
    seen: list[tuple[str, str | None]] = []
    src = source(client, {"stable": REF},
                 on_change=lambda role, h: seen.append((role, h.label if h else None)))
    await src.start()
    try:
        assert src.stable is not None
        assert src.stable.digest == first.digest()  # canonical bytes: the same digest
        assert src.stable.label == "demo/router@v1"
        assert seen == [("stable", "demo/router@v1")]
        # an event for another head changes nothing; one for this head moves it
        second = fitted(threshold=0.4)
        client.publish(second.dumps(), "stable")
        src.on_events([{"type": "router_head.alias.set", "adapter": "demo/other"},
                       {"type": "adapter.alias.set", "adapter": "demo/router"}])
        await asyncio.sleep(0.2)
        assert src.stable.label == "demo/router@v1"
        src.on_events([{"type": "router_head.alias.set", "adapter": "demo/router"}])
        for _ in range(100):
            if src.stable.label == "demo/router@v2":
                break
            await asyncio.sleep(0.02)
        assert src.stable.label == "demo/router@v2"
        assert src.stable.head.threshold == 0.4
        assert src.status()["stable"] == {"ref": REF, "head": "demo/router@v2",
                                          "digest": second.digest(), "error": None}
    finally:
        await src.stop()


async def test_a_head_that_does_not_fit_or_lies_about_its_digest_never_serves() -> None:
    good = fitted()
    client = FakeHeads()
    client.publish(good.dumps(), "stable")
    src = source(client, {"stable": REF})
    await src.start()
    try:
        assert src.stable is not None
        # another embedding model: refused, the serving head stays
        client.publish(fitted(model="other").dumps(), "stable")
        await src.refresh()
        assert src.stable.label == "demo/router@v1"
        assert "embedding model 'other'" in src.errors["stable"]
        # bytes that do not hash to the digest the catalog named
        client.publish(fitted(threshold=0.3).dumps(), "stable")
        client.lie = True
        await src.refresh()
        assert src.stable.label == "demo/router@v1"
        assert "the catalog named sha256:000" in src.errors["stable"]
        # not a head at all
        client.lie = False
        client.publish(b'{"kind": "something else"}', "stable")
        await src.refresh()
        assert src.stable.label == "demo/router@v1"
        assert "not a router head" in src.errors["stable"]
    finally:
        await src.stop()


async def test_a_catalog_down_at_start_leaves_the_head_missing_until_it_answers() -> None:
    client = FakeHeads()
    client.publish(fitted().dumps(), "stable")
    client.down = True
    src = source(client, {"stable": REF})
    await src.start()
    try:
        assert src.stable is None
        assert "cannot fetch demo/router@stable" in src.errors["stable"]
        client.down = False
        for _ in range(100):  # retried every retry_seconds while missing
            if src.stable is not None:
                break
            await asyncio.sleep(0.02)
        assert src.stable is not None
        assert "stable" not in src.errors
    finally:
        await src.stop()


def test_bytes_are_checked_against_the_named_digest() -> None:
    raw = fitted().dumps()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    assert from_bytes(raw, REF, "demo/router@v1", digest).digest == digest
    with pytest.raises(head_mod.HeadError, match="sha256"):
        from_bytes(raw + b" ", REF, "demo/router@v1", digest)


def test_the_config_refuses_a_canary_without_a_serving_head_and_refs_without_a_catalog(
        router_config: Any) -> None:
    base = {"embeddingsUrl": "http://127.0.0.1:1/v1", "model": "mini"}
    with pytest.raises(ValueError, match=r"set semantic\.head first"):
        RouterSemantic.model_validate({**base, "experts": [{"name": "chat"}],
                                       "canary": {"head": CANDIDATE}})
    with pytest.raises(ValueError, match="not both"):
        RouterSemantic.model_validate({**base, "head": REF, "headFile": "/x.json"})
    with pytest.raises(ValueError, match="set catalogUrl"):
        router_config(["http://127.0.0.1:1"], mode="semantic",
                      experts=[{"name": "chat", "adapter": "demo/chat@v1"}],
                      semantic={**base, "head": REF})


def _signal(url: str, weight: float, heads: HeadSource) -> SemanticSignal:
    cfg = RouterSemantic.model_validate({
        "embeddingsUrl": url, "model": "mini", "head": REF,
        "canary": {"head": CANDIDATE, "weight": weight}})
    return SemanticSignal(cfg, 2.0, heads)


async def test_the_candidate_routes_its_share_sticky_per_user_and_both_picks_compare() -> None:
    stable = fitted()
    client = FakeHeads()
    client.publish(stable.dumps(), "stable")
    client.publish(swapped(stable).dumps(), "candidate")
    src = source(client, {"stable": REF, "candidate": CANDIDATE})
    await src.start()
    assert src.stable is not None
    assert src.candidate is not None
    async with fake_embeddings() as emb, aiohttp.ClientSession() as http:
        turn = "fix the code now"
        # weight 0: the serving head decides, the candidate is the one compared
        none = await _signal(emb.url, 0, src).decide(http, turn, "u1")
        assert (none.role, none.verdict.expert) == ("stable", "coding")
        assert none.other is src.candidate
        # weight 100: the candidate decides (its names swapped), the serving head compared
        signal = _signal(emb.url, 100, src)
        every = await signal.decide(http, turn, "u1")
        assert every.role == "candidate"
        assert every.head is src.candidate
        assert every.verdict.expert != "coding"
        assert every.other is src.stable
        got: list[Verdict] = []
        calls = len(emb.inputs)
        assert signal.shadow(http, turn, every.other, got.append)
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.01)
        assert got[0].expert == "coding"
        assert len(emb.inputs) == calls  # the turn's embedding was cached: no second call
        # a share: sticky per user, about the weight over many users
        half = _signal(emb.url, 30, src)
        roles = [(await half.decide(http, turn, f"user-{i}")).role for i in range(200)]
        again = [(await half.decide(http, turn, f"user-{i}")).role for i in range(200)]
        assert roles == again
        assert 40 <= roles.count("candidate") <= 80
        # a full comparison queue: no comparison started
        assert not signal.shadow(http, turn, every.other, got.append, limit=0)
    await src.stop()


async def test_the_router_counts_each_heads_picks_and_their_agreement(
        router_config: Any, start_router: Any, ready: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole router with both heads from a fake catalog client: ``x-mol-route``
    marks the candidate's turns, the metrics count each head's picks and the
    comparisons, ``/status`` names both heads."""

    stable = fitted()
    client = FakeHeads()
    client.publish(stable.dumps(), "stable")
    client.publish(swapped(stable).dumps(), "candidate")

    built = HeadSource.of

    def fake_of(sem: Any, experts: list[str], _client: Any, **kw: Any) -> HeadSource | None:
        return built(sem, experts, client, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(HeadSource, "of", fake_of)
    async with fake_embeddings() as emb, fake_catalog() as cat, \
            AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg: RouterConfig = router_config(
            sims.urls, mode="semantic", default="chat", catalog_url=cat.url,
            experts=[{"name": n, "adapter": f"demo/{n}@v1"} for n in EXPERTS.values()],
            semantic={"embeddingsUrl": emb.url, "model": "mini", "head": REF,
                      "recordDecisions": True,
                      "canary": {"head": CANDIDATE, "weight": 50}},
            timeouts={"embedding": 2.0})
        async with start_router(cfg, decisions_interval=0.1) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            routes = []
            for i in range(40):
                body = {"model": "auto", "user": f"user-{i}",
                        "messages": [{"role": "user", "content": "fix the code now"}]}
                async with http.post(router.url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    routes.append((r.headers["x-mol-expert"], r.headers["x-mol-route"]))
            deadline = asyncio.get_running_loop().time() + 10
            while len(cat.decisions_recorded()) < 40:  # compared off the request path
                assert asyncio.get_running_loop().time() < deadline, cat.batches
                await asyncio.sleep(0.05)
            metrics = await (await http.get(router.url + "/metrics")).text()
            status = json.loads(await (await http.get(router.url + "/status")).text())
    by_candidate = [e for e, route in routes if "head=candidate" in route]
    by_stable = [e for e, route in routes if "head=candidate" not in route]
    assert by_candidate
    assert by_stable
    assert set(by_stable) == {"coding"}
    assert all(route.startswith("head; head=demo/router@v1; score=") for e, route in routes
               if "head=candidate" not in route)
    assert all(route.startswith("head; head=demo/router@v2; score=") for e, route in routes
               if "head=candidate" in route)
    assert "coding" not in by_candidate
    agree = _sample(metrics, 'mol_router_head_agreement_total{deployment="demo",'
                    'result="disagree"}')
    assert agree == 40.0  # every turn compared; the swapped head never agrees
    stable_n = _sample(metrics, 'mol_router_head_decisions_total{deployment="demo",'
                       'expert="coding",head="demo/router@v1",role="stable"}')
    assert stable_n == len(by_stable)
    assert (f'mol_router_head_info{{deployment="demo",digest="{stable.digest()}",'
            f'head="demo/router@v1",role="stable"}} 1.0') in metrics
    assert status["heads"]["candidate"]["head"] == "demo/router@v2"
    assert status["heads"]["candidate"]["weight"] == 50
    # each decision holds the head that routed it and the other head's pick
    digests = {"demo/router@v1": stable.digest(), "demo/router@v2": swapped(stable).digest()}
    for d in cat.decisions_recorded():
        assert d["route"] == "head"
        assert {d["head"], d["candidate"]["head"]} == set(digests.values())
        assert d["candidate"]["expert"] != d["expert"]
    assert status["heads"]["stable"]["digest"] == stable.digest()


def _sample(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in the metrics")


def test_swapped_heads_differ() -> None:
    """The rig's candidate really is another head (else the tests above prove little)."""
    rows = np.eye(3)
    head = head_mod.Head(("a", "b", "c"), rows, np.zeros(3), 1.0, 0.0, "m")
    assert swapped(head).digest() != head.digest()
    assert swapped(head).verdict(rows[0]).expert == "b"


async def test_against_the_real_catalog_heads_follow_alias_moves_and_labels_score_them(
        catalog: Catalog, router_config: Any, start_router: Any, ready: Any) -> None:
    """Heads published in a real catalog: the router serves the one ``@stable`` names,
    compares the candidate's picks, follows ``@stable`` when it moves (the event feed),
    and a label on a recorded decision counts for both heads in the catalog's accuracy."""
    stable, candidate = fitted(), swapped(fitted())
    with catalog.admin() as admin:
        for doc, alias in ((stable, "stable"), (candidate, "candidate")):
            r = admin.post("/v1/namespaces/demo/router-heads/router/versions",
                           content=doc.dumps(), headers={"Content-Type": "application/json"})
            assert r.status_code == 201, r.text
            assert r.json()["digest"] == doc.digest()
            v = r.json()["version"]
            r = admin.put(f"/v1/namespaces/demo/router-heads/router/aliases/{alias}",
                          json={"version": v})
            assert r.is_success, r.text
    async with fake_embeddings() as emb, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg: RouterConfig = router_config(
            sims.urls, mode="semantic", default="chat", catalog_url=catalog.url,
            catalog_token_file=str(catalog.token_file),
            experts=[{"name": n, "adapter": f"demo/{n}@v1"} for n in EXPERTS.values()
                     if n in ("chat", "coding")] +
            [{"name": n, "adapter": "demo/chat@v1"} for n in EXPERTS.values()
             if n not in ("chat", "coding")],
            semantic={"embeddingsUrl": emb.url, "model": "mini", "head": REF,
                      "recordDecisions": True, "canary": {"head": CANDIDATE, "weight": 0}},
            timeouts={"embedding": 2.0})
        async with start_router(cfg, decisions_interval=0.1) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            body = {"model": "auto", "messages": [{"role": "user", "content": "fix the code"}]}
            async with http.post(router.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["x-mol-expert"] == "coding"  # the stable head's pick
                rid = resp.headers["x-request-id"]
            # the candidate becomes stable: the router follows within the feed's wait
            with catalog.admin() as admin:
                assert admin.put("/v1/namespaces/demo/router-heads/router/aliases/stable",
                                 json={"version": 2}).is_success
            heads = router.runtime.heads
            assert heads is not None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while heads.stable is None or heads.stable.label != "demo/router@v2":
                assert loop.time() < deadline, heads.status()
                await asyncio.sleep(0.05)
            async with http.post(router.url + "/v1/chat/completions", json=body) as resp:
                assert resp.headers["x-mol-expert"] != "coding"  # now the swapped head's
    # the first turn was recorded with the candidate's pick; a reviewer labels it
    with catalog.admin() as admin:
        deadline = loop.time() + 10
        while (got := admin.get(f"/v1/namespaces/demo/routing/decisions/{rid}")
               ).status_code == 404:
            assert loop.time() < deadline, "the decision never reached the catalog"
            await asyncio.sleep(0.1)
        assert got.status_code == 200, got.text
        assert admin.put(f"/v1/namespaces/demo/routing/labels/{rid}",
                         json={"expert": "coding"}).is_success
        report = admin.get("/v1/namespaces/demo/routing/accuracy").json()
        metrics = admin.get("/metrics").text
    scored = {h["head"]: (h["labelled"], h["correct"]) for h in report["heads"]}
    assert scored == {stable.digest(): (1, 1), candidate.digest(): (1, 0)}
    assert "mol_catalog_routing_labels_total" in metrics


def test_the_training_data_digest_names_the_pairs_in_order() -> None:
    from mol_router.auto.heads.labelled import Labelled, data_digest
    rows = [Labelled("fix the code", "coding"), Labelled("hello", "chat")]
    digest = data_digest(rows)
    assert digest.startswith("sha256:")
    assert len(digest) == 71
    assert data_digest(list(rows)) == digest
    assert data_digest(rows[::-1]) != digest
    assert data_digest([rows[0], Labelled("hello", "agent")]) != digest  # a label changed


def test_the_head_label_of_the_decision_metrics_stays_bounded() -> None:
    """Each published version is a new ``head`` label value: a head no role uses any
    longer takes its decision series with it, so a deployment that goes through many
    versions keeps at most two heads' series (stable and candidate)."""
    from prometheus_client import generate_latest

    from mol_router.telemetry.metrics import RouterMetrics

    m = RouterMetrics("demo")
    for v in range(1, 30):
        head = f"demo/router@v{v}"
        m.head_in_use("stable", head, f"sha256:{v:064x}")
        m.head_decided("stable", head, "coding")
        if v > 1:  # the previous version runs on as the candidate for a while
            m.head_in_use("candidate", f"demo/router@v{v - 1}", f"sha256:{v - 1:064x}")
            m.head_decided("candidate", f"demo/router@v{v - 1}", "chat")
    text = generate_latest(m.registry).decode()
    series = {line.split("{", 1)[1].split("}")[0] for line in text.splitlines()
              if line.startswith("mol_router_head_decisions_total{")}
    assert series == {'deployment="demo",expert="coding",head="demo/router@v29",role="stable"',
                      'deployment="demo",expert="chat",head="demo/router@v28",'
                      'role="candidate"'}


def test_a_first_candidate_starts_every_agreement_result_at_zero() -> None:
    """The dashboards' agreement ratio divides two rates: both sides need a series from
    the moment a candidate head is first in use, before any turn was compared."""
    from prometheus_client import generate_latest

    from mol_router.telemetry.metrics import RouterMetrics

    m = RouterMetrics("demo")
    m.head_in_use("candidate", "demo/router@v2", f"sha256:{2:064x}")
    text = generate_latest(m.registry).decode()
    results = {line.split('result="', 1)[1].split('"')[0] for line in text.splitlines()
               if line.startswith("mol_router_head_agreement_total{")}
    assert results == {"agree", "disagree", "undecided", "skipped"}
