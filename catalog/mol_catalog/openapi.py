"""What /openapi.json adds to FastAPI's schema: the bearer scheme, the exact form of
every path and paging parameter, and links from answers to the calls they lead to.

The handlers check these themselves (and answer 400 in the catalog's error shape, the
same on the fast path and through FastAPI), so the patterns and ranges are documented
here rather than enforced by FastAPI's validation, which would answer 422 instead.
"""

from __future__ import annotations

from typing import Any

from mol_platform.refs import (
    ALIAS_PATTERN,
    DIGEST_PATTERN,
    MAX_VERSION,
    NAME_PATTERN,
    VERSION_PATTERN,
)

BEARER = {"type": "http", "scheme": "bearer",
          "description": "A catalog token (mol_...) or MOL_CATALOG_ADMIN_TOKEN; not needed "
                         "when the catalog runs with auth off"}
NAME = {"pattern": f"^{NAME_PATTERN}$", "maxLength": 63}
PARAMETERS: dict[str, dict[str, Any]] = {
    "ns": NAME,
    "name": NAME,
    "profile": NAME,
    "namespace": NAME,
    "alias": {"pattern": f"^{ALIAS_PATTERN}$", "maxLength": 63},
    "name_ref": {"pattern": f"^{NAME_PATTERN}@(?:{DIGEST_PATTERN}|{VERSION_PATTERN}|"
                            f"{ALIAS_PATTERN})$"},
    "version": {"pattern": r"^v?[1-9][0-9]{0,9}$",
                "description": f"A version number, 1 to {MAX_VERSION} (3 or v3)"},
    "hexdigest": {"pattern": "^[0-9a-f]{64}$"},
    "limit": {"minimum": 1, "maximum": 500},
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


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the security scheme, the parameter forms and the links to FastAPI's schema (in
    place)."""
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
                    if kind == "string" and "pattern" in extra:
                        option.update(extra)
                    elif kind == "integer" and "minimum" in extra and "maximum" not in option:
                        option.update(extra)  # ranges FastAPI already documents stay
    return schema
