"""One error base class, ``SandboxError``: its status and name pick the response
``{"error", "detail"}``, built in one handler (``mol_sandbox.app``)."""

from __future__ import annotations

from typing import Any, ClassVar


class SandboxError(Exception):
    """Base of every error the API reports."""

    status: ClassVar[int] = 500
    error: ClassVar[str] = "InternalError"

    def __init__(self, detail: str, *, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "detail": self.detail}

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


class Unauthorized(SandboxError):
    status = 401
    error = "Unauthorized"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class NotFound(SandboxError):
    """Unknown ids and other tenants' ids answer the same, so ids cannot be probed."""

    status = 404
    error = "NotFound"


class Gone(SandboxError):
    """A session reaped after its idle time: its next use says so."""

    status = 410
    error = "SessionReaped"


class TooManySessions(SandboxError):
    """The tenant's own cap."""

    status = 429
    error = "TooManySessions"


class AtCapacity(SandboxError):
    """The service's cap on live sessions, or an interpreter that could not start."""

    status = 503
    error = "AtCapacity"


class InsecureBind(ValueError):
    """No tokens on an address other machines can reach."""


class StartFailed(SandboxError):
    """An interpreter that could not be started (bubblewrap missing, too slow, ...)."""

    status = 503
    error = "StartFailed"
