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
    from mol_router.auto.explain import explain as run

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
    try:
        report = asyncio.run(run(cfg, prompt))
    except (OSError, ValueError) as exc:  # the head the config names cannot be had
        typer.echo(f"mol router explain: {exc}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(json.dumps(report, indent=2) if output == "json" else report_text(report))


def report_text(report: dict[str, object]) -> str:
    """The scores as a table: a trained head's probabilities (it has no examples, so
    no nearest or centroid column), else the examples' similarities."""
    rows = report["scores"]
    assert isinstance(rows, list)
    head = report.get("head")
    if head is not None:
        lines = [f"head: {head}", f"{'expert':<16} {'probability':>11} {'keywords':>9}"]
        lines += [f"{r['expert']:<16} {r['probability']:>11.3f} {r['keywords']:>9}"
                  for r in rows]
    else:
        lines = [f"{'expert':<16} {'score':>7} {'nearest':>8} {'centroid':>9} "
                 f"{'keywords':>9}"]
        lines += [f"{r['expert']:<16} {r['score']:>7.3f} {r['nearest']:>8.3f} "
                  f"{r['centroid']:>9.3f} {r['keywords']:>9}" for r in rows]
    lines.append(f"decision: {report['expert']} ({report['route']})")
    return "\n".join(lines)


@app.command()
def train(
    prompts: Annotated[Path, typer.Option(
        "--prompts", help="Labelled prompts: JSON lines {\"text\", \"expert\"} (\"prompt\" is "
        "read as text; lang and borderline are optional).")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Where to write the head (JSON).")],
    config: Annotated[Path | None, typer.Option(
        "-c", "--config", help="RouterConfig whose semantic section names the embedding "
        "engine and model; its experts' keywords are the candidates for keywords first, "
        "its default expert takes the turns below the threshold.")] = None,
    embeddings_url: Annotated[str | None, typer.Option(
        help="The embedding engine's base URL (instead of, or over, --config's).")] = None,
    model: Annotated[str | None, typer.Option(
        help="The embedding model's served name (instead of, or over, --config's).")] = None,
    default: Annotated[str | None, typer.Option(
        help="The expert that takes turns below the threshold (over --config's).")] = None,
    threshold: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="The lowest calibrated probability that decides.")] = 0.4,
    folds: Annotated[int, typer.Option(min=2, max=20, help=(
        "Cross-validation folds. Nested cross-validation needs 7 labelled prompts per "
        "expert for 5 folds (6 for 4, 5 for 3, 4 for 2); a smaller file is trained with "
        "the most folds it can fill, and the report says so."))] = 5,
    ngrams: Annotated[int, typer.Option(
        min=0, max=6, help="Character n-grams beside the embedding: 3 (the default) is "
        "3- and 4-grams, each in 1,024 buckets; another n, that length alone; 0, the "
        "embedding alone.")] = 3,
    force_keywords: Annotated[bool, typer.Option(
        help="Keep keywords first even where, out of fold, it routes worse than the "
        "head (the report says how it did).")] = False,
    output: Annotated[str, typer.Option("--format", help="text or json")] = "text",
) -> None:
    """Train the router head on labelled prompts: embed them with the deployment's
    embedding engine, fit a regularised linear head with calibrated probabilities,
    report nested k-fold cross-validation, and write the head file that
    semantic.headFile names. Keywords first keeps only the config's keywords that
    the prompts show unambiguous."""
    import json

    from mol_platform.contract.router_config import load_router_config
    from mol_router.auto.heads.labelled import load_labelled
    from mol_router.auto.heads.model import Ngrams
    from mol_router.auto.heads.train import DEFAULT_NGRAMS
    from mol_router.auto.semantic import EmbeddingError
    from mol_router.auto.training import embed_rows, report_text, write_head
    from mol_router.auto.training import train as run

    def fail(msg: str) -> typer.Exit:
        typer.echo(f"mol router train: {msg}", err=True)
        return typer.Exit(code=2)

    if output not in ("text", "json"):
        raise fail("--format is text or json")
    if ngrams == 1:
        raise fail("--ngrams is 0 (none) or 2 to 6")
    keywords: dict[str, list[str]] = {}
    if config is not None:
        try:
            cfg = load_router_config(config)
        except (OSError, ValueError, ValidationError) as exc:
            raise fail(f"cannot use {config}: {exc}") from None
        default = default or cfg.default
        if cfg.semantic is not None:
            embeddings_url = embeddings_url or cfg.semantic.embeddings_url
            model = model or cfg.semantic.model
            keywords = {e.name: list(e.keywords) for e in cfg.semantic.experts}
    if embeddings_url is None or model is None:
        raise fail("name the embedding engine: --config with a semantic section, or "
                   "--embeddings-url and --model")
    try:
        rows = load_labelled(prompts)
    except (OSError, ValueError) as exc:
        raise fail(str(exc)) from None
    if default is not None and default not in {r.expert for r in rows}:
        raise fail(f"default expert {default!r} has no labelled prompts")
    try:
        vectors = embed_rows(embeddings_url, model, rows)
    except EmbeddingError as exc:
        raise fail(f"embedding failed: {exc}") from None
    try:
        trained = run(rows, vectors, model, keywords=keywords, threshold=threshold,
                      default=default, folds=folds, source=prompts.name,
                      ngrams=(DEFAULT_NGRAMS if ngrams == DEFAULT_NGRAMS.n else
                              Ngrams(ngrams) if ngrams else None),
                      keywords_gate=not force_keywords)
        write_head(trained.head, out)  # refused, as at publish, if it breaks a rule
    except ValueError as exc:
        raise fail(str(exc)) from None
    if output == "json":
        typer.echo(json.dumps({"head": str(out), "digest": trained.head.digest(),
                               "crossValidation": trained.report.as_dict(),
                               "keywords": {e: list(w) for e, w in
                                            trained.head.keywords.items()},
                               "keywordsDropped": dict(trained.dropped)}, indent=2))
    else:
        typer.echo(report_text(trained, default))
        typer.echo(f"\nwrote {out}")


# --- routing feedback: labels in the catalog ------------------------------------------

labels_app = typer.Typer(help="Routing labels kept in the catalog: what people said was "
                         "the right expert for a request.", no_args_is_help=True)
app.add_typer(labels_app, name="labels")

CatalogUrl = Annotated[str | None, typer.Option(
    "--catalog-url", "--catalog", help="The catalog's URL. Env: MOL_CATALOG_URL.")]
CatalogToken = Annotated[str | None, typer.Option(
    "--token", help="A catalog token. Env: MOL_CATALOG_TOKEN.")]
Namespace = Annotated[str, typer.Option(
    "-n", "--namespace", envvar="MOL_NAMESPACE", help="The tenant namespace the request "
    "was routed in (its API key's, else the deployment's). Env: MOL_NAMESPACE.")]


def _catalog_failed(verb: str, exc: Exception) -> typer.Exit:
    typer.echo(f"mol router {verb}: {exc}", err=True)
    return typer.Exit(code=1)


@app.command("label")
def label_decision(
    request_id: Annotated[str, typer.Argument(help=(
        "The request's id: the x-request-id header the router answered with."))],
    expert: Annotated[str, typer.Argument(help="The expert that should have taken it.")],
    namespace: Namespace,
    source: Annotated[str, typer.Option(
        help="user (the person who sent it disagreed) or reviewer (someone going over "
        "traffic).")] = "reviewer",
    note: Annotated[str | None, typer.Option(
        help="Why, for whoever reviews the labels (at most 500 characters).")] = None,
    catalog_url: CatalogUrl = None,
    token: CatalogToken = None,
) -> None:
    """Say which expert was right for a request the router routed automatically
    (model: auto), so the next `mol router train` learns from it. The router must have
    recorded the decision (semantic.recordDecisions, on by default under mol up);
    labelling again replaces the label. Needs a token with publish on the namespace."""
    from mol_platform.clients.catalog import CatalogClient, CatalogError

    if source not in ("user", "reviewer"):
        typer.echo("mol router label: --source is user or reviewer", err=True)
        raise typer.Exit(code=2)
    try:
        with CatalogClient(catalog_url, token) as client:
            out = client.put_routing_label(namespace, request_id, expert, source, note)
    except ValueError as exc:
        typer.echo(f"mol router label: {exc}", err=True)
        raise typer.Exit(code=2) from None
    except CatalogError as exc:
        raise _catalog_failed("label", exc) from None
    text = " ".join(out.text.split())
    typer.echo(f"labelled {out.namespace} {out.request_id}: routed to {out.routed}, "
               f"right: {out.expert} ({out.source}; deployment {out.deployment})")
    typer.echo(f"  {text[:117] + '...' if len(text) > 120 else text}")


@labels_app.command("export")
def export_labels(
    namespace: Namespace,
    out: Annotated[Path | None, typer.Option(
        "-o", "--out", help="Write the JSON lines here (default: stdout).")] = None,
    deployment: Annotated[str | None, typer.Option(
        help="Only this deployment's requests.")] = None,
    since: Annotated[str | None, typer.Option(
        help="Only labels given at or after this time (ISO 8601, e.g. 2026-12-01 or "
        "2026-12-01T09:00:00Z; without a zone: UTC).")] = None,
    catalog_url: CatalogUrl = None,
    token: CatalogToken = None,
) -> None:
    """Write the namespace's labelled requests as JSON lines {"id", "text", "expert",
    "routed", "deployment", "source"}, oldest label first: the file `mol router train
    --prompts` reads. Needs read (or publish) on the namespace."""
    from mol_platform.clients.catalog import CatalogClient, CatalogError

    try:
        with CatalogClient(catalog_url, token) as client:
            lines = client.routing_labels(namespace, deployment=deployment, since=since)
    except ValueError as exc:
        typer.echo(f"mol router labels export: {exc}", err=True)
        raise typer.Exit(code=2) from None
    except CatalogError as exc:
        raise _catalog_failed("labels export", exc) from None
    count = len(lines.splitlines())
    if out is None:
        typer.echo(lines, nl=False)
    else:
        out.write_text(lines, encoding="utf-8")
    typer.echo(f"{count} label{'s' if count != 1 else ''} of namespace {namespace}"
               + (f" written to {out}" if out is not None else ""), err=True)
