"""The ``mol`` command line.

The shell never imports a component: ``catalog``, ``router`` and ``operator`` verbs
arrive through the ``mol.commands`` entry-point group, so ``mol`` works (and says
what is missing) with only the base install.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Annotated

import typer

from mol_platform import __version__

ENTRY_POINT_GROUP = "mol.commands"

app = typer.Typer(
    name="mol",
    help="MoL Platform: serve one frozen base LLM with many LoRA experts on vLLM.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion SHELL
    rich_markup_mode=None,
)
demo_app = typer.Typer(
    help="Build the tiny demo model and its LoRA adapters.", no_args_is_help=True
)
app.add_typer(demo_app, name="demo")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mol {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """MoL Platform command line."""


@app.command()
def up(
    file: Annotated[
        Path,
        typer.Option("-f", "--file", help="The MoLDeployment to run (its engine flags, experts, "
                     "router and canary)."),
    ] = Path("deploy/examples/macaron-local.yaml"),
    catalog_only: Annotated[
        bool, typer.Option("--catalog-only", help="Start only the catalog (seconds, no engine).")
    ] = False,
    demo: Annotated[
        bool,
        typer.Option(help="With --catalog-only: publish the demo adapters as demo/<name>@stable "
                     "(the full stack always does)."),
    ] = False,
    data_dir: Annotated[
        Path, typer.Option(help="Where the catalog, the demo files, the adapter cache and the "
                           "logs are kept; a second `mol up` reuses them.")
    ] = Path(".mol"),
    host: Annotated[str, typer.Option(
        help="Address the catalog and the router listen on. Beyond loopback the catalog "
        "requires a token: an admin token is made and printed.")] = "127.0.0.1",
    auth: Annotated[bool, typer.Option(
        "--auth", help="Authentication on, on loopback too: the catalog needs a token (an "
        "admin token is made and printed; the engine and the router get narrower ones) and "
        "the router an API key (printed), to try the console's login, scopes and 401s "
        "locally.")] = False,
    catalog_port: Annotated[int, typer.Option(help="Port for the catalog.")] = 8080,
    router_port: Annotated[int, typer.Option(help="Port for the router (the endpoint).")] = 8000,
    engine_port: Annotated[int, typer.Option(help="Port for the vLLM engine (127.0.0.1).")] = 8001,
    embedding_port: Annotated[int, typer.Option(
        help="Port for the embedding engine of router.semantic (127.0.0.1).")] = 8002,
    sandbox_port: Annotated[int, typer.Option(
        help="Port for the sandbox service of experts with harness (127.0.0.1).")] = 8090,
    engine_venv: Annotated[
        Path | None,
        typer.Option(help="A venv with vLLM and mol-platform (default: $MOL_ENGINE_VENV, else "
                     "this Python if it has vLLM). `make engine` builds one."),
    ] = None,
    otlp_endpoint: Annotated[str | None, typer.Option(
        help="Export traces over OTLP/HTTP to this collector (e.g. http://127.0.0.1:4318): "
        "router, catalog and engine spans in one trace per request. Default: no tracing.")
    ] = None,
    trace_sample_ratio: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="With --otlp-endpoint: the share of requests traced.")] = 1.0,
) -> None:
    """Run the platform on this machine: catalog, vLLM engine, router; Ctrl-C stops all.

    The catalog runs on the embedded default (SQLite and a blob folder in --data-dir);
    the demo model's adapters are built and published; the engine serves them through
    the resolver plugin with the flags the operator would give it; the router is the
    OpenAI-compatible endpoint. `make demo` prepares the engine venv and runs this.
    """
    from mol_platform.apps.up.stack import Ports, TraceExport, start_catalog_only, start_stack
    from mol_platform.apps.up.supervisor import run_supervised

    (data_dir / "logs").mkdir(parents=True, exist_ok=True)
    traces = TraceExport(otlp_endpoint, trace_sample_ratio) if otlp_endpoint else None
    if catalog_only:
        code = run_supervised(lambda sup: start_catalog_only(
            sup, host=host, port=catalog_port, data_dir=data_dir, demo=demo, traces=traces,
            auth=auth))
    else:
        ports = Ports(catalog=catalog_port, engine=engine_port, router=router_port,
                      embedding=embedding_port, sandbox=sandbox_port)
        code = run_supervised(lambda sup: start_stack(
            sup, file=file, host=host, ports=ports, data_dir=data_dir, engine_venv=engine_venv,
            traces=traces, auth=auth))
    raise typer.Exit(code)


@demo_app.command("build")
def demo_build(
    out: Annotated[Path, typer.Option("-o", "--out", help="Output folder.")] = Path(".mol/demo"),
    seed: Annotated[int, typer.Option(help="Random seed for the weights.")] = 0,
) -> None:
    """Build a tiny random Llama (2 layers, hidden 256, GQA) and PEFT LoRA adapters for it.

    Weights are random: the model is for exercising the serving path, not for answers.
    Writes OUT/tiny-llama (a Hugging Face model folder) and OUT/adapters/<name> (PEFT folders).
    """
    try:
        from mol_platform.apps.demo import build_demo
    except ImportError as exc:  # numpy / safetensors / tokenizers missing
        typer.echo(f"mol demo build needs the demo extra: pip install 'mol-platform[demo]' ({exc})",
                   err=True)
        raise typer.Exit(code=1) from None
    result = build_demo(out, seed=seed)
    typer.echo(f"base model: {result.base}")
    for name, path in result.adapters.items():
        typer.echo(f"adapter {name}: {path}")


@demo_app.command("experts")
def demo_experts(
    expert: Annotated[list[str] | None, typer.Option(
        "--expert", help="Only this expert (repeatable): chat, agent, coding, ui.")] = None,
    engine_venv: Annotated[Path | None, typer.Option(
        help="The engine venv (torch and peft train there); default $MOL_ENGINE_VENV.")] = None,
    cache: Annotated[Path | None, typer.Option(
        help="Cache root (default $MOL_CACHE_DIR or ~/.cache/mol-platform).")] = None,
    catalog: Annotated[str | None, typer.Option(
        help="Publish each expert to this catalog as NAMESPACE/<expert>@stable.")] = None,
    namespace: Annotated[str, typer.Option(help="The namespace to publish into.")] = "demo",
    ship: Annotated[bool, typer.Option(
        help="Copy each adapter into the source tree's shipped folder (for a release: a "
             "first start then serves it without training).")] = False,
) -> None:
    """Get the real base (SmolLM2-135M-Instruct) and its four experts, trained by the
    checked-in recipe on the CPU (or reused from the cache), and optionally publish them.

    Prints each expert's adapter folder. Training one expert takes minutes on 2 cores;
    a later run with the same base, data and recipe reuses it.
    """
    import os

    from mol_platform.apps.experts.base import default_cache, ensure_base
    from mol_platform.apps.experts.build import ExpertBuildError, publish_expert, train_expert
    from mol_platform.apps.experts.build import ship as build_ship
    from mol_platform.apps.experts.recipe import EXPERTS

    venv = engine_venv or (Path(os.environ["MOL_ENGINE_VENV"])
                           if os.environ.get("MOL_ENGINE_VENV") else None)
    if venv is None or not (venv / "bin" / "python").is_file():
        typer.echo("mol demo experts needs the engine venv (--engine-venv or "
                   "$MOL_ENGINE_VENV; build it with `make engine`)", err=True)
        raise typer.Exit(code=2)
    unknown = sorted(set(expert or ()) - set(EXPERTS))
    if unknown:
        typer.echo(f"unknown expert {', '.join(unknown)}: one of {', '.join(EXPERTS)}", err=True)
        raise typer.Exit(code=2)
    root = cache or default_cache()
    python = venv / "bin" / "python"
    base = ensure_base(root, python, say=typer.echo)
    typer.echo(f"base model: {base}")
    for name in expert or EXPERTS:
        try:
            folder = train_expert(name, base, python, root, say=typer.echo)
        except ExpertBuildError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(code=1) from None
        typer.echo(f"expert {name}: {folder}")
        if ship:
            typer.echo(f"  shipped as {build_ship(folder, name)}")
        if catalog is not None:
            published = publish_expert(folder, f"{namespace}/{name}", catalog_url=catalog,
                                       token=os.environ.get("MOL_CATALOG_TOKEN"))
            typer.echo(f"  published {namespace}/{name} v{published.version}")


def _missing_component(ep: EntryPoint, exc: Exception) -> typer.Typer:
    sub = typer.Typer(help=f"{ep.name} (unavailable: {exc})")

    @sub.callback(invoke_without_command=True)
    def _missing() -> None:
        typer.echo(
            f"mol {ep.name}: this component is not installed here "
            f"(pip install 'mol-platform[{ep.name}]'): {exc}",
            err=True,
        )
        raise typer.Exit(code=2)

    return sub


def load_components(target: typer.Typer) -> None:
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            sub = ep.load()
        except Exception as exc:  # a missing extra must not break the whole CLI
            sub = _missing_component(ep, exc)
        if not isinstance(sub, typer.Typer):
            continue
        target.add_typer(sub, name=ep.name)


def main() -> None:
    load_components(app)
    app(prog_name="mol")


if __name__ == "__main__":
    main()
