"""Service settings: one object, read from the environment with the prefix MOL_SANDBOX_.

Every limit a session runs under is one of these, so a deployment sets them the same way
it sets where to listen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class SandboxSettings(BaseSettings):
    """Everything ``mol sandbox serve`` needs; its flags override these."""

    model_config = SettingsConfigDict(env_prefix="MOL_SANDBOX_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    # Bearer tokens -> tenants, in the router's API keys file format (YAML or JSON:
    # ``keys: [{tenant, key | key_sha256}]``). None: no tokens, allowed on loopback only,
    # where every caller is the tenant "local".
    tokens_file: Path | None = None
    bwrap: Path = Path("/usr/bin/bwrap")
    # The interpreter that runs inside; its tree (/usr) is bound read-only.
    python: Path = Path("/usr/bin/python3")
    # Seconds one call may run; past it the interpreter is stopped, the call answers an
    # error and the next call gets a fresh interpreter (and says so).
    call_timeout: float = Field(default=30.0, gt=0, le=3600)
    # Seconds a new interpreter may take to say it is ready.
    start_timeout: float = Field(default=10.0, gt=0, le=300)
    memory_mib: int = Field(default=512, ge=32, le=1024 * 1024)
    # CPUs a session may use at most (a CFS quota), and its share under contention.
    cpus: float = Field(default=1.0, gt=0, le=1024)
    max_processes: int = Field(default=64, ge=4, le=100_000)
    # Bytes of stdout, of stderr and of the result's repr kept per call (then truncated).
    output_bytes: int = Field(default=64 * 1024, ge=1024, le=64 * MIB)
    # The session's private /tmp (its home and working folder): a tmpfs of this size.
    disk_mib: int = Field(default=64, ge=1, le=1024 * 1024)
    # Seconds without a call before a session is reaped; its next use answers 410.
    idle_ttl: float = Field(default=1200.0, gt=0, le=7 * 86400)
    reap_interval: float = Field(default=5.0, gt=0, le=3600)
    # Live sessions in all (past it 503) and per tenant (past it 429), with Retry-After.
    max_sessions: int = Field(default=64, ge=1, le=100_000)
    max_sessions_per_tenant: int = Field(default=16, ge=1, le=100_000)
    # Per-session cgroups (v1: pids, memory, cpu) under this folder. "off", or a folder
    # the service cannot write: the fallback (a non-root uid and RLIMIT_NPROC).
    cgroups: Literal["auto", "off"] = "auto"
    cgroup_root: Path = Path("/sys/fs/cgroup")
    # The uid and gid sessions run as when no cgroup binds them (RLIMIT_NPROC counts
    # per real uid and never binds root).
    fallback_uid: int = Field(default=65534, ge=1)
    fallback_gid: int = Field(default=65534, ge=1)
    log_level: str = "info"

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def disk_bytes(self) -> int:
        return self.disk_mib * MIB
