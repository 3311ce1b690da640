"""OpenAI-style error responses: ``{"error": {"message", "type", "code"}}``.

Every refusal the router makes goes through ``mol_router.httpd.wire.error_response`` so
clients of the OpenAI API get the body shape they already parse, with a message a person can act on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class RouterError(Exception):
    """A request the router refuses; turned into an OpenAI-style error response."""

    def __init__(self, status: int, message: str, code: str, *,
                 retry_after: float | None = None, extra: Mapping[str, Any] | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.retry_after = retry_after
        self.extra = extra
        self.param = param


def error_body(status: int, message: str, code: str, *, param: str | None = None,
               extra: Mapping[str, Any] | None = None) -> bytes:
    err: dict[str, Any] = {"message": message, "type": _TYPES.get(status, "api_error"),
                           "param": param, "code": code}
    if extra:
        err.update(extra)
    return orjson.dumps({"error": err})
