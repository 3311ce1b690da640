"""``mol catalog`` administration verbs: base models, serving profiles, tokens, gc, verify."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mol_catalog.cli.common import (
    Output,
    OutputOption,
    catalog,
    emit,
    parse_duration,
    print_table,
)
from mol_platform.contract.catalog_models import GcReport, Profile, VerifyReport
from mol_platform.contract.model_folder import read_base_model_folder

base_app = typer.Typer(help="Register base models (shapes only, never weights).",
                       no_args_is_help=True, rich_markup_mode=None)
profile_app = typer.Typer(help="Declare serving profiles (where and how adapters are served).",
                          no_args_is_help=True, rich_markup_mode=None)
token_app = typer.Typer(help="Create, list and revoke API tokens (admin).",
                        no_args_is_help=True, rich_markup_mode=None)


@base_app.command("register")
def base_register(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(
        metavar="DIR", help="A model folder: config.json and model.safetensors (or sharded, with "
        "model.safetensors.index.json).")],
    name: Annotated[str, typer.Option("--name", help="Base model name, e.g. qwen3-8b.")],
    revision: Annotated[str | None, typer.Option(
        help="Revision id (default: first 12 hex of sha256 over config.json and the tensor "
        "shapes).")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Register a base model revision from a local folder.

    Only config.json and the safetensors headers (tensor names and shapes) are sent; the
    weights stay where they are. Registering the same content again is a no-op.

    Example: mol catalog base register ./models/tiny-llama --name tiny-llama
    """
    with catalog(ctx) as client:
        folder_info = read_base_model_folder(folder)
        rev = revision or folder_info.default_revision()
        record = client.register_base(folder, name, rev)
    emit(output, record, lambda: typer.echo(
        f"base model {record.name}@{record.revision} "
        f"registered ({folder_info.architecture}, {len(folder_info.tensors)} tensors)"))


@base_app.command("show")
def base_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Base model name.")],
    output: OutputOption = Output.text,
) -> None:
    """Show a base model's revisions, newest (current) first.

    Example: mol catalog base show tiny-llama
    """
    with catalog(ctx) as client:
        record = client.get_base(name)
    emit(output, record, lambda: print_table(["REVISION", "ARCHITECTURE", "TENSORS", "CREATED"], [
        [r.revision, r.architecture, len(r.tensors), r.created_at]
        for r in record.revisions]))


@profile_app.command("set")
def profile_set(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Profile name, e.g. gpu-a.")],
    base: Annotated[str, typer.Option("--base", help="Base model NAME@REVISION.")],
    max_lora_rank: Annotated[int, typer.Option(help="The engine's --max-lora-rank.", min=1)]
    = 64,
    max_loras: Annotated[int, typer.Option(help="The engine's --max-loras.", min=1)] = 4,
    engine: Annotated[str, typer.Option(
        help="Engine and version, e.g. vllm==0.11.0 (default: vllm, version unstated).")]
    = "vllm",
    supported_module: Annotated[list[str] | None, typer.Option(
        metavar="MODULE",
        help="A module the engine can apply LoRA to (e.g. q_proj); repeat. Default: all.",
    )] = None,
    output: OutputOption = Output.text,
) -> None:
    """Declare or change a serving profile; adapters get a verdict per profile.

    Example: mol catalog profile set gpu-a --base tiny-llama@0123abcd4567 --max-lora-rank 64
    --max-loras 4 --engine vllm==0.11.0
    """
    if "@" not in base:
        raise typer.BadParameter(f"{base!r}: expected NAME@REVISION", param_hint="--base")
    with catalog(ctx) as client:
        record = client.set_profile(name, base_model=base, max_lora_rank=max_lora_rank,
                                    max_loras=max_loras, engine=engine,
                                    supported_modules=supported_module)
    emit(output, record, lambda: typer.echo(
        f"serving profile {record.name}: base {base}, max LoRA rank "
        f"{max_lora_rank}, max LoRAs {max_loras}, engine {engine}"))


def _profile_row(p: Profile) -> list[Any]:
    modules = "all" if p.supported_modules is None else ",".join(p.supported_modules)
    return [p.name, p.base_model, p.engine, p.max_lora_rank, p.max_loras, modules,
            p.generation, p.updated_at]


PROFILE_COLUMNS = ["NAME", "BASE", "ENGINE", "MAX_RANK", "MAX_LORAS", "MODULES", "GENERATION",
                   "UPDATED"]


@profile_app.command("list")
def profile_list(ctx: typer.Context, output: OutputOption = Output.text) -> None:
    """List serving profiles, by name.

    Example: mol catalog profile list -o yaml
    """
    with catalog(ctx) as client:
        items = client.list_profiles()
    emit(output, items, lambda: print_table(PROFILE_COLUMNS, [_profile_row(p) for p in items]))


@profile_app.command("show")
def profile_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Profile name.")],
    output: OutputOption = Output.text,
) -> None:
    """Show one serving profile: its base, engine and limits.

    Example: mol catalog profile show gpu-a
    """
    with catalog(ctx) as client:
        record = client.get_profile(name)
    emit(output, record, lambda: print_table(PROFILE_COLUMNS, [_profile_row(record)]))


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(
        metavar="NAME", help="Who or what uses the token, e.g. ci-acme.")],
    scope: Annotated[list[str], typer.Option(
        "--scope", metavar="SCOPE",
        help="read, read:<ns>, publish:<ns>, usage, usage:<ns> or admin; repeat for "
        "more (usage: what routers need to report usage).")],
    output: OutputOption = Output.text,
) -> None:
    """Create a token. The token is printed once, on stdout; store it now.

    Example: MOL_CATALOG_TOKEN=$(mol catalog token create ci-acme --scope publish:acme)
    """
    with catalog(ctx) as client:
        record = client.create_token(name, scope)
    typer.echo(f"token {record.name} (id {record.id}, scopes {', '.join(record.scopes)}) - "
               "shown only once", err=True)
    emit(output, record, lambda: typer.echo(record.token))


@token_app.command("list")
def token_list(ctx: typer.Context, output: OutputOption = Output.text) -> None:
    """List tokens (never their secret values).

    Example: mol catalog token list
    """
    with catalog(ctx) as client:
        items = client.list_tokens()
    emit(output, items, lambda: print_table(["ID", "NAME", "SCOPES", "CREATED", "REVOKED"], [
        [t.id, t.name, ",".join(t.scopes), t.created_at, t.revoked_at or "-"]
        for t in items]))


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token_id: Annotated[str, typer.Argument(metavar="ID", help="Token id from token list.")],
    output: OutputOption = Output.text,
) -> None:
    """Revoke a token; requests with it fail from now on.

    Example: mol catalog token revoke 7
    """
    with catalog(ctx) as client:
        client.revoke_token(token_id)
    emit(output, {"id": token_id, "revoked": True},
         lambda: typer.echo(f"token {token_id} revoked"))


def gc(
    ctx: typer.Context,
    grace: Annotated[str, typer.Option(
        help="Keep unreferenced blobs younger than this (90s, 30m, 1h, 2d).")] = "1h",
    output: OutputOption = Output.text,
) -> None:
    """Delete blobs no version references, older than the grace period (admin), and
    leftovers of interrupted publishes (temp upload folders, partial blobs) as old.

    Example: mol catalog gc --grace 2h
    """
    seconds = parse_duration(grace)
    with catalog(ctx) as client:
        result = client.gc(seconds)
    emit(output, result, lambda: _print_gc(result))


def _print_gc(result: GcReport) -> None:
    typer.echo(f"deleted {len(result.deleted)} blobs, kept {result.kept}; removed "
               f"{result.leftovers_removed} leftovers of interrupted publishes")
    for digest in result.deleted:
        typer.echo(f"  {digest}")


def migrate(
    db: Annotated[str | None, typer.Option(
        help="Database URL (default: MOL_CATALOG_DB_URL).")] = None,
    revision: Annotated[str, typer.Option(help="Alembic revision to upgrade to.")] = "head",
    output: OutputOption = Output.text,
) -> None:
    """Upgrade the catalog's database schema (Alembic), then exit.

    What the Helm chart's pre-install/pre-upgrade Job runs; `serve` migrates at start
    unless MOL_CATALOG_MIGRATE=false.

    Example: MOL_CATALOG_DB_URL=postgresql://mol@db/mol mol catalog migrate
    """
    from mol_catalog.db import migrate as run_migrations
    from mol_catalog.settings import CatalogSettings

    url = db or CatalogSettings().db_url
    run_migrations(url, revision)
    emit(output, {"revision": revision},
         lambda: typer.echo(f"database at revision {revision}"))


def verify(
    ctx: typer.Context,
    sample: Annotated[int | None, typer.Option(
        min=1, help="Check this many referenced blobs, picked at random (default: all).")]
    = None,
    content: Annotated[bool, typer.Option(
        "--content/--no-content",
        help="Read each checked blob back and hash it (--no-content: presence and size "
        "only, one HEAD or stat per blob).")] = True,
    output: OutputOption = Output.text,
) -> None:
    """Check that every blob a version references is stored, with its size and digest
    (admin). Exits 1 when any is missing or damaged and lists the versions affected;
    publishing the same files again stores a missing blob again.

    Example: mol catalog verify --sample 1000
    """
    with catalog(ctx) as client:
        report = client.verify(sample, content)
    emit(output, report, lambda: _print_verify(report))
    if not report.ok:
        raise typer.Exit(1)


def _print_verify(report: VerifyReport) -> None:
    typer.echo(f"checked {report.checked} of {report.referenced} referenced blobs: "
               f"{len(report.missing)} missing, {len(report.corrupt)} damaged")
    for bad in [*report.missing, *report.corrupt]:
        more = bad.version_count - len(bad.versions)
        typer.echo(f"  {bad.digest}: {bad.reason}; used by {', '.join(bad.versions)}"
                   + (f" and {more} more" if more > 0 else ""))


def register_admin(app: typer.Typer) -> None:
    """Mount the administration verbs on the ``mol catalog`` group."""
    app.add_typer(base_app, name="base")
    app.add_typer(profile_app, name="profile")
    app.add_typer(token_app, name="token")
    app.command("gc")(gc)
    app.command("migrate")(migrate)
    app.command("verify")(verify)

