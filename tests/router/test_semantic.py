"""The semantic signal through the router: decisions, ``x-mol-route``, the fallbacks
(classifier, keywords, default) when the embedding engine fails or hangs, the cache and
the bounded input, against a scripted ``/v1/embeddings`` server on loopback."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from mol_platform.contract.router_config import RouterConfig
from mol_router.auto import scores
from mol_router.auto.semantic import EmbeddingError, embeddings_url, post_embeddings
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
AXES = ("code", "page", "hello")  # the fake model's three dimensions


class FakeEmbeddings:
    """Counts each axis word in the text: a model whose answers a test can predict.
    ``fail``: None, "status" (HTTP 500) or "hang" (never answers in time)."""

    def __init__(self) -> None:
        self.fail: str | None = None
        self.delay_examples = 0.0  # seconds before answering a call of several inputs
        self.extra_dims = 0  # a model of another size answering (a swapped engine)
        self.base64: str | None = None  # "float32": answer base64 when asked; "bad": garbage
        self.formats: list[str | None] = []  # the encoding_format of each call
        self.inputs: list[list[str]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        assert body["model"] == "mini"
        self.inputs.append(body["input"])
        if self.fail == "status":
            return web.json_response({"error": "down"}, status=500)
        if self.fail == "hang":
            await asyncio.sleep(5)
        if len(body["input"]) > 1:
            await asyncio.sleep(self.delay_examples)
        self.formats.append(body.get("encoding_format"))
        data: list[dict[str, Any]] = [
            {"index": i, "embedding": [t.lower().count(w) + 0.01 for w in AXES]
             + [0.5] * self.extra_dims} for i, t in enumerate(body["input"])]
        if self.base64 is not None and body.get("encoding_format") == "base64":
            for d in data:
                raw = struct.pack(f"<{len(d['embedding'])}f", *d["embedding"])
                d["embedding"] = (base64.b64encode(raw).decode() if self.base64 == "float32"
                                  else base64.b64encode(raw[:-1]).decode())
        return web.json_response({"data": data})


@asynccontextmanager
async def fake_embeddings() -> AsyncIterator[FakeEmbeddings]:
    fake = FakeEmbeddings()
    app = web.Application()
    app.router.add_post("/v1/embeddings", fake.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield fake
    finally:
        await runner.cleanup()


def _config(urls: list[str], router_config: Any, embeddings: str, mode: str,
            keywords_decide: bool = False, **kw: Any) -> RouterConfig:
    """Keywords first is off unless asked for: most tests look at the embedding."""
    cfg: RouterConfig = router_config(
        urls, mode=mode, classifier="router", default="chat",
        experts=[{"name": "chat", "adapter": "demo/chat@v1"},
                 {"name": "coding", "adapter": "demo/coding@v1"},
                 {"name": "ui", "adapter": "demo/ui@v1"},
                 {"name": "router", "adapter": "demo/router@v1"}],
        semantic={"embeddingsUrl": embeddings, "model": "mini", "threshold": 0.8,
                  "margin": 0.1, "maxChars": 64, "keywordsDecide": keywords_decide,
                  "experts": [
                      {"name": "coding", "examples": ["code", "code code page"],
                       "keywords": ["python"]},
                      {"name": "ui", "examples": ["page"], "keywords": ["css"]},
                      {"name": "chat", "examples": ["hello"]}]},
        timeouts={"embedding": 0.3, "classifier": 2.0}, **kw)
    return cfg


async def _ask(http: aiohttp.ClientSession, url: str, text: str,
               **extra: Any) -> tuple[str, str | None]:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}], **extra}
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["x-mol-expert"], resp.headers.get("x-mol-route")


async def test_embeddings_are_asked_as_base64_and_read_either_way() -> None:
    """The router asks for base64 float32; the same vectors come out of a base64 answer
    and of a server that ignores the field and answers floats. Bytes that are not
    float32 are an ``invalid`` answer (the turn falls back), never a crash."""
    async with fake_embeddings() as fake, aiohttp.ClientSession() as http:
        url = embeddings_url(fake.url)
        as_floats = await post_embeddings(http, url, "mini", ["code page", "hello"], 5.0)
        fake.base64 = "float32"
        as_base64 = await post_embeddings(http, url, "mini", ["code page", "hello"], 5.0)
        fake.base64 = "bad"
        with pytest.raises(EmbeddingError) as bad:
            await post_embeddings(http, url, "mini", ["code"], 5.0)
    assert fake.formats == ["base64"] * 3
    assert bad.value.reason == "invalid"
    for a, b in zip(as_floats, as_base64, strict=True):
        assert np.allclose(a, b, atol=1e-6)
    assert np.allclose(as_floats[0], scores.unit([1.01, 1.01, 0.01]))


async def test_semantic_decides_then_the_classifier_then_the_default(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with fake_embeddings() as fake, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(sims.urls, router_config, fake.url, "semantic-then-classifier")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_text("demo/router@v1", "ui", when_prompt_contains="layout")
            expert, route = await _ask(http, router.url, "review my code please")
            assert expert == "coding"
            assert route is not None
            assert route.startswith("semantic; score=")
            expert, route = await _ask(http, router.url, "page page")
            assert expert == "ui"
            assert (route or "").startswith("semantic; ")
            # No axis word: all experts tie, below the threshold: the classifier names ui.
            expert, route = await _ask(http, router.url, "a layout question")
            assert (expert, route) == ("ui", "classifier; semantic=below-threshold")
            # The classifier fails too: the default expert.
            sims.script_failure("demo/router@v1", status=500)
            assert await _ask(http, router.url, "another one") == (
                "chat", "default; semantic=below-threshold; classifier=no-answer")
            # A request naming its expert does not embed; x-mol-route says the request chose.
            calls = len(fake.inputs)
            async with http.post(router.url + "/v1/chat/completions", json={
                    "model": "ui", "messages": [{"role": "user", "content": "code"}]}) as resp:
                assert resp.headers["x-mol-route"] == "model"
            assert len(fake.inputs) == calls
            metrics = await (await http.get(router.url + "/metrics")).text()
    assert fake.inputs[0] == ["code", "code code page", "page", "hello"]  # once per config
    assert ('mol_router_route_decisions_total{deployment="demo",expert="coding",'
            'mode="semantic-then-classifier",signal="semantic"} 1.0') in metrics
    assert ('mol_router_route_decisions_total{deployment="demo",expert="ui",'
            'mode="semantic-then-classifier",signal="semantic"} 1.0') in metrics
    assert ('mol_router_route_decisions_total{deployment="demo",expert="ui",'
            'mode="semantic-then-classifier",signal="classifier"} 1.0') in metrics
    assert ('mol_router_route_decisions_total{deployment="demo",expert="chat",'
            'mode="semantic-then-classifier",signal="default"} 1.0') in metrics


async def test_keywords_of_one_expert_decide_without_an_embedding_call(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with fake_embeddings() as fake, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(sims.urls, router_config, fake.url, "semantic", keywords_decide=True)
        assert cfg.semantic is not None
        assert cfg.semantic.keywords_decide
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            expert, route = await _ask(http, router.url, "code")  # no keyword: embedded
            assert (expert, (route or "").split(";")[0]) == ("coding", "semantic")
            examples_and_first = len(fake.inputs)
            assert fake.inputs[-1] == ["code"]
            assert await _ask(http, router.url, "my Python script") == (
                "coding", "keywords; score=0.100; margin=0.100")
            assert len(fake.inputs) == examples_and_first  # no call for it
            # keywords of two experts: the embedding decides
            expert, route = await _ask(http, router.url, "python css page page")
            assert (expert, (route or "").split(";")[0]) == ("ui", "semantic")
            assert fake.inputs[-1] == ["python css page page"]
            metrics = await (await http.get(router.url + "/metrics")).text()
    assert ('mol_router_route_decisions_total{deployment="demo",expert="coding",'
            'mode="semantic",signal="keywords"} 1.0') in metrics


async def test_an_engine_answering_another_size_falls_back_then_rebuilds(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with fake_embeddings() as fake, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(sims.urls, router_config, fake.url, "semantic")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            assert (await _ask(http, router.url, "code"))[0] == "coding"
            fake.extra_dims = 2  # the engine now serves a model of 5 dimensions
            assert await _ask(http, router.url, "my python page") == (
                "coding", "keywords; score=0.100; margin=0.100; embedding=invalid")
            # the examples are embedded again with the new model, then it decides again
            expert, route = await _ask(http, router.url, "page page")
    assert (expert, (route or "").split(";")[0]) == ("ui", "semantic")
    assert sum(len(batch) > 1 for batch in fake.inputs) == 2


@pytest.mark.parametrize(("fail", "reason"), [("status", "status"), ("hang", "timeout")])
async def test_embedding_failure_falls_back_to_keywords_then_default(
        fail: str, reason: str, router_config: Any, start_router: Any, ready: Any) -> None:
    async with fake_embeddings() as fake, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        fake.fail = fail
        cfg = _config(sims.urls, router_config, fake.url, "semantic")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            started = asyncio.get_running_loop().time()
            assert await _ask(http, router.url, "my Python script") == (
                "coding", f"keywords; score=0.100; margin=0.100; embedding={reason}")
            assert await _ask(http, router.url, "no keyword here") == (
                "chat", f"default; embedding={reason}; semantic=no-embedding")
            assert asyncio.get_running_loop().time() - started < 2.0  # bounded by the timeout
            fake.fail = None  # it recovers: the examples are embedded again (a hung call
            # first runs out its own, longer bound in the background)
            asked = 2
            while (await _ask(http, router.url, "code"))[0] != "coding":
                asked += 1
                assert asyncio.get_running_loop().time() - started < 10.0
                await asyncio.sleep(0.2)
            metrics = await (await http.get(router.url + "/metrics")).text()
        # semantic mode never asks the classifier
        assert len(sims.state(0).received) == asked + 1
    errors = f'mol_router_embedding_errors_total{{deployment="demo",reason="{reason}"}} '
    line = next(x for x in metrics.splitlines() if x.startswith(errors))
    assert float(line.split()[-1]) == asked


async def test_slow_examples_are_embedded_in_the_background(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Embedding the examples may take longer than one turn may wait (tens of examples
    on a CPU engine): the call starts when the config applies, before any request, and
    ``/readyz`` says where it is; requests meanwhile fall back within the per-turn bound,
    and once it is done turns are decided semantically."""
    async with fake_embeddings() as fake, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        fake.delay_examples = 3.0  # > timeouts.embedding (0.3 s)
        cfg = _config(sims.urls, router_config, fake.url, "semantic")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            async with http.get(router.url + "/readyz") as resp:
                assert (await resp.json())["semantic"] == "building"
            assert [len(batch) for batch in fake.inputs] == [4]  # asked before any request
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await _ask(http, router.url, "code") == (
                "chat", "default; embedding=timeout; semantic=no-embedding")
            assert loop.time() - started < 0.9  # did not wait for the examples
            states = []
            while loop.time() - started < 10:
                async with http.get(router.url + "/readyz") as resp:
                    states.append((await resp.json())["semantic"])
                if states[-1] != "building":
                    break
                await asyncio.sleep(0.1)
            assert states[-1] == "ready", states
            expert, route = await _ask(http, router.url, "code")
    assert expert == "coding"
    assert route is not None
    assert route.startswith("semantic")
    assert sum(len(batch) > 1 for batch in fake.inputs) == 1  # the examples, once


async def test_cache_and_bounded_input(router_config: Any, start_router: Any,
                                       ready: Any) -> None:
    async with fake_embeddings() as fake, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(sims.urls, router_config, fake.url, "semantic")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            for _ in range(3):
                assert (await _ask(http, router.url, "hello there"))[0] == "chat"
            long_turn = "x" * 500 + " page"
            assert (await _ask(http, router.url, long_turn))[0] == "ui"
            # Only the latest user turn counts, not the history before it.
            history = [{"role": "user", "content": "code code code"},
                       {"role": "assistant", "content": "ok"},
                       {"role": "user", "content": "hello"}]
            async with http.post(router.url + "/v1/chat/completions",
                                 json={"model": "auto", "messages": history}) as resp:
                assert resp.headers["x-mol-expert"] == "chat"
    queries = fake.inputs[1:]
    assert len(queries) == 3  # the repeats of "hello there" hit the cache
    assert queries[0] == ["hello there"]
    assert queries[1] == [long_turn[-64:]]
    assert queries[2] == ["hello"]


async def test_explain_scores_a_turn_without_an_llm_engine(router_config: Any) -> None:
    from mol_router.auto.explain import explain
    from mol_router.cli import report_text

    async with fake_embeddings() as fake:
        cfg = _config(["http://127.0.0.1:9"], router_config, fake.url,
                      "semantic-then-classifier")
        decided = await explain(cfg, "my python code")
        undecided = await explain(cfg, "something else")
        fake.fail = "status"
        failed = await explain(cfg.model_copy(update={"mode": "semantic"}), "css please")
    assert decided["expert"] == "coding"
    assert str(decided["route"]).startswith("semantic; score=")
    scores = decided["scores"]
    assert isinstance(scores, list)
    assert scores[0]["expert"] == "coding"
    assert scores[0]["keywords"] == 1
    assert (undecided["expert"], undecided["route"]) == (
        "classifier?", "classifier; semantic=below-threshold")
    assert (failed["expert"], failed["route"]) == (
        "ui", "keywords; score=0.100; margin=0.100; embedding=status")
    text = report_text(decided)
    assert text.splitlines()[0].split() == ["expert", "score", "nearest", "centroid", "keywords"]
    assert text.splitlines()[-1].startswith("decision: coding (semantic; score=")
