"""Wire shapes of the sessions API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Generous, but bounded: a cell is code a model wrote, not a data upload.
MAX_CODE_CHARS = 1024 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExecuteRequest(_Model):
    code: str = Field(max_length=MAX_CODE_CHARS, description="Python source; the last "
                      "expression's repr is the result")


class ExecuteResult(_Model):
    stdout: str
    stderr: str
    result: str | None = Field(description="repr of the last expression, if not None")
    error: str | None = Field(description="the traceback, or why the call was stopped")
    duration_ms: float
    truncated: bool = Field(description="some output was cut at the output limit")
    fresh: bool = Field(description="this call ran in a fresh interpreter: the previous "
                        "one was stopped and its variables are gone")
    notice: str | None = Field(description="why the interpreter is fresh, when it is")


class SessionLimits(_Model):
    call_timeout_s: float
    memory_mib: int
    cpus: float
    max_processes: int
    output_bytes: int
    disk_mib: int
    idle_ttl_s: float


class SessionCreated(_Model):
    id: str


class SessionInfo(_Model):
    id: str
    state: Literal["ready", "stopped"] = Field(description="stopped: the interpreter was "
                                              "stopped; the next call starts a fresh one")
    created_at: float
    last_used_at: float
    calls: int
    isolation: Literal["cgroups", "rlimits"]
    limits: SessionLimits


class ErrorBody(_Model):
    error: str
    detail: str
