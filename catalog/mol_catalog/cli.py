"""``mol catalog`` verbs."""

from __future__ import annotations

import typer

app = typer.Typer(help="The adapter catalog: publish, resolve and manage LoRA adapters.",
                  no_args_is_help=True)


@app.command()
def serve() -> None:
    """Run the catalog service (not built yet)."""
    typer.echo("mol: 'catalog serve' is not built yet in this release.", err=True)
    raise typer.Exit(code=2)
