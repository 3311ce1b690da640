"""A trained head in the router (``semantic.headFile``) and ``mol router train``, against a
scripted ``/v1/embeddings`` server on loopback whose vectors a test can predict: the
head decides ``model: auto`` turns, its measured keywords come first, a turn below its
confidence goes to the default expert and ``x-mol-route`` says so; a head that does
not fit the config is refused; the CLI embeds, cross-validates and writes the file."""

from __future__ import annotations

import asyncio
import json
import sys
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from mol_platform.contract.router_config import RouterConfig
from mol_router.auto.heads import model as head_mod
from mol_router.auto.heads.train import DEFAULT_NGRAMS, Labelled, fit_head
from mol_router.runtime import Runtime
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
AXES = ("code", "page", "hello", "trip")  # one axis a word
EXPERTS = {"code": "coding", "page": "ui", "hello": "chat", "trip": "agent"}
FILLER = ("please", "now", "my", "the", "a", "quick", "small", "big")


def fake_vector(text: str) -> list[float]:
    """Axis-word counts plus a small deterministic wobble per text (its crc32)."""
    words = text.lower().split()
    wobble = np.random.default_rng(zlib.crc32(text.encode())).normal(scale=0.2,
                                                                     size=len(AXES))
    return [words.count(w) + 0.1 + float(d) for w, d in zip(AXES, wobble, strict=True)]


class FakeEmbeddings:
    def __init__(self) -> None:
        self.inputs: list[list[str]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        assert body["model"] == "mini"
        self.inputs.append(body["input"])
        return web.json_response({"data": [{"index": i, "embedding": fake_vector(t)}
                                           for i, t in enumerate(body["input"])]})


@asynccontextmanager
async def fake_embeddings() -> AsyncIterator[FakeEmbeddings]:
    fake = FakeEmbeddings()
    app = web.Application()
    app.router.add_post("/v1/embeddings", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    try:
        yield fake
    finally:
        await runner.cleanup()


def labelled() -> list[Labelled]:
    """40 prompts: each expert's axis word among filler (three with a second expert's
    word too); the agent's hold 'booking'."""
    rows = []
    for axis, expert in EXPERTS.items():
        for i in range(10):
            words = [FILLER[(i + j) % len(FILLER)] for j in range(3)]
            words.insert(i % 4, axis)
            if i >= 7:  # borderline: another expert's word too (the data is not separable)
                words.append(AXES[(AXES.index(axis) + i) % len(AXES)])
            if expert == "agent":
                words.append("booking")
            rows.append(Labelled(" ".join(words), expert))
    return rows


def write_head(path: Path, *, threshold: float = 0.6, model: str = "mini",
               keywords: dict[str, list[str]] | None = None) -> head_mod.Head:
    rows = labelled()
    vectors = np.stack([np.asarray(fake_vector(r.text)) for r in rows])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    head, _ = fit_head(vectors, rows, model, threshold=threshold,
                       keywords=keywords or {"agent": ["booking"], "chat": ["please"]})
    path.write_bytes(head.dumps())
    return head


def _config(urls: list[str], router_config: Any, embeddings: str, head: Path,
            **semantic: Any) -> RouterConfig:
    cfg: RouterConfig = router_config(
        urls, mode="semantic", default="chat",
        experts=[{"name": n, "adapter": f"demo/{n}@v1"} for n in EXPERTS.values()],
        semantic={"embeddingsUrl": embeddings, "model": "mini", "headFile": str(head),
                  **semantic},
        timeouts={"embedding": 2.0})
    return cfg


async def _ask(http: aiohttp.ClientSession, url: str, text: str) -> tuple[str, str]:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["x-mol-expert"], resp.headers["x-mol-route"]


async def test_the_head_decides_keywords_first_and_low_confidence_goes_to_default(
        tmp_path: Path, router_config: Any, start_router: Any, ready: Any) -> None:
    head = write_head(tmp_path / "head.json")
    assert head.keywords == {"agent": ("booking",)}  # 'please' is in every expert's
    async with fake_embeddings() as fake, AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(sims.urls, router_config, fake.url, tmp_path / "head.json")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            expert, route = await _ask(http, router.url, "fix the code now")
            assert expert == "coding"
            score = float(route.split("score=")[1].split(";")[0])
            # a trained head's pick is named as such, with the head (its file here)
            assert route.startswith("head; head=head.json; score=")
            assert score >= 0.6
            assert (await _ask(http, router.url, "a page please"))[0] == "ui"
            calls = len(fake.inputs)
            assert await _ask(http, router.url, "booking for two") == (
                "agent", "keywords; head=head.json; score=0.100; margin=0.100")
            assert len(fake.inputs) == calls  # the keyword settled it: no embedding call
            # a word of every expert: none reaches the head's confidence
            assert await _ask(http, router.url, "code page hello trip") == (
                "chat", "default; semantic=below-confidence")
            metrics = await (await http.get(router.url + "/metrics")).text()
    assert all(len(batch) == 1 for batch in fake.inputs)  # no examples were embedded
    assert ('mol_router_route_decisions_total{deployment="demo",expert="chat",'
            'mode="semantic",signal="default"} 1.0') in metrics


async def test_a_head_that_does_not_fit_the_config_is_refused(
        tmp_path: Path, router_config: Any) -> None:
    write_head(tmp_path / "other-model.json", model="another-model")
    cfg = _config(["http://127.0.0.1:1"], router_config, "http://127.0.0.1:1/v1",
                  tmp_path / "other-model.json")
    from mol_router.settings import RouterSettings
    runtime = Runtime(RouterSettings(config=tmp_path / "unused.yaml"), cfg)
    with pytest.raises(ValueError, match="trained on embedding model 'another-model'"):
        await runtime.apply(cfg, first=True)
    narrow = cfg.model_copy(update={"experts": cfg.experts[:2], "default": "coding"})
    write_head(tmp_path / "head.json")
    narrow = narrow.model_copy(update={"semantic": cfg.semantic.model_copy(  # type: ignore[union-attr]
        update={"head_file": str(tmp_path / "head.json")})})
    with pytest.raises(ValueError, match="experts the deployment lacks"):
        await runtime.apply(narrow, first=True)
    (tmp_path / "broken.json").write_text("{}")
    broken = cfg.model_copy(update={"semantic": cfg.semantic.model_copy(  # type: ignore[union-attr]
        update={"head_file": str(tmp_path / "broken.json")})})
    with pytest.raises(ValueError, match=r"broken\.json: not a router head"):
        await runtime.apply(broken, first=True)


async def test_mol_router_train_embeds_cross_validates_and_writes_the_head(
        tmp_path: Path) -> None:
    prompts = tmp_path / "labelled.jsonl"
    prompts.write_text("".join(json.dumps({"text": r.text, "expert": r.expert}) + "\n"
                               for r in labelled()))
    out = tmp_path / "head.json"
    async with fake_embeddings() as fake:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mol_platform", "router", "train", "--prompts",
            str(prompts), "--embeddings-url", fake.url, "--model", "mini",
            "--default", "chat", "--folds", "4", "-o", str(out), "--format", "json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, stderr.decode()
        bad = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mol_platform", "router", "train", "--prompts",
            str(prompts), "--embeddings-url", fake.url, "--model", "mini",
            "--default", "legal", "-o", str(tmp_path / "x.json"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, bad_err = await asyncio.wait_for(bad.communicate(), 60)
    report = json.loads(stdout)
    head = head_mod.load(out)
    assert report["digest"] == head.digest()
    assert report["crossValidation"]["folds"] == 4
    assert report["crossValidation"]["accuracy"] >= 0.75  # chance: 0.25
    assert head.training["crossValidation"] == report["crossValidation"]
    assert head.training["embeddingModel"] == "mini"
    assert head.training["dataDigest"].startswith("sha256:")
    assert head.ngrams == DEFAULT_NGRAMS  # the command line trains the default recipe
    assert sum(len(b) for b in fake.inputs) == 40  # every prompt once; the bad run none
    assert bad.returncode == 2
    assert "default expert 'legal' has no labelled prompts" in bad_err.decode()


async def test_explain_names_the_head_and_shows_only_what_a_head_computes(
        tmp_path: Path, router_config: Any) -> None:
    """A head has no example utterances: ``explain`` names it and gives each expert's
    probability and keyword hits, not nearest or centroid similarities of 0."""
    from mol_router.auto.explain import explain
    from mol_router.cli import report_text

    write_head(tmp_path / "head.json")
    async with fake_embeddings() as fake:
        cfg = _config(["http://127.0.0.1:9"], router_config, fake.url, tmp_path / "head.json")
        decided = await explain(cfg, "fix the code now")
        keyword = await explain(cfg, "booking for two")
    assert decided["expert"] == "coding"
    assert decided["head"] == "head.json"
    assert str(decided["route"]).startswith("head; head=head.json; score=")
    scores = decided["scores"]
    assert isinstance(scores, list)
    assert set(scores[0]) == {"expert", "probability", "keywords"}
    assert scores[0]["expert"] == "coding"
    assert sum(s["probability"] for s in scores) == pytest.approx(1.0)
    assert str(keyword["route"]).startswith("keywords; head=head.json; score=")
    lines = report_text(decided).splitlines()
    assert lines[0] == "head: head.json"
    assert lines[1].split() == ["expert", "probability", "keywords"]
    assert "nearest" not in report_text(decided)
    assert "centroid" not in report_text(decided)
    assert lines[-1].startswith("decision: coding (head; head=head.json; score=")


async def test_train_on_a_small_file_scales_the_folds_down_and_says_so(tmp_path: Path) -> None:
    """Five prompts per expert: nested 5-fold cross-validation needs seven, so the
    command trains with 3 folds, says why on its first line, and reports calibration."""
    rows = labelled()
    small = [r for e in EXPERTS.values() for r in [x for x in rows if x.expert == e][:5]]
    prompts = tmp_path / "small.jsonl"
    prompts.write_text("".join(json.dumps({"text": r.text, "expert": r.expert}) + "\n"
                               for r in small))
    async with fake_embeddings() as fake:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mol_platform", "router", "train", "--prompts",
            str(prompts), "--embeddings-url", fake.url, "--model", "mini",
            "-o", str(tmp_path / "head.json"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    text = stdout.decode()
    assert text.startswith("folds: 3, not 5: nested 5-fold cross-validation needs 7 "
                           "labelled prompts per expert"), text
    assert f"3-fold cross-validation on {len(small)} prompts" in text
    assert "calibration error (ECE, the head alone): " in text
    assert head_mod.load(tmp_path / "head.json").training["crossValidation"]["foldsAsked"] == 5
