"""``mol operator`` verbs."""

from __future__ import annotations

import typer

app = typer.Typer(help="The MoLDeployment operator.", no_args_is_help=True)


@app.command()
def run() -> None:
    """Watch MoLDeployments and reconcile engines, routers and canaries (not built yet)."""
    typer.echo("mol: 'operator run' is not built yet in this release.", err=True)
    raise typer.Exit(code=2)

