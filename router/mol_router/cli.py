"""``mol router`` verbs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="The OpenAI-compatible expert router.", no_args_is_help=True)


@app.command()
def serve(
    config: Annotated[Path, typer.Option("-c", "--config", help="RouterConfig file.")] = Path(
        "router.yaml"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Serve the OpenAI-compatible API, routing each request to an expert (not built yet)."""
    typer.echo("mol: 'router serve' is not built yet in this release.", err=True)
    raise typer.Exit(code=2)
