"""``mol sandbox`` verbs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Isolated Python sessions for model-written code.",
                  no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Isolated Python sessions for model-written code."""


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(
        help="Address to listen on; beyond loopback a tokens file is required. "
        "Env: MOL_SANDBOX_HOST. Default: 127.0.0.1")] = None,
    port: Annotated[int | None, typer.Option(
        help="Port to listen on. Env: MOL_SANDBOX_PORT. Default: 8090")] = None,
    tokens_file: Annotated[Path | None, typer.Option(
        help="Bearer tokens -> tenants (the router's API keys file format). "
        "Env: MOL_SANDBOX_TOKENS_FILE")] = None,
) -> None:
    """Serve the sessions API (/v1/sessions): one isolated interpreter per session,
    under bubblewrap and its own cgroups. See docs/sandbox.md for every limit."""
    from pydantic import ValidationError

    from mol_sandbox.errors import InsecureBind
    from mol_sandbox.server import serve as run
    from mol_sandbox.settings import SandboxSettings

    overrides = {k: v for k, v in (("host", host), ("port", port),
                                   ("tokens_file", tokens_file)) if v is not None}
    try:
        settings = SandboxSettings(**overrides)  # type: ignore[arg-type]
        run(settings)
    except (InsecureBind, ValidationError, OSError) as exc:
        typer.echo(f"mol sandbox serve: {exc}", err=True)
        raise typer.Exit(code=2) from None
