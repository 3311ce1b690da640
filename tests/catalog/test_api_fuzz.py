"""Schemathesis over the whole catalog API, on SQLite + local blobs and on Postgres + S3.

Every operation in /openapi.json (the hot resolve and listing GETs, lean routes
documented from their parameter signatures, included) is called with generated valid
and invalid input against a live server holding a base model, a profile and a
published adapter. Each answer must be no 5xx, a documented status, content type and
headers, and a body matching its documented schema (errors included: ``{"error",
"detail"}``), and every other check schemathesis has (``--checks all``: schema-valid
input accepted, schema-invalid input refused, a missing token refused, 405 with
``Allow`` for other methods, ...), but for the content checks listed in
``CONTENT_CHECKED`` (docs/catalog.md says why). Half of the cases have their path
parameters pointed at the stored rows so the success bodies are checked too. Fixed
seed and example budget, and a time cap: the run is the same every time and takes
about a minute per backend.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks

from mol_catalog.app import create_app
from mol_catalog.db import migrate
from mol_catalog.settings import CatalogSettings
from mol_catalog.util import encode_cursor
from mol_testkit.net import free_port
from tests.catalog.conftest import Model

ADMIN = "mol_" + "f" * 43
AUTH = {"Authorization": f"Bearer {ADMIN}"}
EXAMPLES = 10
TIME_CAP = 240  # seconds per test and backend (about 60 s is usual)
# Strings that break storage or parsing, tried in every free-text query parameter.
NASTY = ["\x00", "a\x00b", "%00", "\n", "9" * 40, "\U0001f4a5", "'; --", "a" * 3000]
checks.load_all_checks()
# Every check schemathesis has (``--checks all``); docs/catalog.md lists the exclusions.
CHECKS = checks.CHECKS.get_all()
# Content checks: these operations' bodies hold content no schema can describe (files
# that must parse as a LoRA for a stored base, a base model's shapes that must agree
# with its config, a profile's base that must be registered), so a schema-valid body is
# refused with 400 for its content, not its shape.
CONTENT_CHECKED = {"POST /v1/adapters/{ns}/{name}/versions", "POST /v1/base-models",
                   "PUT /v1/serving-profiles/{profile}", "POST /v1/namespaces/{ns}/keys",
                   "PUT /v1/namespaces/{ns}/signature-policy",
                   # A router head document: its rows must match its experts and dims.
                   "POST /v1/namespaces/{ns}/router-heads/{name}/versions",
                   "POST /v1/namespaces/{ns}/tools/{tool}/versions"}
# The storage-breaking strings are meant to be refused: acceptance is not expected.
NASTY_CHECKS = [c for c in CHECKS if c is not checks.positive_data_acceptance]
# Any number 0..2^63-1 is a valid cursor (``encode_cursor``); a generated string is not:
# cursors are opaque content, passed back from next_cursor.
CURSOR = encode_cursor(1)


def checks_for(label: str) -> list[Any]:
    if label in CONTENT_CHECKED:
        return NASTY_CHECKS
    return CHECKS


def _settings(backend: str, tmp: Path, request: pytest.FixtureRequest) -> CatalogSettings:
    # No webhook sender: the fuzzer registers webhooks to whatever URLs it makes up, and
    # sending to them is not what this test checks (tests/catalog/test_webhooks.py is);
    # every address allowed, so a host like "0" (0.0.0.0) is not a refusal the schema
    # cannot express.
    values: dict[str, Any] = {"auth": "on", "admin_token": ADMIN, "pool_size": 4,
                              "webhooks": False, "webhook_allow": ["0.0.0.0/0", "::/0"]}
    if backend == "sqlite":
        values |= {"db_url": f"sqlite:///{tmp / 'catalog.db'}",
                   "blob_url": f"file://{tmp / 'blobs'}"}
    else:
        from mol_testkit.postgres import fresh_database
        from mol_testkit.s3 import unique_bucket_name

        s3 = request.getfixturevalue("s3_server")
        bucket = unique_bucket_name("fuzz")
        client = s3.client()
        client.create_bucket(Bucket=bucket)
        client.close()
        values |= {"db_url": fresh_database(request.getfixturevalue("postgres_cluster"),
                                            "fuzz", driver="asyncpg"),
                   "blob_url": f"s3://{bucket}/cat", "s3_endpoint_url": s3.endpoint_url}
    migrate(values["db_url"])
    return CatalogSettings(**values)


# Operations that remove what they are pointed at get rows of their own, so the rows the
# other operations' success bodies are checked on stay.
DISPOSABLE: dict[str, dict[str, str]] = {
    "DELETE /v1/adapters/{ns}/{name}/versions/{version}": {"ns": "scratch"},
    "DELETE /v1/namespaces/{ns}/webhooks/{webhook_id}": {"ns": "scratch"},
    "DELETE /v1/namespaces/{ns}/router-heads/{name}/aliases/{alias}": {"ns": "scratch"},
    "DELETE /v1/namespaces/{ns}/tools/{tool}/aliases/{tool_alias}": {"ns": "scratch"}}
ROUTER_HEAD = json.dumps({
    "kind": "mol.router.head/v1", "experts": ["code", "math"],
    "embedding": {"model": "minilm", "dims": 2}, "weights": [[0.5, -0.5], [-0.5, 0.5]],
    "bias": [0.0, 0.1], "temperature": 1.0, "threshold": 0.5, "keywords": {},
    "training": {"source": "fuzz"}}).encode()
HOOK = {"url": "http://127.0.0.1:9/hook", "secret": "fuzz-secret-0123456789",
        "events": ["alias.moved"]}


def _seed(url: str) -> dict[str, str]:
    """A base, a profile and acme/coding v1 (alias stable, a humaneval eval report), a
    labelled routing decision (acme, req-1), router head acme/coding v1 (alias stable):
    rows the fuzzer can reach; scratch/coding v1 (alias stable), adapter and router head,
    for the operations in ``DISPOSABLE``."""
    model = Model()
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as http:
        assert http.post("/v1/base-models", json=model.base_body()).status_code == 201
        r = http.put("/v1/serving-profiles/small", json={
            "base_model": f"{model.name}@{model.revision}", "engine": "vllm==0.32.0",
            "max_lora_rank": 16, "max_loras": 4})
        assert r.status_code == 201, r.text
        r = http.post("/v1/adapters/acme/coding/versions", files=model.files(model.adapter()),
                      data={"alias": "stable", "tags": "code"})
        assert r.status_code == 201, r.text
        digest = r.json()["digest"]
        r = http.post("/v1/adapters/acme/coding/versions/1/evals", json={
            "suite": "humaneval", "suite_version": "1", "metrics": {"pass@1": 0.5},
            "report": "# humaneval\n"})
        assert r.status_code == 201, r.text
        files = http.get("/v1/resolve/acme/coding@v1").json()["files"]
        pem = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        r = http.post("/v1/namespaces/acme/keys", json={"name": "ci", "public_key": pem.decode()})
        assert r.status_code == 201, r.text
        key_id = r.json()["key_id"]
        r = http.post("/v1/adapters/scratch/coding/versions", files=model.files(model.adapter()),
                      data={"alias": "stable"})
        assert r.status_code == 201, r.text
        r = http.post("/v1/routing/decisions", json={"batch_id": "fuzz-seed", "decisions": [{
            "request_id": "req-1", "namespace": "acme", "deployment": "chat",
            "text": "fix my loop", "expert": "code", "route": "head",
            "at": "2026-12-01T00:00:00Z"}]})
        assert r.status_code == 200, r.text
        r = http.put("/v1/namespaces/acme/routing/labels/req-1", json={"expert": "math"})
        assert r.status_code == 200, r.text
        for ns in ("acme", "scratch"):
            heads = f"/v1/namespaces/{ns}/router-heads/coding"
            r = http.post(f"{heads}/versions", content=ROUTER_HEAD)
            assert r.status_code == 201, r.text
            assert http.put(f"{heads}/aliases/stable", json={"version": 1}).status_code == 200
            tools = f"/v1/namespaces/{ns}/tools/coding"
            r = http.post(f"{tools}/versions", json={
                "source": "def coding(x):\n    return x\n", "parameters": {
                    "type": "object", "properties": {"x": {}}, "required": ["x"]}})
            assert r.status_code == 201, r.text
            assert http.put(f"{tools}/aliases/approved", json={"version": 1}).status_code == 200
        hooks = [http.post(f"/v1/namespaces/{ns}/webhooks", json=HOOK) for ns in
                 ("acme", "scratch")]
        assert [h.status_code for h in hooks] == [201, 201], hooks[0].text
        DISPOSABLE["DELETE /v1/namespaces/{ns}/webhooks/{webhook_id}"]["webhook_id"] = str(
            hooks[1].json()["id"])
    return {"webhook_id": str(hooks[0].json()["id"]), "ns": "acme", "name": "coding",
            "alias": "stable", "version": "1",
            "name_ref": "coding@stable", "profile": "small", "hexdigest": files[0]["digest"][7:],
            "token_id": "1", "manifest": digest, "base": model.name, "key_id": key_id,
            "suite": "humaneval", "suite_version": "1", "request_id": "req-1",
            "tool": "coding", "tool_alias": "approved"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A live catalog (uvicorn in a thread, auth on) and the path values of its rows."""
    cfg = _settings(request.param, tmp_path_factory.mktemp("fuzz"), request)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(cfg), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "catalog did not start"
        assert time.monotonic() < deadline, "catalog did not start in 30 s"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, _seed(url)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def catalog_schema(live: tuple[str, dict[str, str]]) -> Any:
    # The token through schemathesis's auth (not a fixed header), so the cases that drop
    # it test a missing token. No unknown query parameters: the catalog ignores them, as
    # HTTP APIs do for forward compatibility (docs/catalog.md).
    config = schemathesis.Config.from_dict({
        "seed": 20261130, "auth": {"openapi": {"bearer": {"bearer": ADMIN}}},
        "generation": {"allow-extra-parameters": False}})
    return schemathesis.openapi.from_url(f"{live[0]}/openapi.json", config=config)


def _prepare(case: Any) -> None:
    if case.query and "wait" in case.query:
        case.query["wait"] = 0  # a long poll would only make the run slow
    if case.query and "cursor" in case.query and case.meta is not None and (
            case.meta.generation.mode is GenerationMode.POSITIVE):
        case.query["cursor"] = CURSOR


def _run(operation: Any, strategy: Any, failures: list[str], examples: int = EXAMPLES,
         checks_used: list[Any] | None = None) -> None:
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(case: Any) -> None:
        _prepare(case)
        case.call_and_validate(checks=checks_used or checks_for(operation.label), timeout=30)

    try:
        run()
    except Unsatisfiable:
        pass  # no input to make invalid (an operation without parameters)
    except (Exception, BaseExceptionGroup) as exc:  # all operations run; failures listed
        failures.append(f"{operation.label}: {exc}")


@pytest.mark.timeout(TIME_CAP)
def test_api_answers_every_input_as_documented(
        catalog_schema: Any, live: tuple[str, dict[str, str]]) -> None:
    known = live[1]
    failures: list[str] = []
    labels = []
    for result in catalog_schema.get_all_operations():
        operation = result.ok()
        labels.append(operation.label)
        names = [p.name for p in operation.path_parameters]
        strategies = [operation.as_strategy(GenerationMode.POSITIVE),
                      operation.as_strategy(GenerationMode.NEGATIVE)]
        if names:  # the stored rows: success bodies are checked against their schemas too
            rows = {**known, **DISPOSABLE.get(operation.label, {})}
            strategies.append(operation.as_strategy(
                GenerationMode.POSITIVE, path_parameters={n: rows[n] for n in names}))
        for strategy in strategies:
            _run(operation, strategy, failures)
        for param in operation.query:
            if "string" in str(param.definition):
                for value in NASTY:
                    _run(operation, operation.as_strategy(
                        GenerationMode.POSITIVE, query={param.name: value}), failures, 2,
                        NASTY_CHECKS)
    assert "GET /v1/resolve/{ns}/{name_ref}" in labels
    assert "GET /v1/adapters" in labels
    assert set(DISPOSABLE) <= set(labels)
    assert not failures, "\n\n".join(failures)


@pytest.mark.timeout(TIME_CAP)
def test_linked_calls_answer_as_documented(catalog_schema: Any,
                                           live: tuple[str, dict[str, str]]) -> None:
    """Stateful: sequences that follow the documented links (listing -> adapter ->
    versions -> version or yank, token -> revoke, ...), each answer checked as above."""
    machine = catalog_schema.as_state_machine()

    class Catalog(machine):  # type: ignore[misc, valid-type]
        def before_call(self, case: Any) -> None:
            _prepare(case)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"timeout": 30}

        def validate_response(self, response: Any, case: Any,
                              additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, checks=checks_for(case.operation.label),
                                   transport_kwargs=kwargs)

    Catalog.run(settings=settings(max_examples=EXAMPLES, stateful_step_count=5,
                                  deadline=None, derandomize=True, database=None,
                                  suppress_health_check=list(HealthCheck)))
