"""Router heads on both backends: publish (versions, the idempotent retry, stored bytes
and digest), reads, aliases, events on the feed with the tenant filter, scopes, every
422 rule, 413, the client's calls and ``HeadRef``, and migration 0014's way down."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import BaseModel
from sqlalchemy import create_engine, inspect

from mol_catalog.app import create_app
from mol_catalog.db import downgrade, migrate, sync_url
from mol_catalog.settings import CatalogSettings
from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract import catalog_models as m
from mol_platform.contract.router_heads import (
    KIND,
    MAX_DOCUMENT_BYTES,
    HeadRef,
    document_digest,
)
from mol_router.auto.heads.model import Head, HeadError, Ngrams
from mol_router.auto.heads.model import loads as loads_head
from mol_router.auto.heads.model import parse as parse_head
from mol_router.auto.heads.source import from_file

ADMIN = "mol_" + "h" * 43
HEADS = "/v1/namespaces/{ns}/router-heads"


def head_doc(seed: int = 0, experts: tuple[str, ...] = ("code", "math"), dims: int = 4,
             ngrams: int = 0, also: tuple[int, ...] = ()) -> dict[str, Any]:
    """A head document as ``mol router train`` writes it (``Head.to_json``)."""
    rng = np.random.default_rng(seed)
    width = dims + ngrams * (1 + len(also))
    head = Head(experts, rng.normal(size=(len(experts), width)), rng.normal(size=len(experts)),
                1.0, 0.5, "minilm", {"code": ("python",)},
                {"dataDigest": "sha256:" + "d" * 64, "source": "labels.jsonl",
                 "crossValidation": {"accuracy": 0.9, "folds": 5}},
                Ngrams(3, ngrams, 1.0, also) if ngrams else None)
    return head.to_json()


def raw(doc: Any) -> bytes:
    return json.dumps(doc, indent=2).encode()  # not canonical: the catalog makes it so


def canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


async def publish(client: httpx.AsyncClient, body: bytes, ns: str = "acme",
                  name: str = "chat", headers: dict[str, str] | None = None) -> httpx.Response:
    return await client.post(f"{HEADS.format(ns=ns)}/{name}/versions", content=body,
                             headers={"Content-Type": "application/json", **(headers or {})})


async def test_publish_versions_retry_document_and_aliases(client: httpx.AsyncClient) -> None:
    doc = head_doc(ngrams=16)
    first = await publish(client, raw(doc))
    assert first.status_code == 201, first.text
    v1 = first.json()
    stored = canonical(doc)
    digest = "sha256:" + hashlib.sha256(stored).hexdigest()
    assert {k: v for k, v in v1.items() if k != "created_at"} == {
        "namespace": "acme", "name": "chat", "version": 1, "digest": digest,
        "experts": ["code", "math"], "embedding_model": "minilm", "dims": 4, "ngram_dims": 16,
        "data_digest": "sha256:" + "d" * 64, "source": "labels.jsonl",
        "cross_validation": {"accuracy": 0.9, "folds": 5}, "size_bytes": len(stored),
        "created_by": "anonymous"}
    assert parse_head(doc).digest() == digest  # the router's own digest of the file
    again = await publish(client, canonical(doc))  # the same document: a retry
    assert again.status_code == 200
    assert again.json() == v1
    second = await publish(client, raw(head_doc(seed=1)))
    assert second.status_code == 201
    assert (second.json()["version"], second.json()["ngram_dims"]) == (2, 0)
    grams = head_doc(seed=2, ngrams=16, also=(4, 5))  # 3-, 4- and 5-grams, 16 buckets each
    third = await publish(client, raw(grams), name="grams")
    assert third.status_code == 201, third.text
    assert (third.json()["dims"], third.json()["ngram_dims"]) == (4, 48)
    assert parse_head(grams).digest() == third.json()["digest"]

    listed = (await client.get(f"{HEADS.format(ns='acme')}/chat/versions")).json()["items"]
    assert [v["version"] for v in listed] == [2, 1]  # newest first
    one = await client.get(f"{HEADS.format(ns='acme')}/chat/versions/v1")
    assert one.json() == v1
    document = await client.get(f"{HEADS.format(ns='acme')}/chat/versions/1/document")
    assert document.status_code == 200
    assert document.content == stored  # exactly the stored bytes
    assert document.headers["content-type"] == "application/json"
    assert document.headers["etag"] == f'"{digest}"'

    base = f"{HEADS.format(ns='acme')}/chat/aliases"
    r = await client.put(f"{base}/stable", json={"version": 1})
    assert r.status_code == 200, r.text
    assert (r.json()["alias"], r.json()["version"], r.json()["previous"]) == ("stable", 1, None)
    r = await client.put(f"{base}/canary", json={"version": 2})
    assert r.json()["digest"] == second.json()["digest"]
    r = await client.get(f"{base}/stable")
    assert r.json() == {**v1, "alias": "stable"}
    r = await client.put(f"{base}/stable", json={"version": 2})
    assert r.json()["previous"] == 1
    assert (await client.get(f"{base}/stable")).json()["version"] == 2
    items = (await client.get(base)).json()["items"]
    assert [(a["alias"], a["version"]) for a in items] == [("canary", 2), ("stable", 2)]
    heads = (await client.get(HEADS.format(ns="acme"))).json()["items"]
    assert [(h["name"], h["latest_version"], h["aliases"], h["latest"]["version"])
            for h in heads] == [("chat", 2, {"canary": 2, "stable": 2}, 2), ("grams", 1, {}, 1)]
    r = await client.delete(f"{base}/canary")
    assert r.json() == {"namespace": "acme", "name": "chat", "alias": "canary", "version": 2}
    assert (await client.get(f"{base}/canary")).status_code == 404
    assert (await client.delete(f"{base}/canary")).status_code == 404

    # Not found: version, head, alias target; a bad version number is a 400/422.
    assert (await client.put(f"{base}/stable", json={"version": 9})).status_code == 404
    assert (await client.put(f"{base}/stable", json={"version": 0})).status_code == 422
    assert (await client.put(f"{base}/stable", json={"version": 2**31})).status_code == 422
    r = await client.get(f"{HEADS.format(ns='acme')}/chat/versions/3")
    assert r.status_code == 404
    assert "no version 3" in r.json()["detail"]
    r = await client.get(f"{HEADS.format(ns='acme')}/nope/versions/1/document")
    assert r.status_code == 404
    assert "no router head 'nope'" in r.json()["detail"]
    assert (await client.get(f"{HEADS.format(ns='acme')}/nope/versions")).status_code == 404
    assert (await client.get(f"{HEADS.format(ns='acme')}/chat/versions/03")).status_code == 400
    assert (await client.get(f"{HEADS.format(ns='acme')}/chat/aliases/latest")
            ).status_code == 400
    assert (await client.get(HEADS.format(ns="globex"))).json() == {"items": []}


async def test_events_feed_and_tenant_filter(make_client: Any) -> None:
    admin = await make_client(auth="on", admin_token=ADMIN)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    tokens = {}
    for name, scopes in (("acme", ["publish:acme"]), ("globex", ["publish:globex"]),
                         ("reader", ["read:acme"])):
        r = await admin.post("/v1/tokens", json={"name": name, "scopes": scopes})
        tokens[name] = {"Authorization": f"Bearer {r.json()['token']}"}
    start = (await admin.get("/v1/events")).json()["last"]
    assert (await publish(admin, raw(head_doc()), headers=tokens["acme"])).status_code == 201
    assert (await publish(admin, raw(head_doc(2)), ns="globex", headers=tokens["globex"])
            ).status_code == 201
    base = f"{HEADS.format(ns='acme')}/chat/aliases/stable"
    assert (await admin.put(base, json={"version": 1}, headers=tokens["acme"])).status_code == 200
    assert (await admin.put(base, json={"version": 1}, headers=tokens["acme"])).status_code == 200
    assert (await admin.delete(base, headers=tokens["acme"])).status_code == 200

    def seen(who: str) -> list[tuple[str, str, int, str | None]]:
        return [(e["type"], e["adapter"], e["version"], e["alias"]) for e in items[who]]

    items = {who: (await admin.get("/v1/events", params={"after": start},
                                   headers=tokens[who])).json()["items"]
             for who in ("acme", "globex", "reader")}
    acme = [("router_head.published", "acme/chat", 1, None),
            ("router_head.alias.set", "acme/chat", 1, "stable"),  # once: the second PUT
            ("router_head.alias.deleted", "acme/chat", 1, "stable")]  # changed nothing
    assert seen("acme") == acme
    assert seen("reader") == acme
    assert seen("globex") == [("router_head.published", "globex/chat", 1, None)]
    assert items["acme"][1]["data"]["previous"] is None
    assert items["acme"][0]["data"]["digest"].startswith("sha256:")

    # Scopes: publishing and aliases need publish:<ns>; reads read:<ns> (or publish).
    r = await publish(admin, raw(head_doc()), headers=tokens["globex"])
    assert r.status_code == 403
    assert "publish:acme" in r.json()["detail"]
    assert (await publish(admin, raw(head_doc()), headers=tokens["reader"])).status_code == 403
    assert (await admin.put(base, json={"version": 1}, headers=tokens["reader"])
            ).status_code == 403
    assert (await admin.delete(base, headers=tokens["globex"])).status_code == 403
    versions = f"{HEADS.format(ns='acme')}/chat/versions"
    assert (await admin.get(versions, headers=tokens["reader"])).status_code == 200
    assert (await admin.get(f"{versions}/1/document", headers=tokens["globex"])
            ).status_code == 403
    assert (await admin.get(HEADS.format(ns="acme"), headers=tokens["globex"])
            ).status_code == 403


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(doc))
    *parents, key = path.split(".")
    node = out
    for p in parents:
        node = node[p]
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return out


DELETE = object()
BASE = head_doc(ngrams=16)


BAD_DOCUMENTS = [
    (b"{not json", "not JSON"),
    (b"", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b'"a head"', "JSON object"),
    (raw(_set(BASE, "kind", "mol.router.head/v2")), "kind must be"),
    (raw(_set(BASE, "kind", DELETE)), "kind must be"),
    (raw(_set(BASE, "experts", ["code"])), "2 to 64"),
    (raw(_set(BASE, "experts", [f"e{i}" for i in range(65)])), "2 to 64"),
    (raw(_set(BASE, "experts", ["code", "code"])), "unique"),
    (raw(_set(BASE, "experts", ["code", "Math"])), "DNS label"),
    (raw(_set(BASE, "experts", ["code", "math\n"])), "DNS label"),
    (raw(_set(BASE, "experts", ["code", 7])), "DNS label"),
    (raw(_set(BASE, "embedding", "minilm")), "embedding must be an object"),
    (raw(_set(BASE, "embedding.model", "")), "embedding.model"),
    (raw(_set(BASE, "embedding.model", "m" * 254)), "embedding.model"),
    (raw(_set(BASE, "embedding.dims", 0)), "embedding.dims"),
    (raw(_set(BASE, "embedding.dims", 8193)), "embedding.dims"),
    (raw(_set(BASE, "embedding.dims", 4.0)), "embedding.dims"),
    (raw(_set(BASE, "embedding.dims", True)), "embedding.dims"),
    (raw(_set(BASE, "embedding.dims", 5)),
     "weights row 0 must hold 21 numbers (5 for the embedding and 16 for the n-grams), it "
     "holds 20"),
    (raw(_set(BASE, "ngrams", DELETE)), "weights row 0 must hold 4 numbers, it holds 20"),
    (raw(_set(BASE, "ngrams.dims", "16")), "ngrams.dims"),
    (raw(_set(BASE, "ngrams.dims", 8)), "ngrams.dims"),
    (raw(_set(BASE, "ngrams", [3, 16])), "ngrams must be an object"),
    (raw(_set(BASE, "ngrams.n", DELETE)), "ngrams.n"),
    (raw(_set(BASE, "ngrams.scale", 0)), "ngrams.scale"),
    (raw(_set(BASE, "ngrams.also", [3])), "ngrams.also"),  # n itself
    (raw(_set(BASE, "ngrams.also", [4, 4])), "ngrams.also"),
    (raw(_set(BASE, "ngrams.also", [7])), "ngrams.also"),
    (raw(_set(BASE, "ngrams.also", ["4"])), "ngrams.also"),
    (raw(_set(BASE, "ngrams.also", [4])), "weights row 0 must hold 36 numbers (4 for the "
     "embedding and 32 for the n-grams), it holds 20"),
    (raw(_set(_set(BASE, "ngrams.dims", 40000), "ngrams.also", [4])), "at most 65536"),
    (raw(_set(BASE, "weights", BASE["weights"][:1])), "weights must be 2 rows"),
    (raw(_set(BASE, "weights", [BASE["weights"][0], "x"])), "weights row 1"),
    (raw(_set(BASE, "weights", [BASE["weights"][0], [1.0] * 19 + ["1"]])), "finite number"),
    (raw(_set(BASE, "weights", [BASE["weights"][0], [1.0] * 19 + [True]])), "finite number"),
    (raw(_set(BASE, "bias", [0.5, 0.25])).replace(b"0.25", b"1e400"), "bias must be 2 finite"),
    (raw(_set(BASE, "bias", [0.1])), "bias must be 2"),
    (raw(_set(BASE, "bias", [0.1, None])), "bias must be 2"),
    (raw(_set(BASE, "temperature", 0)), "temperature"),
    (raw(_set(BASE, "threshold", 1.5)), "threshold"),
    (raw(_set(BASE, "keywords", {"art": ["paint"]})), "keywords"),
    (raw(_set(BASE, "training", [])), "training must be an object"),
    (raw(_set(BASE, "training.dataDigest", 3)), "training.dataDigest"),
    (raw(_set(BASE, "training.source", "s" * 2001)), "training.source"),
    (raw(_set(BASE, "training.crossValidation", "good")), "crossValidation"),
    (raw(_set(BASE, "training.source", "a\x00b")), "NUL"),
    (raw(BASE).replace(b'"bias": [', b'"bias": [NaN, ', 1), "NaN"),
    (raw(BASE).replace(b'"bias": [', b'"bias": [-Infinity, ', 1), "-Infinity"),
    (raw(_set(BASE, "training.deep", json.loads("[" * 40 + "]" * 40))), "nested"),
    (raw(_set(BASE, "embedding.dims", 4.5)), "embedding.dims must be an integer"),
    (raw(_set(BASE, "keywords.code", ["x"])), "keywords of 'code': at most 256, each 2 to 80"),
    (raw(_set(BASE, "keywords.code", ["w" * 81])), "each 2 to 80 characters"),
    (raw(_set(BASE, "keywords.code", [f"w{i}" for i in range(257)])), "at most 256"),
    (raw(_set(BASE, "embedding.model", "mini\x00lm")), "NUL"),
    (raw(_set(BASE, "training.prompts", 2**64)), "64-bit"),
    (raw(_set(BASE, "bias", [0.5, 2**64])), "bias must be 2 finite"),
]


@pytest.mark.parametrize(("body", "words"), BAD_DOCUMENTS)
async def test_every_bad_document_is_422(client: httpx.AsyncClient, body: bytes,
                                         words: str) -> None:
    r = await publish(client, body)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "InvalidRouterHead"
    assert words in r.json()["detail"]
    assert (await client.get(f"{HEADS.format(ns='acme')}/chat/versions")).status_code == 404


GOOD_DOCUMENTS = [
    raw(BASE),
    raw(head_doc()),
    raw(head_doc(ngrams=16, also=(4, 5))),
    raw(_set(BASE, "keywords", None)),
    raw(_set(BASE, "keywords", DELETE)),
    raw(_set(BASE, "keywords.code", ["ab", "w" * 80, *(f"w{i}" for i in range(254))])),
    raw(_set(BASE, "keywords.math", [])),
    raw(_set(BASE, "training", None)),
    raw(_set(BASE, "training", DELETE)),
    raw(_set(BASE, "training.prompts", 2**63 - 1)),
    raw(_set(BASE, "bias", [1, -2])),
    raw(_set(BASE, "ngrams.scale", 100)),
    raw(_set(BASE, "threshold", 0)),
    raw(_set(BASE, "embedding.model", "m" * 253)),
    raw(_set(BASE, "extra", {"kept": True})),
    raw(_set(BASE, "training.deep", json.loads("[" * 30 + "]" * 30))),
]


def _mutations(count: int) -> list[bytes]:
    """Seeded random edits of a good document: one field set to one of the values that
    break rules somewhere (wrong types, bounds, characters no backend stores)."""
    rng = np.random.default_rng(46)
    paths = ["kind", "experts", "embedding", "embedding.model", "embedding.dims", "weights",
             "bias", "temperature", "threshold", "keywords", "keywords.code", "keywords.math",
             "training", "training.source", "training.dataDigest", "training.crossValidation",
             "ngrams", "ngrams.n", "ngrams.dims", "ngrams.scale", "ngrams.also"]
    values: list[Any] = [None, DELETE, 0, 1, -1, 2, 3, 4, 16, 4.0, 4.5, 1e300, 2**64, 1000.0,
                         True, "", "x", "mini", "a\x00b", "\ud800", [], [4], [2, 3], ["ab"],
                         ["x"], ["w" * 81], [["ab"]], {}, {"code": ["ab"]}, {"n": 3},
                         [0.5, 0.25], [[0.0] * 20] * 2, ["code", "math"]]
    out = []
    for _ in range(count):
        doc = BASE
        for _ in range(int(rng.integers(1, 3))):
            path = paths[int(rng.integers(len(paths)))]
            try:
                doc = _set(doc, path, values[int(rng.integers(len(values)))])
            except (KeyError, TypeError):
                continue  # the parent was replaced by a value without that field
        out.append(json.dumps(doc).encode())
    return out


async def test_a_head_the_catalog_accepts_is_one_every_router_loads_and_the_reverse(
        client: httpx.AsyncClient, tmp_path: Path) -> None:
    """The catalog's publish check and the router's loader are one set of rules: on
    good documents, on every bad one above and on random edits of a good one, a publish
    succeeds exactly when a router loads the document (and the stored bytes load to
    the same head, digest included)."""
    bodies = GOOD_DOCUMENTS + [body for body, _ in BAD_DOCUMENTS] + _mutations(300)
    accepted = refused = 0
    for i, body in enumerate(bodies):
        try:
            head: Head | None = loads_head(body)
        except HeadError:
            head = None
        r = await publish(client, body, name=f"h{i}")
        assert r.status_code in (201, 422), r.text
        assert (r.status_code == 201) == (head is not None), (body[:300], r.text)
        if head is not None:
            accepted += 1
            assert r.json()["digest"] == document_digest(json.loads(body))
            (tmp_path / "head.json").write_bytes(body)  # as semantic.headFile
            assert from_file(str(tmp_path / "head.json")).digest == r.json()["digest"]
            assert r.json()["experts"] == list(head.experts)
        else:
            refused += 1
    assert accepted >= 20
    assert refused >= 300


async def test_bad_names_and_too_large(client: httpx.AsyncClient) -> None:
    for name in ("chat_1", "chat.v2", "Chat"):
        r = await publish(client, raw(BASE), name=name)
        assert r.status_code == 400, name
        assert "DNS label" in r.json()["detail"] or "router head name" in r.json()["detail"]
    assert (await publish(client, raw(BASE), ns="a..b")).status_code == 400
    big = b" " * (MAX_DOCUMENT_BYTES + 1)
    r = await publish(client, big)
    assert r.status_code == 413
    assert str(MAX_DOCUMENT_BYTES) in r.json()["detail"]

    async def chunks() -> Any:  # no Content-Length: counted as it streams in
        for _ in range(33):
            yield b" " * (1 << 20)

    r = await client.post(f"{HEADS.format(ns='acme')}/chat/versions", content=chunks())
    assert r.status_code == 413
    assert (await client.get(HEADS.format(ns="acme"))).json() == {"items": []}


def test_head_ref() -> None:
    assert HeadRef.parse("acme/chat@stable") == HeadRef("acme", "chat", "stable")
    ref = HeadRef.parse("acme/chat@3")
    assert (ref.version, ref.alias, ref.head, str(ref)) == (3, None, "acme/chat", "acme/chat@3")
    assert HeadRef.parse("acme/chat@v12").ref == 12
    for bad in ("acme/chat", "acme/chat@", "acme/chat@stable\n", "acme/chat_1@stable",
                "a..b/chat@1", "acme/chat@03", "acme/chat@latest", "acme/chat@0",
                "acme/chat@v03", "/chat@1", "acme/Chat@1", "acme/chat@2147483648"):
        with pytest.raises(ValueError, match="invalid router head reference"):
            HeadRef.parse(bad)
    assert KIND == "mol.router.head/v1"


def test_sync_and_async_clients(catalog_server: str) -> None:
    import asyncio

    doc = head_doc()
    with CatalogClient(catalog_server) as c:
        v1 = c.publish_router_head("acme", "chat", raw(doc))
        assert (v1.version, v1.dims, v1.experts) == (1, 4, ["code", "math"])
        assert c.publish_router_head("acme", "chat", canonical(doc)).version == 1
        c.publish_router_head("acme", "chat", raw(head_doc(3)))
        moved = c.set_router_head_alias("acme", "chat", "stable", 1)
        assert (moved.alias, moved.version, moved.previous) == ("stable", 1, None)
        assert c.router_head("acme", "chat", "stable").digest == v1.digest
        assert c.router_head("acme", "chat", 2).version == 2
        assert [v.version for v in c.router_head_versions("acme", "chat")] == [2, 1]
        heads = c.router_heads("acme")
        assert [(h.name, h.latest_version, h.aliases) for h in heads] == [
            ("chat", 2, {"stable": 1})]
        assert c.router_head_document("acme", "chat", 1) == canonical(doc)
        assert [a.alias for a in c.router_head_aliases("acme", "chat")] == ["stable"]
        assert c.delete_router_head_alias("acme", "chat", "stable").version == 1
        with pytest.raises(CatalogError) as err:
            c.router_head("acme", "chat", "stable")
        assert err.value.status == 404
        with pytest.raises(ValueError, match="invalid router head name 'chat_1'"):
            c.router_head("acme", "chat_1", 1)
        with pytest.raises(ValueError, match="reads as a version"):
            c.router_head("acme", "chat", "v3")  # a version is an int, not an alias
        c.set_router_head_alias("acme", "chat", "stable", 2)

    async def reads() -> None:
        async with AsyncCatalogClient(catalog_server) as a:
            at = await a.router_head("acme", "chat", "stable")
            assert at.version == 2
            body = await a.router_head_document("acme", "chat", at.version)
            assert "sha256:" + hashlib.sha256(body).hexdigest() == at.digest
            assert (await a.router_head("acme", "chat", 1)).digest == v1.digest

    asyncio.run(reads())


def test_migration_0014_down_and_up(backend: str, db_url: str) -> None:
    def tables() -> set[str]:
        engine = create_engine(sync_url(db_url))
        try:
            insp = inspect(engine)
            names = set(insp.get_table_names())
            columns = {c["name"] for c in insp.get_columns("routing_decisions")}
            return names | {f"routing_decisions.{c}" for c in columns}
        finally:
            engine.dispose()

    ours = {"router_heads", "router_head_versions", "router_head_aliases",
            "routing_decisions.candidate_head", "routing_decisions.candidate_expert"}
    assert ours <= tables()
    downgrade(db_url, "0013")
    after = tables()
    assert not ours & after
    assert "routing_decisions.label_expert" in after  # the rest of the table stays
    migrate(db_url)
    assert ours <= tables()


HEAD_PATH = "/v1/namespaces/{ns}/router-heads/{name}"
# The router head and accuracy answers against their client models, as
# tests/catalog/test_client_models.py compares the others.
MODELS: list[tuple[str, str, str, type[BaseModel]]] = [
    (f"{HEAD_PATH}/versions", "post", "201", m.RouterHeadVersion),
    (f"{HEAD_PATH}/versions", "post", "200", m.RouterHeadVersion),
    ("/v1/namespaces/{ns}/router-heads", "get", "200", m.RouterHeadList),
    (f"{HEAD_PATH}/versions", "get", "200", m.RouterHeadVersionList),
    (f"{HEAD_PATH}/versions/{{version}}", "get", "200", m.RouterHeadVersion),
    (f"{HEAD_PATH}/aliases", "get", "200", m.RouterHeadAliasList),
    (f"{HEAD_PATH}/aliases/{{alias}}", "get", "200", m.RouterHeadAlias),
    (f"{HEAD_PATH}/aliases/{{alias}}", "put", "200", m.RouterHeadAliasSet),
    (f"{HEAD_PATH}/aliases/{{alias}}", "delete", "200", m.RouterHeadAliasDeleted),
    ("/v1/namespaces/{ns}/routing/accuracy", "get", "200", m.RoutingAccuracy),
    ("/v1/namespaces/{ns}/routing/decisions/{request_id}", "get", "200", m.RoutingDecision),
]


@pytest.mark.parametrize(("path", "method", "status", "model"), MODELS,
                         ids=[f"{e[1].upper()} {e[0]} {e[2]}" for e in MODELS])
def test_client_models_match_the_documented_answers(
        tmp_path: Path, path: str, method: str, status: str, model: type[BaseModel]) -> None:
    from tests.catalog.test_client_models import shape

    app = create_app(CatalogSettings(db_url=f"sqlite:///{tmp_path / 'c.db'}",
                                     blob_url=f"file://{tmp_path / 'b'}"))
    openapi = app.openapi()
    documented = openapi["paths"][path][method]["responses"][status]
    server = documented["content"]["application/json"]["schema"]
    client = model.model_json_schema(mode="serialization")
    assert shape(client, client.get("$defs", {})) == shape(
        server, openapi["components"]["schemas"])
    document = openapi["paths"][f"{HEAD_PATH}/versions/{{version}}/document"]["get"]
    assert "ETag" in document["responses"]["200"]["headers"]


async def test_concurrent_publishes_get_distinct_versions(client: httpx.AsyncClient) -> None:
    """Two first publishes of a name at once: one creates it, the other's transaction is
    run again and finds it; the same document twice at once is one version."""
    import asyncio

    docs = [raw(head_doc(seed)) for seed in (10, 11, 10)]
    answers = await asyncio.gather(*(publish(client, d, name="race") for d in docs))
    assert sorted(r.status_code for r in answers) == [200, 201, 201], [a.text for a in answers]
    assert sorted({r.json()["version"] for r in answers}) == [1, 2]
    assert answers[0].json()["version"] == answers[2].json()["version"]
    listed = (await client.get(f"{HEADS.format(ns='acme')}/race/versions")).json()["items"]
    assert [v["version"] for v in listed] == [2, 1]
