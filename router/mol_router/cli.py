"""``mol router`` verbs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

app = typer.Typer(help="The OpenAI-compatible expert router.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """The OpenAI-compatible expert router."""


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option(
        "-c", "--config", help="RouterConfig file (YAML or JSON); reloaded when it changes. "
        "Env: MOL_ROUTER_CONFIG. Default: router.yaml")] = None,
    host: Annotated[str | None, typer.Option(
        help="Address to listen on. Env: MOL_ROUTER_HOST. Default: 0.0.0.0")] = None,
    port: Annotated[int | None, typer.Option(
        help="Port to listen on. Env: MOL_ROUTER_PORT. Default: 8000")] = None,
) -> None:
    """Serve the OpenAI-compatible API (/v1/chat/completions, /v1/completions,
    /v1/models), routing each request to an expert; /metrics, /healthz, /readyz.
    See docs/router.md for the config file, API keys and every setting."""
    from mol_platform.contract.router_config import load_router_config
    from mol_router.server import serve as run
    from mol_router.settings import RouterSettings

    overrides = {k: v for k, v in (("config", config), ("host", host), ("port", port))
                 if v is not None}
    settings = RouterSettings(**overrides)  # type: ignore[arg-type]
    try:
        load_router_config(settings.config)
    except (OSError, ValueError, ValidationError) as exc:
        typer.echo(f"mol router serve: cannot use {settings.config}: {exc}", err=True)
        raise typer.Exit(code=2) from None
    run(settings)
