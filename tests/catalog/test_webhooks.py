"""Webhooks on SQLite and Postgres, delivered to a real HTTP receiver on loopback: signed
deliveries verified as docs/catalog.md says, retries after failures, redelivery after
the catalog restarts, URL and secret rules, and targets that are not public refused
(at create, and on the resolved address at delivery) unless the allowlist lets them."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mol_catalog.app import create_app
from mol_catalog.settings import CatalogSettings
from tests.catalog.conftest import AppClient, MakeClient, Model

SECRET = "s3cr3t-" + "x" * 20
# The receiver listens on loopback, which webhooks reach only when the operator allows it.
FAST = {"webhook_poll_seconds": 0.05, "webhook_backoff_seconds": 0.05,
        "webhook_allow": ["127.0.0.1"]}
HOOKS = "/v1/namespaces/acme/webhooks"


class Receiver:
    """A loopback HTTP server that records every POST and answers ``statuses`` in turn
    (then 200)."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        self.lock = threading.Lock()
        self.answer = threading.Event()  # cleared: hold each request (a slow receiver)
        self.answer.set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.requests.append(({k.lower(): v for k, v in self.headers.items()},
                                           body))
                    status = outer.statuses.pop(0) if outer.statuses else 200
                outer.answer.wait(10)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/mol?src=catalog"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(b) for _, b in self.requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def verify(secret: str, header: str, body: bytes, tolerance: float = 300) -> bool:
    """The receiver's check, as docs/catalog.md shows it."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    timestamp = int(parts["t"])
    if abs(time.time() - timestamp) > tolerance:
        return False  # a replay of an old delivery
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body,
                        hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


async def until(check: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _base(http: AppClient, model: Model) -> None:
    assert (await http.post("/v1/base-models", json=model.base_body())).status_code == 201


async def _publish(http: AppClient, model: Model, ns: str = "acme", seed: int = 0,
                   alias: str | None = "candidate") -> None:
    r = await http.post(f"/v1/adapters/{ns}/coding/versions",
                        files=model.files(model.adapter(seed=seed)),
                        data={"alias": alias} if alias else {})
    assert r.status_code == 201, r.text


async def _hook(http: AppClient, url: str, events: list[str]) -> int:
    r = await http.post(HOOKS, json={"url": url, "secret": SECRET, "events": events})
    assert r.status_code == 201, r.text
    assert "secret" not in r.json()
    return int(r.json()["id"])


async def test_signed_deliveries_of_the_namespaces_events_from_registration_on(
        make_client: MakeClient, model: Model, receiver: Receiver) -> None:
    http = await make_client(**FAST)
    await _base(http, model)
    await _publish(http, model, seed=1)  # before the webhook: not delivered
    await _hook(http, receiver.url, ["version.published", "alias.moved"])
    await _publish(http, model, seed=2)
    await _publish(http, model, ns="other", seed=3)  # another namespace: not delivered
    await until(lambda: len(receiver.requests) >= 2)
    await asyncio.sleep(0.3)  # nothing else arrives
    assert len(receiver.requests) == 2
    kinds = []
    for headers, body in receiver.requests:
        assert verify(SECRET, headers["x-mol-signature"], body)
        assert not verify("another-secret-0000", headers["x-mol-signature"], body)
        assert not verify(SECRET, headers["x-mol-signature"], body + b" ")
        doc = json.loads(body)
        assert headers["x-mol-delivery"] == doc["delivery"]
        assert headers["x-mol-event"] == doc["event"]["type"]
        assert headers["content-type"] == "application/json"
        assert doc["event"]["adapter"] == "acme/coding"
        assert doc["event"]["version"] == 2
        kinds.append(doc["event"]["type"])
    assert sorted(kinds) == ["alias.moved", "version.published"]
    listed = (await http.get(HOOKS)).json()["items"]
    assert [h["url"] for h in listed] == [receiver.url]
    assert "secret" not in listed[0]
    metrics = (await http.get("/metrics")).text
    assert 'mol_catalog_webhook_deliveries_total{result="delivered"} 2.0' in metrics


async def test_failed_deliveries_are_retried_with_the_same_delivery_id(
        make_client: MakeClient, model: Model, receiver: Receiver) -> None:
    http = await make_client(**FAST)
    await _base(http, model)
    hook = await _hook(http, receiver.url, ["version.published"])
    receiver.statuses = [500, 503]
    await _publish(http, model, alias=None)
    await until(lambda: len(receiver.requests) >= 3)
    ids = {h["x-mol-delivery"] for h, _ in receiver.requests}
    assert len(ids) == 1
    assert all(verify(SECRET, h["x-mol-signature"], b) for h, b in receiver.requests)

    for _ in range(100):
        items = (await http.get(f"{HOOKS}/{hook}/deliveries")).json()["items"]
        if items and items[0]["status"] == "delivered":
            break
        await asyncio.sleep(0.05)
    assert (items[0]["status"], items[0]["attempts"], items[0]["last_status"]) == (
        "delivered", 3, 200)
    assert items[0]["delivery_id"] in ids
    metrics = (await http.get("/metrics")).text
    assert 'mol_catalog_webhook_deliveries_total{result="retry"} 2.0' in metrics


async def test_a_delivery_out_of_attempts_fails(make_client: MakeClient, model: Model,
                                                receiver: Receiver) -> None:
    http = await make_client(**FAST, webhook_max_attempts=2)
    await _base(http, model)
    hook = await _hook(http, receiver.url, ["version.published"])
    receiver.statuses = [500, 500, 500]
    await _publish(http, model, alias=None)
    for _ in range(200):
        items = (await http.get(f"{HOOKS}/{hook}/deliveries")).json()["items"]
        if items and items[0]["status"] == "failed":
            break
        await asyncio.sleep(0.05)
    assert (items[0]["status"], items[0]["attempts"]) == ("failed", 2)
    assert "HTTP 500" in items[0]["last_error"]
    await asyncio.sleep(0.3)
    assert len(receiver.requests) == 2


async def test_events_are_delivered_after_the_catalog_restarts(
        db_url: str, tmp_path: Path, model: Model, receiver: Receiver) -> None:
    """The outbox survives: events committed while no sender ran, and a delivery that
    was failing when the catalog stopped, are delivered by the next process."""
    values: dict[str, Any] = {"db_url": db_url, "blob_url": f"file://{tmp_path / 'blobs'}",
                              "auth": "off", "pool_size": 4, **FAST}
    first = create_app(CatalogSettings(**values, webhooks=False))
    async with first.router.lifespan_context(first), AppClient(first) as http:
        await _base(http, model)
        await _hook(http, receiver.url, ["version.published"])
        await _publish(http, model, seed=1, alias=None)
    assert receiver.requests == []
    receiver.statuses = [503] * 1000
    # Retries at most 0.5 s apart: however many the second process makes on a slow
    # machine, the third finds the failed deliveries due within a second.
    second = create_app(CatalogSettings(**{**values, "webhook_backoff_seconds": 0.2,
                                           "webhook_backoff_max_seconds": 0.5}))
    async with second.router.lifespan_context(second), AppClient(second) as http:
        await until(lambda: len(receiver.requests) >= 1)
        await _publish(http, model, seed=2, alias=None)
        await until(lambda: len({h["x-mol-delivery"] for h, _ in receiver.requests}) >= 2)
    failing = {h["x-mol-delivery"] for h, _ in receiver.requests}
    receiver.statuses = []
    count = len(receiver.requests)
    third = create_app(CatalogSettings(**values))
    async with third.router.lifespan_context(third), AppClient(third) as http:
        await until(lambda: {json.loads(b)["delivery"] for _, b in
                             receiver.requests[count:]} >= failing)
    versions = sorted(d["event"]["version"] for d in receiver.bodies()[count:])
    assert versions[:2] == [1, 2]


async def test_urls_and_secrets_are_checked_and_hooks_deleted(client: AppClient) -> None:
    ok = {"url": "https://ci.example.com/hooks", "secret": SECRET, "events": ["alias.moved"]}
    bad: dict[str, Any]
    for bad in ({"url": "https://user:pw@ci.example.com/hooks"},
                {"url": "ftp://ci.example.com/hooks"}, {"url": "https://"},
                {"url": "https://ci.example.com/a b"}, {"secret": "short"},
                {"secret": "has spaces in it for sure"}, {"events": []},
                {"events": ["profile.set"]}):
        r = await client.post(HOOKS, json={**ok, **bad})
        assert r.status_code == 422, (bad, r.text)
    r = await client.post(HOOKS, json={**ok, "events": ["alias.moved", "alias.moved"]})
    assert r.status_code == 201
    assert r.json()["events"] == ["alias.moved"]
    hook = r.json()["id"]
    assert (await client.delete(f"{HOOKS}/{hook}")).status_code == 204
    assert (await client.delete(f"{HOOKS}/{hook}")).status_code == 404
    assert (await client.get(f"{HOOKS}/{hook}/deliveries")).status_code == 404
    assert (await client.get(HOOKS)).json() == {"items": []}


async def test_a_stopping_sender_releases_what_it_holds(
        db_url: str, tmp_path: Path, model: Model, receiver: Receiver) -> None:
    """A delivery in flight when the catalog stops is due again at once, not after its
    claim's hold (the request timeout + 30 s): the next process sends it right away."""
    values: dict[str, Any] = {"db_url": db_url, "blob_url": f"file://{tmp_path / 'blobs'}",
                              "auth": "off", "pool_size": 4, **FAST}
    receiver.answer.clear()
    first = create_app(CatalogSettings(**values))
    async with first.router.lifespan_context(first), AppClient(first) as http:
        await _base(http, model)
        await _hook(http, receiver.url, ["version.published"])
        await _publish(http, model, seed=1, alias=None)
        await until(lambda: len(receiver.requests) == 1)  # in flight, unanswered
    receiver.answer.set()
    second = create_app(CatalogSettings(**values))
    async with second.router.lifespan_context(second), AppClient(second):
        await until(lambda: len(receiver.requests) >= 2, seconds=5.0)
    first_id, again_id = (h["x-mol-delivery"] for h, _ in receiver.requests[:2])
    assert first_id == again_id



@pytest.mark.parametrize(("url", "kind"), [
    ("http://127.0.0.1:8080/hooks", "loopback"),
    ("http://2130706433/hooks", "loopback"),  # 127.0.0.1 written as one number
    ("http://0x7f.1/hooks", "loopback"),
    ("http://0.0.0.0/hooks", "unspecified"),
    ("https://10.1.2.3/hooks", "private"),
    ("https://172.16.5.4/hooks", "private"),
    ("https://192.168.1.10/hooks", "private"),
    ("http://169.254.10.1/hooks", "link-local"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://100.100.100.200/latest/meta-data/", "cloud metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata"),
    ("http://METADATA.GOOGLE.INTERNAL/computeMetadata/v1/", "cloud metadata"),
    ("https://100.64.0.1/hooks", "shared"),
    ("https://224.0.0.1/hooks", "multicast"),
])
async def test_targets_that_are_not_public_are_refused_at_create(
        client: AppClient, url: str, kind: str) -> None:
    r = await client.post(HOOKS, json={"url": url, "secret": SECRET, "events": ["alias.moved"]})
    assert r.status_code == 422, r.text
    assert kind in r.json()["detail"]
    assert "MOL_CATALOG_WEBHOOK_ALLOW" in r.json()["detail"]
    assert (await client.get(HOOKS)).json() == {"items": []}


async def test_public_addresses_and_allowed_networks_are_accepted(
        make_client: MakeClient) -> None:
    http = await make_client(webhook_allow=["10.0.0.0/8", "*.hooks.internal"])
    for url in ("https://93.184.215.14/hooks", "https://10.1.2.3/hooks",
                "http://ci.hooks.internal/x"):
        r = await http.post(HOOKS, json={"url": url, "secret": SECRET,
                                         "events": ["alias.moved"]})
        assert r.status_code == 201, (url, r.text)
    r = await http.post(HOOKS, json={"url": "https://192.168.1.1/hooks", "secret": SECRET,
                                     "events": ["alias.moved"]})
    assert r.status_code == 422, r.text


async def _delivery(http: AppClient, hook: int, status: str) -> dict[str, Any]:
    for _ in range(200):
        items = (await http.get(f"{HOOKS}/{hook}/deliveries")).json()["items"]
        if items and items[0]["status"] == status:
            return dict(items[0])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {status} delivery: {items}")


async def test_a_name_that_resolves_to_loopback_is_refused_at_delivery(
        make_client: MakeClient, model: Model, receiver: Receiver) -> None:
    """The check that matters is on the addresses the name resolves to when the delivery
    connects: the name passes at create, its address does not, once, without retries."""
    http = await make_client(**{**FAST, "webhook_allow": []})
    await _base(http, model)
    url = receiver.url.replace("127.0.0.1", "localhost")
    hook = await _hook(http, url, ["version.published"])
    await _publish(http, model, alias=None)
    item = await _delivery(http, hook, "failed")
    assert item["attempts"] == 1
    assert item["last_status"] is None
    assert item["last_error"].startswith("refused: localhost resolves to "), item
    assert "a loopback address" in item["last_error"]
    assert "MOL_CATALOG_WEBHOOK_ALLOW" in item["last_error"]
    await asyncio.sleep(0.3)
    assert receiver.requests == []
    metrics = (await http.get("/metrics")).text
    assert 'mol_catalog_webhook_deliveries_total{result="refused"} 1.0' in metrics


@pytest.mark.parametrize("allow", [["127.0.0.1"], ["127.0.0.0/8", "::1"], ["localhost"]])
async def test_the_allowlist_lets_a_loopback_receiver_through(
        make_client: MakeClient, model: Model, receiver: Receiver, allow: list[str]) -> None:
    http = await make_client(**{**FAST, "webhook_allow": allow})
    await _base(http, model)
    hook = await _hook(http, receiver.url.replace("127.0.0.1", "localhost"),
                       ["version.published"])
    await _publish(http, model, alias=None)
    item = await _delivery(http, hook, "delivered")
    assert (item["attempts"], item["last_status"]) == (1, 200)
    assert len(receiver.requests) == 1
