"""Routing feedback on both backends: decision batches recorded once, scopes per
namespace, labels (404 for an unknown id, relabelling), the export that ``mol router
train --prompts`` reads, its filters, bad input and retention pruning by gc; a canary
head's candidate picks, the per-head accuracy on labelled decisions and the labels
counter."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from mol_router.auto.heads.train import load_labelled

ADMIN = "mol_" + "r" * 43
LABELS = "/v1/namespaces/{ns}/routing/labels"


def decision(request_id: str, ns: str = "acme", *, text: str = "fix my python loop",
             expert: str = "code", deployment: str = "chat", when: datetime | None = None,
             **extra: Any) -> dict[str, Any]:
    return {"request_id": request_id, "namespace": ns, "deployment": deployment,
            "text": text, "expert": expert, "route": "head",
            "head": "sha256:" + "ab" * 32,
            "at": (when or datetime.now(UTC)).isoformat(), **extra}


def batch(*decisions: dict[str, Any], batch_id: str | None = None) -> dict[str, Any]:
    return {"batch_id": batch_id or uuid.uuid4().hex, "decisions": list(decisions)}


async def label(client: httpx.AsyncClient, request_id: str, expert: str, ns: str = "acme",
                **body: Any) -> httpx.Response:
    return await client.put(f"{LABELS.format(ns=ns)}/{request_id}",
                            json={"expert": expert, **body})


def export_rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


async def test_batches_record_once_and_labels_export(client: httpx.AsyncClient,
                                                     tmp_path: Path) -> None:
    body = batch(decision("r-1", text="write a sonnet \u2028 about rain", expert="code"),
                 decision("r-2", text="what is 2+2?", expert="math", deployment="other"),
                 decision("r-1", text="a second report of r-1"),  # the first one wins
                 decision("r-1", ns="globex"))  # the same id in another namespace
    first = await client.post("/v1/routing/decisions", json=body)
    assert first.status_code == 200, first.text
    assert first.json() == {"batch_id": body["batch_id"], "duplicate": False, "recorded": 3}
    again = await client.post("/v1/routing/decisions", json=body)  # a retry
    assert again.json() == {"batch_id": body["batch_id"], "duplicate": True, "recorded": 0}
    other = await client.post("/v1/routing/decisions",
                              json=batch(decision("r-1", text="reported again")))
    assert other.json()["recorded"] == 0  # a request id keeps its first record

    shown = await client.get("/v1/namespaces/acme/routing/decisions/r-1")
    assert shown.status_code == 200, shown.text
    assert shown.json()["text"] == "write a sonnet \u2028 about rain"
    assert shown.json()["label"] is None
    assert shown.json()["route"] == "head"

    r = await label(client, "r-1", "creative", source="user", note="a poem, not code")
    assert r.status_code == 200, r.text
    out = r.json()
    assert {k: out[k] for k in ("request_id", "namespace", "deployment", "routed", "expert",
                                "source", "note")} == {
        "request_id": "r-1", "namespace": "acme", "deployment": "chat", "routed": "code",
        "expert": "creative", "source": "user", "note": "a poem, not code"}
    assert datetime.fromisoformat(out["labelled_at"]) <= datetime.now(UTC)
    assert (await label(client, "r-2", "math")).status_code == 200
    relabel = await label(client, "r-1", "writing")  # overwrites, source back to reviewer
    assert (relabel.json()["expert"], relabel.json()["source"], relabel.json()["note"]) == (
        "writing", "reviewer", None)
    shown = (await client.get("/v1/namespaces/acme/routing/decisions/r-1")).json()
    assert shown["label"]["expert"] == "writing"

    r = await client.get(LABELS.format(ns="acme"))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert r.text.isascii()  # U+2028 escaped: splitlines() would cut the line there
    rows = export_rows(r.text)
    assert rows == [  # labelled order: r-2 first, r-1 was labelled again after it
        {"id": "r-2", "text": "what is 2+2?", "expert": "math", "routed": "math",
         "deployment": "other", "source": "reviewer"},
        {"id": "r-1", "text": "write a sonnet \u2028 about rain", "expert": "writing",
         "routed": "code", "deployment": "chat", "source": "reviewer"}]
    path = tmp_path / "labels.jsonl"
    path.write_text(r.text, encoding="utf-8")
    loaded = load_labelled(path)
    assert [(x.id, x.text, x.expert) for x in loaded] == [
        ("r-2", "what is 2+2?", "math"), ("r-1", "write a sonnet \u2028 about rain", "writing")]

    # Filters: the deployment, and labels given since a time.
    r = await client.get(LABELS.format(ns="acme"), params={"deployment": "chat"})
    assert [x["id"] for x in export_rows(r.text)] == ["r-1"]
    between = relabel.json()["labelled_at"]
    r = await client.get(LABELS.format(ns="acme"), params={"since": between})
    assert [x["id"] for x in export_rows(r.text)] == ["r-1"]
    naive = datetime.fromisoformat(between).astimezone(UTC).replace(tzinfo=None)
    r = await client.get(LABELS.format(ns="acme"),
                         params={"since": (naive + timedelta(seconds=1)).isoformat()})
    assert r.status_code == 200
    assert r.text == ""
    r = await client.get(LABELS.format(ns="acme"), params={"since": "0001-01-01T00:00:00+05:00"})
    assert len(export_rows(r.text)) == 2  # before the calendar: everything
    assert (await client.get(LABELS.format(ns="globex"))).text == ""  # nothing labelled there


async def test_export_pages_through_many_labels(client: httpx.AsyncClient,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from mol_catalog.routing import service

    monkeypatch.setattr(service, "EXPORT_PAGE", 3)
    ids = [f"req-{i:02d}" for i in range(8)]
    r = await client.post("/v1/routing/decisions", json=batch(*(decision(i) for i in ids)))
    assert r.json()["recorded"] == 8
    for i in ids:
        assert (await label(client, i, "code")).status_code == 200
    r = await client.get(LABELS.format(ns="acme"))
    assert [x["id"] for x in export_rows(r.text)] == ids  # each once, in order


async def test_scopes(make_client: Any) -> None:
    admin = await make_client(auth="on", admin_token=ADMIN)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    tokens = {}
    for name, scopes in (("router", ["usage:acme"]), ("any-router", ["usage"]),
                         ("reader", ["read:acme"]), ("publisher", ["publish:acme"]),
                         ("other", ["publish:globex", "read:globex"]),
                         ("reader-all", ["read"])):
        r = await admin.post("/v1/tokens", json={"name": name, "scopes": scopes})
        assert r.status_code == 201, r.text
        tokens[name] = {"Authorization": f"Bearer {r.json()['token']}"}
    ok = batch(decision("r-1"))
    for who in ("reader", "publisher", "other"):
        r = await admin.post("/v1/routing/decisions", json=ok, headers=tokens[who])
        assert r.status_code == 403, who
        assert "usage:acme" in r.json()["detail"]
    mixed = batch(decision("r-9"), decision("r-9", ns="globex"))
    r = await admin.post("/v1/routing/decisions", json=mixed, headers=tokens["router"])
    assert r.status_code == 403  # the whole batch, not the acme half
    assert "globex" in r.json()["detail"]
    r = await admin.post("/v1/routing/decisions", json=ok, headers=tokens["router"])
    assert r.status_code == 200
    assert r.json()["recorded"] == 1
    r = await admin.post("/v1/routing/decisions", json=batch(decision("r-2", ns="globex")),
                         headers=tokens["any-router"])
    assert r.status_code == 200
    assert r.json()["recorded"] == 1
    assert (await admin.get("/v1/namespaces/acme/routing/decisions/r-9")).status_code == 404

    # Labelling: publish on the namespace (or admin); another namespace's token cannot.
    for who in ("router", "any-router", "reader", "other", "reader-all"):
        r = await admin.put(f"{LABELS.format(ns='acme')}/r-1", json={"expert": "x"},
                            headers=tokens[who])
        assert r.status_code == 403, who
        assert "publish:acme" in r.json()["detail"]
    r = await admin.put(f"{LABELS.format(ns='acme')}/r-1", json={"expert": "math"},
                        headers=tokens["publisher"])
    assert r.status_code == 200, r.text
    r = await admin.put(f"{LABELS.format(ns='globex')}/r-2", json={"expert": "math"},
                        headers=tokens["other"])
    assert r.status_code == 200
    # ... and it labels only its own namespace's decisions: r-1 of acme is not globex's.
    r = await admin.put(f"{LABELS.format(ns='globex')}/r-1", json={"expert": "math"},
                        headers=tokens["other"])
    assert r.status_code == 404

    # Reading: read:<ns>, publish:<ns>, read or admin; never another namespace's token.
    for who in ("reader", "publisher", "reader-all"):
        r = await admin.get(LABELS.format(ns="acme"), headers=tokens[who])
        assert r.status_code == 200, who
        assert [x["id"] for x in export_rows(r.text)] == ["r-1"]
        r = await admin.get("/v1/namespaces/acme/routing/decisions/r-1", headers=tokens[who])
        assert r.status_code == 200
    for who in ("other", "router", "any-router"):
        r = await admin.get(LABELS.format(ns="acme"), headers=tokens[who])
        assert r.status_code == 403, who
        assert "read:acme" in r.json()["detail"]
        r = await admin.get("/v1/namespaces/acme/routing/decisions/r-1", headers=tokens[who])
        assert r.status_code == 403
    unknown = {"Authorization": "Bearer mol_" + "z" * 43}
    assert (await admin.get(LABELS.format(ns="acme"), headers=unknown)).status_code == 401


async def test_label_of_an_unknown_request_id_is_404(client: httpx.AsyncClient) -> None:
    r = await label(client, "never-seen", "code")
    assert r.status_code == 404
    assert "never-seen" in r.json()["detail"]
    assert "namespace 'acme'" in r.json()["detail"]
    r = await client.get("/v1/namespaces/acme/routing/decisions/never-seen")
    assert r.status_code == 404


@pytest.mark.parametrize(("change", "where"), [
    ({"request_id": "r-1\n"}, "request_id"),  # a trailing newline
    ({"request_id": "r 1"}, "request_id"),
    ({"request_id": "x" * 129}, "request_id"),
    ({"text": "x" * 4001}, "text"),
    ({"text": ""}, "text"),
    ({"text": "  \n "}, "text"),
    ({"text": "a\x00b"}, "text"),  # Postgres cannot store NUL
    ({"expert": "Code"}, "expert"),
    ({"expert": "code\n"}, "expert"),
    ({"expert": "-code"}, "expert"),
    ({"namespace": "a..b"}, "namespace"),
    ({"deployment": "chat_1"}, "deployment"),
    ({"route": "guess"}, "route"),
    ({"head": "sha256:abc"}, "head"),
    ({"at": "2026-01-01T00:00:00"}, "at"),  # no zone
    ({"at": "9999-12-31T23:59:59-23:59"}, "at"),  # past the calendar in UTC
    ({"extra": 1}, "extra"),
])
async def test_bad_decisions_are_422(client: httpx.AsyncClient, change: dict[str, Any],
                                     where: str) -> None:
    r = await client.post("/v1/routing/decisions", json=batch({**decision("r-1"), **change}))
    assert r.status_code == 422, r.text
    assert where in r.text
    assert (await client.get("/v1/namespaces/acme/routing/decisions/r-1")).status_code == 404


async def test_bad_batches_labels_and_queries(client: httpx.AsyncClient) -> None:
    post = "/v1/routing/decisions"
    assert (await client.post(post, json={"batch_id": "short", "decisions": [
        decision("r-1")]})).status_code == 422
    assert (await client.post(post, json=batch())).status_code == 422  # no decisions
    assert (await client.post(post, json=batch(*(decision(f"r{i}") for i in range(501))))
            ).status_code == 422
    assert (await client.post(post, json=batch(decision("r-1")))).status_code == 200
    for body in ({"expert": "Bad"}, {"expert": "code", "source": "robot"},
                 {"expert": "code", "note": "n" * 501}, {"expert": "code", "note": "\x00"},
                 {}, {"expert": "code", "extra": True}):
        r = await client.put(f"{LABELS.format(ns='acme')}/r-1", json=body)
        assert r.status_code == 422, body
    r = await client.put(f"{LABELS.format(ns='acme')}/r-1%0A", json={"expert": "code"})
    assert r.status_code == 422  # a trailing newline in the path's request id
    assert (await client.put(f"{LABELS.format(ns='a..b')}/r-1", json={"expert": "code"})
            ).status_code == 400
    assert (await client.get(LABELS.format(ns="acme"), params={"since": "yesterday"})
            ).status_code == 422
    r = await client.get(LABELS.format(ns="acme"), params={"deployment": "Chat"})
    assert r.status_code == 400
    assert "deployment" in r.json()["detail"]
    assert (await client.get(LABELS.format(ns="acme"), params={"deployment": "c" * 64})
            ).status_code == 422


async def test_retention_pruned_by_gc_labelled_kept(make_client: Any) -> None:
    client = await make_client(usage_retention_days=30)
    old = datetime.now(UTC) - timedelta(days=40)
    r = await client.post("/v1/routing/decisions", json=batch(
        decision("old-unlabelled", when=old), decision("old-labelled", when=old),
        decision("new")))
    assert r.json()["recorded"] == 3
    assert (await label(client, "old-labelled", "math")).status_code == 200
    gc = await client.post("/v1/admin/gc")
    assert gc.status_code == 200, gc.text
    assert gc.json()["routing_decisions_pruned"] == 1
    assert gc.json()["routing_batches_pruned"] == 0  # batch ids live two days
    base = "/v1/namespaces/acme/routing/decisions"
    assert (await client.get(f"{base}/old-unlabelled")).status_code == 404
    assert (await client.get(f"{base}/old-labelled")).status_code == 200
    assert (await client.get(f"{base}/new")).status_code == 200
    assert (await client.post("/v1/admin/gc")).json()["routing_decisions_pruned"] == 0


def _head(seed: int) -> bytes:
    from mol_router.auto.heads.model import Head

    rng = np.random.default_rng(seed)
    return Head(("code", "math"), rng.normal(size=(2, 4)), rng.normal(size=2), 1.0, 0.5,
                "minilm").dumps()


def _labels_counted(text: str) -> dict[tuple[str, str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.labels["head"], s.labels["expert"], s.labels["result"]):
            s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "mol_catalog_routing_labels_total" and s.value}


async def test_accuracy_per_head_and_expert_and_the_labels_counter(
        client: httpx.AsyncClient) -> None:
    published = await client.post("/v1/namespaces/acme/router-heads/chat/versions",
                                  content=_head(1))
    assert published.status_code == 201, published.text
    serving = published.json()["digest"]
    canary = "sha256:" + "cd" * 32  # never published: named by its first 12 hex digits
    # a published head's series exist from 0, so increase() counts its first label
    assert ('mol_catalog_routing_labels_total{expert="math",head="acme/chat@v1",'
            'result="wrong"} 0.0') in (await client.get("/metrics")).text

    def pick(head: str, expert: str) -> dict[str, str]:
        return {"head": head, "expert": expert}

    r = await client.post("/v1/routing/decisions", json=batch(
        decision("r-1", head=serving, candidate=pick(canary, "math")),
        decision("r-2", head=serving, route="keywords", expert="math"),
        decision("r-3", route="semantic", head=None),
        decision("r-4", head=canary, candidate=pick(serving, "math")),
        decision("r-5", head=serving, deployment="other"),
        decision("r-6", head=serving, route="default"),  # the head did not pick
        decision("r-7", ns="globex", head=serving),
        decision("r-8", head=serving)))  # never labelled
    assert r.json()["recorded"] == 8
    shown = (await client.get("/v1/namespaces/acme/routing/decisions/r-1")).json()
    assert shown["candidate"] == pick(canary, "math")
    assert (await client.get("/v1/namespaces/acme/routing/decisions/r-2")).json()[
        "candidate"] is None
    for rid, right in (("r-1", "code"), ("r-2", "code"), ("r-3", "math"), ("r-4", "code"),
                       ("r-5", "math"), ("r-6", "math")):
        assert (await label(client, rid, right)).status_code == 200
    assert (await label(client, "r-7", "code", ns="globex")).status_code == 200

    url = "/v1/namespaces/acme/routing/accuracy"
    r = await client.get(url)
    assert r.status_code == 200, r.text
    assert r.json() == {"namespace": "acme", "heads": [
        {"head": serving, "ref": "acme/chat@v1", "labelled": 4, "correct": 1,
         "experts": {"code": {"labelled": 3, "correct": 1},  # r-1 right, r-2 and r-4 wrong
                     "math": {"labelled": 1, "correct": 0}}},  # r-5
        {"head": canary, "ref": None, "labelled": 2, "correct": 1,
         "experts": {"code": {"labelled": 2, "correct": 1}}}]}  # r-1 wrong, r-4 right
    r = await client.get(url, params={"deployment": "other"})
    assert r.json()["heads"] == [{"head": serving, "ref": "acme/chat@v1", "labelled": 1,
                                  "correct": 0, "experts": {"math": {"labelled": 1,
                                                                     "correct": 0}}}]
    r = await client.get(url, params={"since": "9999-01-01T00:00:00Z"})
    assert r.json() == {"namespace": "acme", "heads": []}
    assert (await client.get(url, params={"deployment": "Bad"})).status_code == 400
    assert (await client.get(url, params={"since": "soon"})).status_code == 422
    globex = (await client.get("/v1/namespaces/globex/routing/accuracy")).json()["heads"]
    assert [(h["head"], h["ref"], h["labelled"]) for h in globex] == [(serving, None, 1)]

    counted = _labels_counted((await client.get("/metrics")).text)
    short = canary[7:19]
    assert counted == {
        ("acme/chat@v1", "code", "correct"): 1.0, ("acme/chat@v1", "code", "wrong"): 2.0,
        ("acme/chat@v1", "math", "wrong"): 1.0, (f"acme/{short}", "code", "wrong"): 1.0,
        (f"acme/{short}", "code", "correct"): 1.0,
        (f"globex/{serving[7:19]}", "code", "correct"): 1.0}
    assert (await label(client, "r-1", "code")).status_code == 200  # an identical re-PUT
    assert (await label(client, "r-2", "math")).status_code == 200  # a relabel
    assert _labels_counted((await client.get("/metrics")).text) == counted
    r = await client.get(url)  # ... which the accuracy reads as it is now
    assert r.json()["heads"][0]["experts"]["math"] == {"labelled": 2, "correct": 1}


async def test_candidates_are_checked_and_old_batches_stay_valid(
        client: httpx.AsyncClient) -> None:
    head = "sha256:" + "ab" * 32
    for candidate in ({"head": "sha256:abc", "expert": "math"},
                      {"head": head, "expert": "Math"}, {"head": head},
                      {"head": head, "expert": "math", "extra": 1}, "math"):
        r = await client.post("/v1/routing/decisions",
                              json=batch(decision("r-1", candidate=candidate)))
        assert r.status_code == 422, candidate
        assert "candidate" in r.text
    old = decision("r-1")  # a router without a canary: no candidate key at all
    assert "candidate" not in old
    r = await client.post("/v1/routing/decisions", json=batch(old, decision(
        "r-2", candidate=None)))
    assert r.json()["recorded"] == 2


async def test_accuracy_needs_read_scope(make_client: Any) -> None:
    admin = await make_client(auth="on", admin_token=ADMIN)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    tokens = {}
    for name, scopes in (("reader", ["read:acme"]), ("other", ["read:globex"]),
                         ("router", ["usage:acme"])):
        r = await admin.post("/v1/tokens", json={"name": name, "scopes": scopes})
        tokens[name] = {"Authorization": f"Bearer {r.json()['token']}"}
    url = "/v1/namespaces/acme/routing/accuracy"
    assert (await admin.get(url, headers=tokens["reader"])).status_code == 200
    for who in ("other", "router"):
        r = await admin.get(url, headers=tokens[who])
        assert r.status_code == 403, who
        assert "read:acme" in r.json()["detail"]
