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


@app.command()
def explain(
    prompt: Annotated[str, typer.Argument(help="The user's turn to route.")],
    config: Annotated[Path, typer.Option(
        "-c", "--config", help="RouterConfig file (YAML or JSON) with a semantic section.")],
    output: Annotated[str, typer.Option("-o", "--output", help="text or json")] = "text",
) -> None:
    """Dry-run the semantic signal: each expert's score for PROMPT and what the router
    would decide. Calls the embedding engine only, never an LLM engine; where the
    signal does not decide, says what the mode falls back to."""
    import asyncio
    import json

    from mol_platform.contract.router_config import load_router_config
    from mol_router.explain import explain as run

    try:
        cfg = load_router_config(config)
    except (OSError, ValueError, ValidationError) as exc:
        typer.echo(f"mol router explain: cannot use {config}: {exc}", err=True)
        raise typer.Exit(code=2) from None
    if cfg.semantic is None:
        typer.echo(f"mol router explain: {config} has no semantic section", err=True)
        raise typer.Exit(code=2)
    if output not in ("text", "json"):
        typer.echo("mol router explain: --output is text or json", err=True)
        raise typer.Exit(code=2)
    report = asyncio.run(run(cfg, prompt))
    typer.echo(json.dumps(report, indent=2) if output == "json" else report_text(report))


def report_text(report: dict[str, object]) -> str:
    rows = report["scores"]
    assert isinstance(rows, list)
    lines = [f"{'expert':<16} {'score':>7} {'nearest':>8} {'centroid':>9} {'keywords':>9}"]
    lines += [f"{r['expert']:<16} {r['score']:>7.3f} {r['nearest']:>8.3f} "
              f"{r['centroid']:>9.3f} {r['keywords']:>9}" for r in rows]
    lines.append(f"decision: {report['expert']} ({report['route']})")
    return "\n".join(lines)
