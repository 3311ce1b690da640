"""What /openapi.json adds to FastAPI's schema: the bearer scheme and the exact form of
every path and paging parameter.

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


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the security scheme and the parameter forms to FastAPI's schema (in place)."""
    schema.setdefault("components", {})["securitySchemes"] = {"bearer": BEARER}
    schema["security"] = [{"bearer": []}]
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
