"""What /openapi.json adds to FastAPI's schema: the lean routes, the bearer scheme, the
exact form of every path and paging parameter, and links from answers to the calls they
lead to.

The handlers check these themselves (and answer 400 in the catalog's error shape, the
same on every route), so the patterns and ranges are documented
here rather than enforced by FastAPI's validation, which would answer 422 instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from mol_catalog.errors import ERROR_RESPONSES
from mol_catalog.util import MAX_BIGINT
from mol_platform.contract import tools
from mol_platform.contract.evals import SUITE_PATTERN, SUITE_VERSION_PATTERN
from mol_platform.contract.model_signature import KEY_ID_PATTERN
from mol_platform.contract.refs import (
    ALIAS_PATTERN,
    DIGEST_PATTERN,
    EXACT_NAME_PATTERN,
    MAX_VERSION,
    NAME_PATTERN,
    VERSION_NUMBER_PATTERN,
    VERSION_PATTERN,
)

BEARER = {"type": "http", "scheme": "bearer",
          "description": "A catalog token (mol_...) or MOL_CATALOG_ADMIN_TOKEN; not needed "
                         "when the catalog runs with auth off"}
NAME = {"pattern": f"^{EXACT_NAME_PATTERN}$", "maxLength": 63}
PARAMETERS: dict[str, dict[str, Any]] = {
    "ns": NAME,
    "tag": NAME,
    "name": NAME,
    "profile": NAME,
    "namespace": NAME,
    "alias": {"pattern": f"^{ALIAS_PATTERN}$", "maxLength": 63},
    "name_ref": {"pattern": f"^{NAME_PATTERN}@(?:{DIGEST_PATTERN}|{VERSION_PATTERN}|"
                            f"{ALIAS_PATTERN})$"},
    "version": {"pattern": f"^{VERSION_NUMBER_PATTERN}$",
                "description": f"A version number, 1 to {MAX_VERSION} (3 or v3)"},
    "hexdigest": {"pattern": "^[0-9a-f]{64}$"},
    "key_id": {"pattern": f"^{KEY_ID_PATTERN}$",
               "description": "sha256 hex of the key's PEM (as `mol catalog keys ls` shows)"},
    "suite": {"pattern": f"^{SUITE_PATTERN}$", "maxLength": 63},
    "suite_version": {"pattern": f"^{SUITE_VERSION_PATTERN}$", "maxLength": 63},
    "limit": {"minimum": 1, "maximum": 500},
    "tool": {"pattern": f"^{tools.EXACT_NAME_PATTERN}$", "maxLength": 63},
    "tool_alias": {"pattern": f"^{tools.APPROVED}$"},
}


ADAPTER = "/v1/adapters/{ns}/{name}"
FROM_PATH = {"ns": "$request.path.ns", "name": "$request.path.name"}
# (path, method, status) -> links: where an answer's values lead (OpenAPI links; clients
# and stateful testers follow them).
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("/v1/adapters", "get", "200"): {
        "describe": (ADAPTER, "get", {"ns": "$response.body#/items/0/namespace",
                                      "name": "$response.body#/items/0/name"}),
        "versions": (f"{ADAPTER}/versions", "get", {
            "ns": "$response.body#/items/0/namespace",
            "name": "$response.body#/items/0/name"}),
    },
    (f"{ADAPTER}/versions", "get", "200"): {
        "version": (f"{ADAPTER}/versions/{{version}}", "get", {
            **FROM_PATH, "version": "$response.body#/items/0/version"}),
        "yank": (f"{ADAPTER}/versions/{{version}}/yank", "post", {
            **FROM_PATH, "version": "$response.body#/items/0/version"}),
    },
    (f"{ADAPTER}/versions/{{version}}/evals", "post", "201"): {
        "list": (f"{ADAPTER}/versions/{{version}}/evals", "get",
                 {**FROM_PATH, "version": "$request.path.version"}),
    },
    (f"{ADAPTER}/versions", "post", "201"): {
        "version": (f"{ADAPTER}/versions/{{version}}", "get", {
            **FROM_PATH, "version": "$response.body#/version"}),
    },
    (ADAPTER, "get", "200"): {
        "versions": (f"{ADAPTER}/versions", "get", FROM_PATH),
    },
    ("/v1/tokens", "post", "201"): {
        "revoke": ("/v1/tokens/{token_id}", "delete", {"token_id": "$response.body#/id"}),
    },
    ("/v1/tokens", "get", "200"): {
        "revoke": ("/v1/tokens/{token_id}", "delete",
                   {"token_id": "$response.body#/items/0/id"}),
    },
    ("/v1/base-models", "post", "201"): {
        "describe": ("/v1/base-models/{name}", "get", {"name": "$response.body#/name"}),
    },
    ("/v1/serving-profiles/{profile}", "put", "200"): {
        "get": ("/v1/serving-profiles/{profile}", "get", {"profile": "$request.path.profile"}),
    },
    ("/v1/serving-profiles", "get", "200"): {
        "get": ("/v1/serving-profiles/{profile}", "get",
                {"profile": "$response.body#/items/0/name"}),
    },
}


def _add_links(schema: dict[str, Any]) -> None:
    paths = schema.get("paths", {})
    for (path, method, status), links in LINKS.items():
        response = paths[path][method]["responses"][status]
        response["links"] = {
            name: {"operationId": paths[to_path][to_method]["operationId"],
                   "parameters": params}
            for name, (to_path, to_method, params) in links.items()}


JSON_HEADERS = [(b"content-type", b"application/json")]


class LeanRoute(Route):
    """A GET route whose endpoint takes the request and returns the JSON body of its 200:
    no dependency injection, parameter model, response object or per-route exception
    wrapper, which together cost more than the answer on the hottest reads (resolve,
    listing). Errors are raised as usual and answered by the app's middleware.

    It sits in the app's route table like any other route; ``/openapi.json`` documents it
    as FastAPI documents a route, from ``params``: a function whose signature declares the
    query and path parameters the endpoint reads (and checks) itself. The description is
    the endpoint's docstring."""

    def __init__(self, path: str, endpoint: Callable[[Request], Awaitable[bytes]],
                 params: Callable[..., None], response_model: type, tag: str) -> None:
        super().__init__(path, endpoint, methods=["GET"])
        self.answer = endpoint
        self.app = self.serve
        self.documented = APIRoute(path, params, methods=["GET"], name=endpoint.__name__,
                                   response_model=response_model, tags=[tag],
                                   responses=ERROR_RESPONSES,
                                   description=inspect.getdoc(endpoint) or "")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """As Starlette's, naming the route in the scope (as FastAPI's routes do) for the
        metrics' route label."""
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self.answer(Request(scope, receive, send))
        await send({"type": "http.response.start", "status": 200, "headers": [
            *JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def query(request: Request) -> dict[str, str]:
    """A lean route's query parameters, the last of a repeated one winning as with
    ``request.query_params.get`` (which builds a multi-dict the hot paths do not need)."""
    raw: bytes = request.scope["query_string"]
    return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True)) if raw else {}


def app_schema(app: FastAPI) -> dict[str, Any]:
    """The app's /openapi.json: FastAPI's schema of its routes, lean ones included."""
    if app.openapi_schema is None:
        routes = [r.documented if isinstance(r, LeanRoute) else r for r in app.routes]
        app.openapi_schema = document(get_openapi(
            title=app.title, version=app.version, description=app.description, routes=routes))
    return app.openapi_schema


def install(app: FastAPI) -> None:
    """Serve ``app_schema`` as the app's /openapi.json (FastAPI's documented override)."""
    app.openapi = partial(app_schema, app)  # type: ignore[method-assign]


def _integer_bounds(node: Any) -> None:
    """Integer bounds as integers: FastAPI's schema model holds them as floats, and
    ``MAX_BIGINT`` as a float is ``2**63``, a value the server refuses."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for key in ("minimum", "maximum"):
                if isinstance(node.get(key), float):
                    node[key] = MAX_BIGINT if node[key] == float(MAX_BIGINT) else int(node[key])
        for value in node.values():
            _integer_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _integer_bounds(value)


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the security scheme, the parameter forms and the links to FastAPI's schema (in
    place)."""
    _integer_bounds(schema)
    schema.setdefault("components", {})["securitySchemes"] = {"bearer": BEARER}
    schema["security"] = [{"bearer": []}]
    _add_links(schema)
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                extra = PARAMETERS.get(param["name"], {})
                # Optional parameters are `anyOf: [{type: string}, {type: null}]`.
                for option in param["schema"].get("anyOf", [param["schema"]]):
                    kind = option.get("type")
                    if kind == "array" and "pattern" in extra:
                        option = option.get("items", {})  # each value of a list
                        kind = option.get("type")
                    if kind == "string" and "pattern" in extra:
                        option.update(extra)
                    elif kind == "integer" and "minimum" in extra and "maximum" not in option:
                        option.update(extra)  # ranges FastAPI already documents stay
    return schema
