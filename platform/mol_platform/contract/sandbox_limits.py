"""The sandbox service's session limits: one model that the service's settings are built
from (``mol_sandbox.settings.SandboxSettings`` inherits it) and that everything starting
the service renders its environment from (the operator's Deployment and session pods,
``mol up``).

The environment names are the field names under ``ENV_PREFIX``, taken from this model,
so a name the renderers write is always one the service reads. ``from_harness``
translates a MoLDeployment's ``spec.harness`` (Kubernetes quantities, the CRD's units)
to the service's units (CPUs, MiB, seconds). Pure: no I/O.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, Field

from mol_platform.contract.spec_sandbox import HarnessSpec

ENV_PREFIX = "MOL_SANDBOX_"
MIB = 1024 * 1024
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_QUANTITY = re.compile(r"([0-9.]+)(m|k|Ki|M|Mi|G|Gi|T|Ti)?")


def quantity(text: str) -> float:
    """A Kubernetes quantity as a number (``500m`` -> 0.5, ``512Mi`` -> 536870912)."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a quantity")
    number, unit = float(match[1]), match[2] or ""
    return number / 1000 if unit == "m" else number * _UNITS[unit]


class SessionLimitSettings(BaseModel):
    """What each session may use, and how many sessions the service holds."""

    # Seconds one call may run; past it the interpreter is stopped, the call answers an
    # error and the next call gets a fresh interpreter (and says so).
    call_timeout: float = Field(default=30.0, gt=0, le=3600)
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
    # Live sessions in all (past it 503, with Retry-After).
    max_sessions: int = Field(default=64, ge=1, le=100_000)

    @classmethod
    def from_harness(cls, harness: HarnessSpec) -> SessionLimitSettings:
        """``spec.harness``'s limits and ``maxSessions`` in the service's units."""
        lim = harness.limits
        return cls(call_timeout=lim.timeout_seconds, cpus=quantity(lim.cpu),
                   memory_mib=max(32, math.ceil(quantity(lim.memory) / MIB)),
                   max_processes=lim.pids, output_bytes=lim.output_bytes,
                   disk_mib=max(1, lim.disk_bytes // MIB), idle_ttl=lim.idle_ttl_seconds,
                   max_sessions=harness.max_sessions)

    def env(self) -> dict[str, str]:
        """The limits as the service reads them: ``MOL_SANDBOX_<FIELD>``, every field."""
        return {ENV_PREFIX + name.upper(): str(getattr(self, name))
                for name in SessionLimitSettings.model_fields}
