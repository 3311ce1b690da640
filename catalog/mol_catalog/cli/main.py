"""``mol catalog`` verbs: serve the catalog, publish, resolve, list, alias and yank adapters.

Administration verbs (base models, serving profiles, tokens, gc) live in
:mod:`mol_catalog.cli.admin`, pull, delete and events in :mod:`mol_catalog.cli.versions`.
Every verb talks to the catalog over its REST API through
:class:`mol_platform.clients.catalog.CatalogClient`; errors print the server's detail to
stderr and exit 1.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from mol_catalog.cli.admin import register_admin
from mol_catalog.cli.aliases import alias_app
from mol_catalog.cli.common import (
    CliState,
    Output,
    OutputOption,
    catalog,
    emit,
    fail,
    human_size,
    parse_duration,
    parse_labels,
    parse_version,
    plain,
    print_reasons,
    print_table,
)
from mol_catalog.cli.evals import eval_app, format_metrics, version_of
from mol_catalog.cli.heads import head_app
from mol_catalog.cli.namespaces import register_namespaces
from mol_catalog.cli.signing import read_signature, register_signing, sign_folder
from mol_catalog.cli.tools import tools_app
from mol_catalog.cli.versions import register_versions
from mol_catalog.logs import LogFormat, LogLevel
from mol_platform.clients.catalog import CatalogClient
from mol_platform.contract.catalog_models import (
    AdapterDetail,
    AdapterUsage,
    EvalReport,
    Published,
    VersionItem,
)
from mol_platform.contract.refs import AdapterRef

app = typer.Typer(
    help="The adapter catalog: publish, resolve and manage LoRA adapters.\n\n"
    "Talks to the catalog at MOL_CATALOG_URL (default http://127.0.0.1:8080) with the "
    "token in MOL_CATALOG_TOKEN, or --catalog-url/--token.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
ALIAS_REFUSED_EXIT = 3  # publish: the version is stored, its --alias was refused


@app.callback()
def _group(
    ctx: typer.Context,
    catalog_url: Annotated[str | None, typer.Option(
        "--catalog-url", help="Catalog base URL (overrides MOL_CATALOG_URL).")] = None,
    token: Annotated[str | None, typer.Option(
        "--token", help="Bearer token (overrides MOL_CATALOG_TOKEN).")] = None,
) -> None:
    """The adapter catalog: publish, resolve and manage LoRA adapters."""
    ctx.obj = CliState(url=catalog_url, token=token)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    db: Annotated[str | None, typer.Option(
        help="Database URL: sqlite:///path or postgresql+asyncpg://... "
        "(default: MOL_CATALOG_DB_URL).")] = None,
    blobs: Annotated[str | None, typer.Option(
        help="Blob store: file:///dir or s3://bucket/prefix (default: MOL_CATALOG_BLOB_URL).",
    )] = None,
    workers: Annotated[int, typer.Option(help="Server worker processes.")] = 1,
    no_auth: Annotated[bool, typer.Option(
        "--no-auth", help="Accept requests without a token, every caller as admin "
        "(refused unless --host is a loopback address).",
    )] = False,
    insecure_no_auth: Annotated[bool, typer.Option(
        "--insecure-no-auth", help="INSECURE: allow --no-auth on a non-loopback address, "
        "so anyone who can reach it is admin.",
    )] = False,
    log_level: Annotated[LogLevel | None, typer.Option(
        case_sensitive=False, help="Log level (default: MOL_CATALOG_LOG_LEVEL, else info).")]
    = None,
    access_log: Annotated[bool | None, typer.Option(
        "--access-log/--no-access-log", help="One log line per request (default: "
        "MOL_CATALOG_ACCESS_LOG, else off: it costs throughput on the hot reads).")] = None,
    log_format: Annotated[LogFormat | None, typer.Option(
        case_sensitive=False, help="text, or json: one JSON object per line for log "
        "shippers (default: MOL_CATALOG_LOG_FORMAT, else text).")] = None,
) -> None:
    """Run the catalog service (REST API, /metrics, /healthz, /readyz).

    Prints where it listens and on which database (password left out) and blob store.

    Example: mol catalog serve --db sqlite:///.mol/catalog.db --blobs .mol/blobs
    """
    from mol_catalog.server import InsecureBind
    from mol_catalog.server import serve as run_server

    try:
        run_server(host=host, port=port, db=db, blobs=blobs, workers=workers,
                   auth=False if no_auth else None, insecure=insecure_no_auth,
                   log_level=log_level, access_log=access_log,
                   log_format=log_format)
    except InsecureBind as exc:
        fail(str(exc), code=2)


@app.command()
def publish(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(
        metavar="DIR",
        help="A PEFT adapter folder (adapter_config.json + adapter_model.safetensors).")],
    name: Annotated[str, typer.Option("--name", metavar="NS/NAME",
                                      help="Adapter name: namespace/name.")],
    alias: Annotated[str | None, typer.Option(help="Point this alias at the version.")] = None,
    base: Annotated[str | None, typer.Option(
        help="Base model NAME@REVISION (default: the config's base_model_name_or_path at its "
        "latest revision).")] = None,
    tag: Annotated[list[str] | None, typer.Option(
        metavar="TAG", help="A tag; repeat for more.")] = None,
    parent: Annotated[str | None, typer.Option(
        metavar="REF", help="The version this one derives from (its lineage parent): "
        "NS/NAME@REF of the same adapter (an alias is resolved now) or a version, 3 or "
        "v3.")] = None,
    source: Annotated[str | None, typer.Option(
        help="Where it came from (URI of the training run or repository).")] = None,
    label: Annotated[list[str] | None, typer.Option(
        metavar="KEY=VALUE", help="A label of the adapter, e.g. team=search; repeat for more "
        "(the adapter's labels become these).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Admin: move a protected --alias even when refused (recorded).")]
    = False,
    sign_key: Annotated[Path | None, typer.Option(
        "--sign-key", metavar="KEY.pem", help="Sign the two adapter files with this "
        "elliptic-curve private key (OpenSSF model-signing) and upload the signature with "
        "the version; its public key must be registered (mol catalog keys add).")] = None,
    signature: Annotated[Path | None, typer.Option(
        "--signature", metavar="FILE", help="Upload this model-signing signature (made "
        "elsewhere, e.g. with `model_signing sign key`) instead of signing here.")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Publish an adapter folder as a new immutable version.

    The catalog checks it against its base model and every serving profile of that base
    and prints the verdicts. Publishing identical content again returns the existing
    version. With --sign-key (or --signature) the catalog verifies the signature against
    the namespace's keys before it stores anything.

    When the catalog refuses to move a protected --alias (the version is incompatible
    with a serving profile the alias is served under), the version is still stored, the
    alias stays where it was, the reasons go to stderr and the exit code is 3.

    Example: mol catalog publish ./out/coding --name acme/coding --alias stable --tag code
    --label team=search --sign-key ./release.pem
    """
    labels = parse_labels(label or [])
    if sign_key is not None and signature is not None:
        fail("pass --sign-key or --signature, not both", code=2)
    signed = (sign_folder(folder, sign_key) if sign_key is not None
              else read_signature(signature) if signature is not None else None)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True)
    with catalog(ctx) as client, Progress(
        TextColumn("uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("upload", total=None)

        def progress(sent: int, total: int) -> None:
            bar.update(task, completed=sent, total=total)

        parent_version = None if parent is None else _parent_version(client, name, parent)
        result = client.publish(folder, name, base=base, alias=alias, tags=tag or (),
                                parent=parent_version, source=source, labels=labels,
                                progress=progress, force=force, signature=signed)
    emit(output, result, lambda: _print_published(name, alias, result))
    refused = result.alias_refused
    if refused is not None:
        typer.echo(f"mol catalog: alias {refused.alias} was not moved to v{result.version} "
                   "(the version is stored):", err=True)
        print_reasons(refused.reasons, err=True)
        raise typer.Exit(ALIAS_REFUSED_EXIT)


def _parent_version(client: CatalogClient, name: str, parent: str) -> int:
    """``--parent``: a version number, or a reference of the adapter being published."""
    if "@" not in parent:
        return parse_version(parent)
    adapter, version = version_of(client, parent)
    if adapter != name:
        fail(f"--parent {parent}: a lineage parent is a version of {name} itself; name where "
             "a different adapter came from with --source")
    return version


def _print_published(name: str, alias: str | None, result: Published) -> None:
    version, digest = result.version, result.digest
    if result.created:
        typer.echo(f"published {name} v{version} ({digest})")
    else:
        typer.echo(f"already published: {name} v{version} ({digest}) has the same content")
    if alias and result.alias_refused is None:
        typer.echo(f"alias {alias} -> v{version}")
    if not result.verdicts:
        typer.echo("no serving profile for this base yet")
    for profile, verdict in sorted(result.verdicts.items()):
        typer.echo(f"  {profile}: {'compatible' if verdict.compatible else 'incompatible'}")
        print_reasons(verdict.reasons)


@app.command()
def resolve(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(
        metavar="REF", help="namespace/name@ref, ref = alias | latest | vN | sha256:<hex>.")],
    profile: Annotated[str | None, typer.Option(
        help="Serving profile to get the compatibility verdict for.")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Resolve a reference to its immutable version, digest, files and verdict.

    Exits 1 when the verdict under --profile is incompatible (the reasons go to stderr).

    Example: mol catalog resolve acme/coding@stable --profile gpu-a
    """
    with catalog(ctx) as client:
        result = client.resolve(ref, profile)
    verdict = result.verdict

    def text() -> None:
        typer.echo(f"{ref} -> {result.adapter}@v{result.version} ({result.digest})")
        typer.echo(f"base: {result.base}  status: {result.status}")
        for f in result.files:
            typer.echo(f"  {f.path}  {human_size(f.size)}  {f.digest}")
        if verdict is not None:
            ok = verdict.compatible
            typer.echo(f"verdict ({profile}): {'compatible' if ok else 'incompatible'}")

    emit(output, result, text)
    if verdict is not None and not verdict.compatible:
        typer.echo(f"mol catalog: {ref} is incompatible with serving profile {profile}:",
                   err=True)
        print_reasons(verdict.reasons, err=True)
        raise typer.Exit(1)


class Sort(StrEnum):
    name = "name"
    usage = "usage"


class Group(StrEnum):
    version = "version"
    adapter = "adapter"


def _days(text: str, what: str) -> int:
    """Whole days of a duration option: ``30d`` (or ``720h``) -> 30."""
    seconds = parse_duration(text)
    if seconds < 86_400 or seconds % 86_400:
        raise typer.BadParameter(f"{what} {text!r}: use whole days, e.g. 7d or 30d")
    return seconds // 86_400


@app.command("ls")
def list_adapters(
    ctx: typer.Context,
    base: Annotated[str | None, typer.Option(help="Only adapters of this base (NAME[@REV]).")]
    = None,
    tag: Annotated[str | None, typer.Option(help="Only adapters with this tag.")] = None,
    search: Annotated[str | None, typer.Option(help="Text search in names.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Only this namespace.")] = None,
    unused_for: Annotated[str | None, typer.Option(
        "--unused-for", metavar="DAYS", help="Only versions (with --by adapter: adapters) "
        "no router reported a request for in this window, never used ones included, "
        "e.g. 30d. Longer than the catalog's USAGE_RETENTION_DAYS: cut to it.")] = None,
    sort: Annotated[Sort, typer.Option(help="name, or usage: most requests in --window "
                                       "first.")] = Sort.name,
    window: Annotated[str, typer.Option(metavar="DAYS", help="The usage window of --sort "
                                        "usage and the usage columns, e.g. 7d.")] = "30d",
    by: Annotated[Group, typer.Option(help="With --unused-for or --sort usage: one row per "
                                      "version, or per adapter.")] = Group.version,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print names only.")] = False,
    limit: Annotated[int, typer.Option(help="At most this many adapters.", min=1)] = 50,
    output: OutputOption = Output.text,
) -> None:
    """List adapters, filtered by base, tag, namespace or text; or by usage.

    With --unused-for or --sort usage it lists versions (or adapters) with their use as
    routers reported it, e.g. mol catalog ls --unused-for 30d, or mol catalog ls --sort
    usage --window 7d --by adapter.

    Example: mol catalog ls --base tiny-llama --tag code
    """
    if unused_for is not None or sort is Sort.usage:
        if base or tag or search:
            fail("--base, --tag and --search do not combine with --unused-for or "
                 "--sort usage")
        days = _days(unused_for, "--unused-for") if unused_for else _days(window, "--window")
        with catalog(ctx) as client:
            used = list(client.usage(days=days, unused=unused_for is not None,
                                     group=by.value, sort=sort.value, namespace=namespace,
                                     limit=limit))
        if output is not Output.text:
            emit(output, used, lambda: None)
            return
        names = [u.adapter if u.version is None else f"{u.adapter}@v{u.version}" for u in used]
        if quiet:
            for name in names:
                typer.echo(name)
            return
        print_table([by.value.upper(), f"REQUESTS ({days}d)", "INPUT TOKENS", "OUTPUT TOKENS",
                     "LAST USED"], [
            [n, u.requests, u.input_tokens, u.output_tokens, u.last_used or "never"]
            for n, u in zip(names, used, strict=True)])
        return
    with catalog(ctx) as client:
        items = list(client.list_adapters(base=base, tag=tag, q=search, namespace=namespace,
                                          limit=limit))
    if output is not Output.text:
        emit(output, items, lambda: None)
    elif quiet:
        for item in items:
            typer.echo(item.adapter)
    else:
        print_table(["ADAPTER", "LATEST", "BASE", "TAGS", "UPDATED"], [
            [i.adapter, f"v{i.latest_version}" if i.latest_version else "-", i.base,
             ",".join(i.tags), i.updated_at] for i in items])


EVALS_SHOWN = 10  # newest versions whose eval reports `show` fetches


@app.command()
def show(
    ctx: typer.Context,
    adapter: Annotated[str, typer.Argument(metavar="NS/NAME", help="namespace/name.")],
    window: Annotated[str, typer.Option(metavar="DAYS", help="The usage window, e.g. 7d.")]
    = "30d",
    output: OutputOption = Output.text,
) -> None:
    """Show one adapter: base, tags, aliases, its versions with their lineage and their
    use in --window, and the eval reports of the newest versions.

    Example: mol catalog show acme/coding --window 7d
    """
    days = _days(window, "--window")
    with catalog(ctx) as client:
        info = client.get_adapter(adapter)
        versions = list(client.versions(adapter))
        usage = client.adapter_usage(adapter, days)
        reports = {v.version: client.evals(adapter, v.version)
                   for v in versions[:EVALS_SHOWN]}
    data = {**plain(info), "versions": [
        {**plain(v), "evals": plain(reports.get(v.version, []))} for v in versions],
        "usage": usage}
    emit(output, data, lambda: _print_adapter(info, versions, usage, reports))


def _print_adapter(info: AdapterDetail, versions: list[VersionItem], usage: AdapterUsage,
                   reports: dict[int, list[EvalReport]]) -> None:
    typer.echo(f"{info.adapter}  base: {info.base}  tags: {','.join(info.tags) or '-'}")
    typer.echo("labels: " + (", ".join(f"{k}={v}" for k, v in sorted(info.labels.items()))
                             or "-"))
    typer.echo("aliases: " + (", ".join(f"{a} -> v{v}" for a, v in sorted(info.aliases.items()))
                              or "-"))
    used = {u.version: u for u in usage.versions}
    t = usage.total
    typer.echo(f"usage ({usage.days}d): {t.requests} requests, {t.input_tokens} input and "
               f"{t.output_tokens} output tokens, last used {t.last_used or 'never'}")
    print_table(["VERSION", "STATUS", "RANK", "SIZE", "PARENT", "DIGEST", "SIGNED_BY",
                 "CREATED", f"REQUESTS ({usage.days}d)", "LAST USED"], [
        [f"v{v.version}", v.status, v.rank, human_size(v.size),
         f"v{v.parent}" if v.parent else "-", v.digest,
         v.signed_by[:16] if v.signed_by else "-", v.created_at,
         used[v.version].requests if v.version in used else 0,
         used[v.version].last_used if v.version in used else "-"]
        for v in versions])
    shown = [(v, r) for v, items in sorted(reports.items(), reverse=True) for r in items]
    if shown:
        typer.echo("evals:")
        print_table(["VERSION", "SUITE", "SUITE_VERSION", "METRICS", "DATASET"], [
            [f"v{v}", r.suite, r.suite_version, format_metrics(r), r.dataset_digest or "-"]
            for v, r in shown])


@app.command()
def yank(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(
        metavar="REF", help="namespace/name@vN or namespace/name@sha256:<hex>.")],
    reason: Annotated[str, typer.Option(help="Why (shown to whoever resolves it).")],
    output: OutputOption = Output.text,
) -> None:
    """Yank a version: it no longer resolves by alias or latest, only by vN/digest.

    An alias may not point at a yanked version: move it first.

    Example: mol catalog yank acme/coding@v2 --reason "leaks the system prompt"
    """
    parsed = _parse_ref(ref)
    if not parsed.immutable:
        fail(f"{ref}: yank takes an immutable reference (namespace/name@vN or @sha256:...)")
    with catalog(ctx) as client:
        version = parsed.version
        if version is None:
            version = client.resolve(str(parsed)).version
        result = client.yank(parsed.adapter, version, reason)
    emit(output, result, lambda: typer.echo(f"yanked {parsed.adapter} v{version}: {reason}"))


app.add_typer(alias_app, name="alias")
app.add_typer(eval_app, name="eval")
app.add_typer(head_app, name="head")
app.add_typer(tools_app, name="tools")
register_admin(app)
register_versions(app)
register_namespaces(app)
register_signing(app)


def _parse_ref(ref: str) -> AdapterRef:
    try:
        return AdapterRef.parse(ref)
    except ValueError as exc:
        fail(str(exc))
