"""Service settings: one object, read from the environment with the prefix MOL_SANDBOX_.

Every limit a session runs under is one of these, so a deployment sets them the same way
it sets where to listen. The limits are ``contract.sandbox_limits.SessionLimitSettings``'s
fields, the model the operator and ``mol up`` render this service's environment from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mol_platform.contract.sandbox_limits import ENV_PREFIX, MIB, SessionLimitSettings


class SandboxSettings(BaseSettings, SessionLimitSettings):
    """Everything ``mol sandbox serve`` needs; its flags override these."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    # Bearer tokens -> tenants, in the router's API keys file format (YAML or JSON:
    # ``keys: [{tenant, key | key_sha256}]``). None: no tokens, allowed on loopback only,
    # where every caller is the tenant "local".
    tokens_file: Path | None = None
    bwrap: Path = Path("/usr/bin/bwrap")
    # The interpreter that runs inside; its tree (/usr) is bound read-only.
    python: Path = Path("/usr/bin/python3")
    # The session limits and max_sessions are SessionLimitSettings's fields.
    # Seconds a new interpreter may take to say it is ready.
    start_timeout: float = Field(default=10.0, gt=0, le=300)
    reap_interval: float = Field(default=5.0, gt=0, le=3600)
    # Live sessions per tenant (past it 429, with Retry-After).
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
