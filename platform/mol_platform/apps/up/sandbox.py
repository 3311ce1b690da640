"""The code harness under ``mol up``: when an expert sets ``harness: true``, the sandbox
service (``mol sandbox serve``, the command the operator's Deployment runs) starts on
loopback before the router, and the router's config points at it.

Only the router calls it, so it never listens beyond loopback. With authentication on
(``--auth``, or a host beyond loopback) it reads the router's API keys file as its
tokens file: the router hands each caller's key on, so sessions belong to the caller's
tenant, as in a cluster. Without it every caller is the one local tenant. The catalog
calls it too, to run proposed tools' examples (with the console's key when auth is on,
so its sessions are that tenant's). The session
limits come from the spec's ``harness.limits``, translated to the service's settings
(``contract.sandbox_limits``, as the operator renders them).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mol_platform.apps.up.auth import RouterKeys
from mol_platform.apps.up.supervisor import Service, Supervisor, UpError, check_port_free, mol_argv
from mol_platform.contract.sandbox_limits import SessionLimitSettings
from mol_platform.contract.spec import MoLDeploymentSpec


def sandbox_env(spec: MoLDeploymentSpec) -> dict[str, str]:
    """``harness.limits`` (and ``maxSessions``) as the service's ``MOL_SANDBOX_*``."""
    return SessionLimitSettings.from_harness(spec.harness_settings).env()


def check_sandbox(spec: MoLDeploymentSpec, port: int) -> None:
    """Fail before anything starts: the harness needs the sandbox service installed and
    its port free."""
    if not spec.harness_experts:
        return
    if importlib.util.find_spec("mol_sandbox") is None:
        raise UpError(f"experts {spec.harness_experts} set harness, but the sandbox service "
                      "is not installed: pip install 'mol-platform[sandbox]'")
    check_port_free("127.0.0.1", port, "--sandbox-port")


def sandbox_address(spec: MoLDeploymentSpec, port: int) -> str | None:
    """Where the sandbox service listens when the spec has one (known before it starts,
    so the catalog, started first, can be pointed at it)."""
    return f"http://127.0.0.1:{port}" if spec.harness_experts else None


def start_sandbox(sup: Supervisor, spec: MoLDeploymentSpec, port: int, data_dir: Path,
                  keys: RouterKeys | None) -> str | None:
    """Start the sandbox service when an expert sets harness; its URL, else None."""
    url = sandbox_address(spec, port)
    if url is None:
        return None
    argv = mol_argv("sandbox", "serve", "--host", "127.0.0.1", "--port", str(port))
    if keys is not None:
        argv += ["--tokens-file", str(keys.path)]
    sup.start(Service("sandbox", argv, f"{url}/healthz", env=sandbox_env(spec),
                      log_path=data_dir / "logs" / "sandbox.log"))
    return url
