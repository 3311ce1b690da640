"""The client's typed answers (``mol_platform.contract.catalog_models``) against ``/openapi.json``.

Each model must have the fields of its endpoint's documented response: the same names,
the same types (nested models included) and the same required set. A field added to,
renamed in or retyped in a catalog response body fails here until the model follows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from mol_catalog.app import create_app
from mol_catalog.settings import CatalogSettings
from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.contract import catalog_models as m
from mol_platform.contract import tool_answers as tools

ADAPTER = "/v1/adapters/{ns}/{name}"
TOOL = "/v1/namespaces/{ns}/tools/{tool}"
ENDPOINTS: list[tuple[str, str, str, type[BaseModel]]] = [
    ("/v1/namespaces/{ns}/routing/accuracy", "get", "200", m.RoutingAccuracy),
    ("/v1/namespaces/{ns}/router-heads", "get", "200", m.RouterHeadList),
    ("/v1/namespaces/{ns}/router-heads/{name}/versions", "post", "201", m.RouterHeadVersion),
    ("/v1/namespaces/{ns}/router-heads/{name}/versions", "get", "200",
     m.RouterHeadVersionList),
    ("/v1/namespaces/{ns}/router-heads/{name}/versions/{version}", "get", "200",
     m.RouterHeadVersion),
    ("/v1/namespaces/{ns}/router-heads/{name}/aliases", "get", "200", m.RouterHeadAliasList),
    ("/v1/namespaces/{ns}/router-heads/{name}/aliases/{alias}", "get", "200",
     m.RouterHeadAlias),
    ("/v1/namespaces/{ns}/router-heads/{name}/aliases/{alias}", "put", "200",
     m.RouterHeadAliasSet),
    ("/v1/namespaces/{ns}/router-heads/{name}/aliases/{alias}", "delete", "200",
     m.RouterHeadAliasDeleted),
    ("/v1/namespaces/{ns}/tools", "get", "200", tools.ToolList),
    (f"{TOOL}/versions", "post", "201", tools.ToolVersion),
    (f"{TOOL}/versions", "get", "200", tools.ToolVersionList),
    (f"{TOOL}/versions/{{version}}", "get", "200", tools.ToolVersion),
    (f"{TOOL}/aliases/{{tool_alias}}", "put", "200", tools.ToolApproval),
    (f"{TOOL}/aliases/{{tool_alias}}", "delete", "200", tools.ToolApproval),
    ("/v1/namespaces/{ns}/approved-tools", "get", "200", tools.ApprovedToolList),
    ("/v1/resolve/{ns}/{name_ref}", "get", "200", m.Resolved),
    (f"{ADAPTER}/versions", "post", "201", m.Published),
    ("/v1/adapters", "get", "200", m.AdapterPage),
    (ADAPTER, "get", "200", m.AdapterDetail),
    (f"{ADAPTER}/versions", "get", "200", m.VersionPage),
    (f"{ADAPTER}/versions/{{version}}", "get", "200", m.VersionDetail),
    (f"{ADAPTER}/versions/{{version}}", "delete", "200", m.Deleted),
    (f"{ADAPTER}/versions/{{version}}/yank", "post", "200", m.Yanked),
    (f"{ADAPTER}/versions/{{version}}/evals", "post", "201", m.EvalAttached),
    (f"{ADAPTER}/versions/{{version}}/evals", "get", "200", m.EvalList),
    (f"{ADAPTER}/aliases/{{alias}}", "put", "200", m.AliasSet),
    (f"{ADAPTER}/aliases/{{alias}}/history", "get", "200", m.AliasHistory),
    ("/v1/base-models", "post", "201", m.BaseRegistered),
    ("/v1/base-models/{name}", "get", "200", m.BaseDetail),
    ("/v1/serving-profiles/{profile}", "put", "200", m.Profile),
    ("/v1/serving-profiles/{profile}", "get", "200", m.Profile),
    ("/v1/serving-profiles", "get", "200", m.ProfileList),
    ("/v1/tokens", "post", "201", m.TokenCreated),
    ("/v1/tokens", "get", "200", m.TokenList),
    ("/v1/namespaces/{ns}/keys", "post", "201", m.SigningKey),
    ("/v1/namespaces/{ns}/keys", "get", "200", m.SigningKeyList),
    ("/v1/namespaces/{ns}/keys/{key_id}/revoke", "post", "200", m.SigningKey),
    ("/v1/namespaces/{ns}/signature-policy", "get", "200", m.SignaturePolicy),
    ("/v1/namespaces/{ns}/signature-policy", "put", "200", m.SignaturePolicy),
    ("/v1/events", "get", "200", m.EventPage),
    ("/v1/namespaces/{ns}/protected-aliases", "get", "200", m.ProtectedAliases),
    ("/v1/namespaces/{ns}/protected-aliases", "put", "200", m.ProtectedAliases),
    ("/v1/namespaces/{ns}/webhooks", "post", "201", m.Webhook),
    ("/v1/namespaces/{ns}/webhooks", "get", "200", m.WebhookList),
    ("/v1/namespaces/{ns}/webhooks/{webhook_id}/deliveries", "get", "200",
     m.WebhookDeliveryList),
    ("/v1/admin/gc", "post", "200", m.GcReport),
    ("/v1/admin/verify", "post", "200", m.VerifyReport),
    ("/v1/usage", "post", "200", m.UsageRecorded),
    ("/v1/usage", "get", "200", m.UsagePage),
    (f"{ADAPTER}/usage", "get", "200", m.AdapterUsage),
    ("/v1/routing/decisions", "post", "200", m.DecisionsRecorded),
    ("/v1/namespaces/{ns}/routing/labels/{request_id}", "put", "200", m.Label),
    ("/v1/namespaces/{ns}/routing/decisions/{request_id}", "get", "200", m.RoutingDecision),
]


def shape(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """A JSON schema reduced to what a client relies on: types, field names, required."""
    if "$ref" in schema:
        return shape(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in schema:
        return ("anyOf", frozenset(shape(s, defs) for s in schema["anyOf"]))
    kind = schema.get("type")
    if kind == "array":
        return ("array", shape(schema.get("items", {}), defs))
    if kind == "object" or "properties" in schema:
        if "properties" in schema:
            required = set(schema.get("required", []))
            return ("object", frozenset(
                (name, name in required, shape(sub, defs))
                for name, sub in schema["properties"].items()))
        extra = schema.get("additionalProperties", True)
        return ("map", shape(extra, defs) if isinstance(extra, dict) else "any")
    return kind or "any"


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp: Path = tmp_path_factory.mktemp("openapi")
    app = create_app(CatalogSettings(db_url=f"sqlite:///{tmp / 'c.db'}",
                                     blob_url=f"file://{tmp / 'b'}"))
    return app.openapi()


@pytest.mark.parametrize(("path", "method", "status", "model"), ENDPOINTS,
                         ids=[f"{e[1].upper()} {e[0]}" for e in ENDPOINTS])
def test_client_model_matches_the_documented_response(
        openapi: dict[str, Any], path: str, method: str, status: str,
        model: type[BaseModel]) -> None:
    documented = openapi["paths"][path][method]["responses"][status]
    server = documented["content"]["application/json"]["schema"]
    client = model.model_json_schema(mode="serialization")
    assert shape(client, client.get("$defs", {})) == shape(
        server, openapi["components"]["schemas"])


def test_every_json_answer_has_a_client_model(openapi: dict[str, Any]) -> None:
    """A new endpoint with a JSON body needs its model here (and in the clients)."""
    covered = {(path, method) for path, method, _, _ in ENDPOINTS}
    answered = set()
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            ok = {k: v for k, v in operation["responses"].items() if k.startswith("2")}
            if path.startswith("/v1/") and any(
                    "$ref" in str(v.get("content", {}).get("application/json", {}))
                    for v in ok.values()):
                answered.add((path, method))
    assert answered == covered, sorted(answered ^ covered)


def test_the_comparison_sees_a_drift() -> None:
    class Renamed(m.CatalogModel):
        alias: str
        version: int
        prior: int | None
        forced: bool = False
        overridden: list[m.Refusal] | None = None

    class Retyped(m.CatalogModel):
        alias: str
        version: str
        previous: int | None
        forced: bool = False
        overridden: list[m.Refusal] | None = None

    class Optional(m.CatalogModel):
        alias: str
        version: int
        previous: int | None = None
        forced: bool = False
        overridden: list[m.Refusal] | None = None

    class Same(m.CatalogModel):
        alias: str
        version: int
        previous: int | None
        forced: bool = False
        overridden: list[m.Refusal] | None = None

    expected = m.AliasSet.model_json_schema()
    want = shape(expected, expected["$defs"])
    for other in (Renamed, Retyped, Optional):
        schema = other.model_json_schema()
        assert shape(schema, schema["$defs"]) != want, other.__name__
    assert shape(Same.model_json_schema(), expected["$defs"]) == want


def test_an_answer_of_another_shape_is_a_catalog_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"adapter": "acme/coding", "version": "three"})

    with (CatalogClient("http://catalog.test", "t", transport=httpx.MockTransport(handler))
          as client, pytest.raises(CatalogError) as info):
        client.resolve("acme/coding@v3")
    assert (info.value.status, info.value.error) == (502, "MalformedAnswer")
    assert "version" in info.value.detail
