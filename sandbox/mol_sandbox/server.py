"""``serve()``: run the sandbox under uvicorn, refusing to listen beyond loopback
without tokens (every caller would be the same tenant, and anyone could run code)."""

from __future__ import annotations

import ipaddress

from mol_sandbox.errors import InsecureBind
from mol_sandbox.settings import SandboxSettings


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name may resolve to anything


def check_exposure(settings: SandboxSettings) -> None:
    if settings.tokens_file is None and not is_loopback(settings.host):
        raise InsecureBind(
            f"refusing to serve on {settings.host} without tokens: anyone who can reach "
            "it could run code. Listen on 127.0.0.1, or set MOL_SANDBOX_TOKENS_FILE "
            "(--tokens-file) to a keys file.")


def serve(settings: SandboxSettings) -> None:
    import uvicorn

    from mol_sandbox.app import create_app

    check_exposure(settings)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level=settings.log_level.lower())
