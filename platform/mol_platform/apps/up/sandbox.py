"""The code harness under ``mol up``: when an expert sets ``harness: true``, the sandbox
service (``mol sandbox serve``, the command the operator's Deployment runs) starts on
loopback before the router, and the router's config points at it.

Only the router calls it, so it never listens beyond loopback. With authentication on
(``--auth``, or a host beyond loopback) it reads the router's API keys file as its
tokens file: the router hands each caller's key on, so sessions belong to the caller's
tenant, as in a cluster. Without it every caller is the one local tenant. The session
limits come from the spec's ``harness.limits``, translated to the service's settings.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

from mol_platform.apps.up.auth import RouterKeys
from mol_platform.apps.up.supervisor import Service, Supervisor, UpError, check_port_free, mol_argv
from mol_platform.contract.spec import MoLDeploymentSpec

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


def sandbox_env(spec: MoLDeploymentSpec) -> dict[str, str]:
    """``harness.limits`` (and ``maxSessions``) as the service's ``MOL_SANDBOX_*``."""
    h = spec.harness_settings
    lim = h.limits
    values: dict[str, float | int] = {
        "CALL_TIMEOUT": lim.timeout_seconds, "CPUS": quantity(lim.cpu),
        "MEMORY_MIB": max(32, math.ceil(quantity(lim.memory) / MIB)),
        "MAX_PROCESSES": lim.pids, "OUTPUT_BYTES": lim.output_bytes,
        "DISK_MIB": max(1, lim.disk_bytes // MIB), "IDLE_TTL": lim.idle_ttl_seconds,
        "MAX_SESSIONS": h.max_sessions,
    }
    return {f"MOL_SANDBOX_{k}": f"{v:g}" for k, v in values.items()}


def check_sandbox(spec: MoLDeploymentSpec, port: int) -> None:
    """Fail before anything starts: the harness needs the sandbox service installed and
    its port free."""
    if not spec.harness_experts:
        return
    if importlib.util.find_spec("mol_sandbox") is None:
        raise UpError(f"experts {spec.harness_experts} set harness, but the sandbox service "
                      "is not installed: pip install 'mol-platform[sandbox]'")
    check_port_free("127.0.0.1", port, "--sandbox-port")


def start_sandbox(sup: Supervisor, spec: MoLDeploymentSpec, port: int, data_dir: Path,
                  keys: RouterKeys | None) -> str | None:
    """Start the sandbox service when an expert sets harness; its URL, else None."""
    if not spec.harness_experts:
        return None
    url = f"http://127.0.0.1:{port}"
    argv = mol_argv("sandbox", "serve", "--host", "127.0.0.1", "--port", str(port))
    if keys is not None:
        argv += ["--tokens-file", str(keys.path)]
    sup.start(Service("sandbox", argv, f"{url}/healthz", env=sandbox_env(spec),
                      log_path=data_dir / "logs" / "sandbox.log"))
    return url
