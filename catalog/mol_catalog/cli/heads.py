"""``mol catalog head publish|list|show|alias``: trained router heads in the catalog.

A head is the JSON file ``mol router train`` writes. Publishing it makes an immutable
version of ``NS/NAME`` (the same file again is the same version); routers name it
``NS/NAME@ALIAS`` and follow the alias, so moving ``stable`` is how a new head reaches
traffic, and a ``canary`` alias is how it is tried beside the serving one first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mol_catalog.cli.common import (
    Output,
    OutputOption,
    catalog,
    emit,
    fail,
    human_size,
    parse_version,
    print_table,
)
from mol_platform.contract.catalog_models import RouterHeadVersion
from mol_platform.contract.refs import RefError, check_namespace
from mol_platform.contract.router_heads import MAX_DOCUMENT_BYTES, HeadRef, check_head_name

head_app = typer.Typer(
    help="Trained router heads (mol router train's JSON): publish them as versions, move "
    "their aliases (routers follow NS/NAME@ALIAS), list and show them.",
    no_args_is_help=True, rich_markup_mode=None)
alias_app = typer.Typer(help="Point a head's alias at a version, or remove it.",
                        no_args_is_help=True, rich_markup_mode=None)
head_app.add_typer(alias_app, name="alias")


def _head_ref(text: str, *, alias: bool = False) -> HeadRef:
    """``NS/NAME@REF`` (``alias``: the ref must be an alias), or exit 1 with the form."""
    try:
        ref = HeadRef.parse(text)
    except RefError as exc:
        hint = " (name the alias: NS/NAME@ALIAS, e.g. acme/chat@stable)" if (
            "@" not in text) else ""
        fail(f"{exc}{hint}")
    if alias and ref.alias is None:
        fail(f"{text}: name an alias, not a version (NS/NAME@ALIAS, e.g. acme/chat@stable)")
    return ref


def _ns_name(text: str) -> tuple[str, str | None]:
    namespace, sep, name = text.partition("/")
    try:
        return check_namespace(namespace), check_head_name(name) if sep else None
    except RefError as exc:
        fail(f"{exc} (expected NS or NS/NAME)")


def _line(v: RouterHeadVersion) -> str:
    return f"{v.namespace}/{v.name} v{v.version} {v.digest}"


def _show(v: RouterHeadVersion, alias: str | None) -> None:
    typer.echo(f"{v.namespace}/{v.name} v{v.version}" + (f" (@{alias})" if alias else ""))
    rows = [("digest", v.digest), ("experts", ", ".join(v.experts)),
            ("embedding", f"{v.embedding_model} ({v.dims} dims)"),
            ("ngrams", f"{v.ngram_dims} buckets" if v.ngram_dims else "none"),
            ("data digest", v.data_digest or "-"), ("source", v.source or "-"),
            ("size", human_size(v.size_bytes)), ("created", f"{v.created_at:%Y-%m-%d %H:%M:%S}Z"
                                                 + (f" by {v.created_by}" if v.created_by
                                                    else ""))]
    for key, value in rows:
        typer.echo(f"  {key + ':':<13}{value}")
    if v.cross_validation:
        typer.echo(f"  {'cross-val:':<13}{json.dumps(v.cross_validation, sort_keys=True)[:400]}")


@head_app.command("publish")
def publish(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help=(
        "The head file mol router train wrote (JSON, kind mol.router.head/v1)."))],
    head: Annotated[str, typer.Argument(metavar="NS/NAME", help=(
        "Where to publish it: a namespace and a head name (a DNS label), e.g. acme/chat."))],
    alias: Annotated[str | None, typer.Option(
        "--alias", help="Then point this alias at the version (e.g. canary or stable).")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Publish a trained head as the name's next version; prints its version and digest.

    The catalog refuses a file a router could not load (it says which rule it breaks)
    and stores its canonical JSON; publishing the same head again gives the same version.

    Example: mol catalog head publish head.json acme/chat --alias canary
    """
    namespace, name = _ns_name(head)
    if name is None:
        fail(f"{head}: name the head, NS/NAME (e.g. {head}/chat)")
    try:
        if file.stat().st_size > MAX_DOCUMENT_BYTES:
            fail(f"{file}: larger than {MAX_DOCUMENT_BYTES} bytes, the most a head may be")
        body = file.read_bytes()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}")
    with catalog(ctx) as client:
        version = client.publish_router_head(namespace, name, body)
        moved = (client.set_router_head_alias(namespace, name, alias, version.version)
                 if alias is not None else None)

    def text() -> None:
        typer.echo(f"published {_line(version)}")
        if moved is not None:
            typer.echo(f"{namespace}/{name}@{alias} -> v{moved.version}"
                       + (f" (was v{moved.previous})" if moved.previous else ""))

    emit(output, {"version": version, "alias": moved}, text)


@head_app.command("list")
def list_heads(
    ctx: typer.Context,
    where: Annotated[str, typer.Argument(metavar="NS[/NAME]", help=(
        "A namespace (its heads), or NS/NAME (that head's versions, newest first)."))],
    output: OutputOption = Output.text,
) -> None:
    """List a namespace's router heads, or one head's versions and aliases.

    Examples: mol catalog head list acme; mol catalog head list acme/chat
    """
    namespace, name = _ns_name(where)
    with catalog(ctx) as client:
        if name is None:
            heads = client.router_heads(namespace)
            emit(output, heads, lambda: print_table(
                ["NAME", "LATEST", "DIGEST", "EXPERTS", "ALIASES"],
                [[h.name, f"v{h.latest_version}", h.latest.digest[:19],
                  ",".join(h.latest.experts),
                  ",".join(f"{a}=v{n}" for a, n in sorted(h.aliases.items()))]
                 for h in heads]))
            return
        versions = client.router_head_versions(namespace, name)
        aliases = client.router_head_aliases(namespace, name)
    at: dict[int, list[str]] = {}
    for a in aliases:
        at.setdefault(a.version, []).append(a.alias)
    emit(output, {"versions": versions, "aliases": aliases}, lambda: print_table(
        ["VERSION", "DIGEST", "EXPERTS", "EMBEDDING", "DIMS", "NGRAMS", "SIZE", "ALIASES"],
        [[f"v{v.version}", v.digest[:19], ",".join(v.experts), v.embedding_model, v.dims,
          v.ngram_dims, human_size(v.size_bytes), ",".join(at.get(v.version, []))]
         for v in versions]))


@head_app.command("show")
def show(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="NS/NAME@REF", help=(
        "A head version (acme/chat@3) or alias (acme/chat@stable)."))],
    output: OutputOption = Output.text,
) -> None:
    """Show one head version: digest, experts, embedding model, lineage and the
    cross-validation report it was trained with.

    Example: mol catalog head show acme/chat@stable
    """
    parsed = _head_ref(ref)
    with catalog(ctx) as client:
        v = client.router_head(parsed.namespace, parsed.name, parsed.ref)
    emit(output, v, lambda: _show(v, parsed.alias))


@alias_app.command("set")
def alias_set(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="NS/NAME@ALIAS", help=(
        "The head and the alias to move, e.g. acme/chat@stable."))],
    version: Annotated[str, typer.Argument(metavar="VERSION", help="3 or v3.")],
    output: OutputOption = Output.text,
) -> None:
    """Point a head's alias at a version; routers that follow the alias load it.

    Example: mol catalog head alias set acme/chat@stable 3
    """
    parsed = _head_ref(ref, alias=True)
    number = parse_version(version)
    assert parsed.alias is not None
    with catalog(ctx) as client:
        moved = client.set_router_head_alias(parsed.namespace, parsed.name, parsed.alias,
                                             number)
    emit(output, moved, lambda: typer.echo(
        f"{parsed} -> v{moved.version}"
        + (f" (was v{moved.previous})" if moved.previous not in (None, moved.version)
           else "")))


@alias_app.command("rm")
def alias_rm(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="NS/NAME@ALIAS", help=(
        "The head and the alias to remove, e.g. acme/chat@canary."))],
    output: OutputOption = Output.text,
) -> None:
    """Remove a head's alias (a router_head.alias.deleted event tells the routers).

    Example: mol catalog head alias rm acme/chat@canary
    """
    parsed = _head_ref(ref, alias=True)
    assert parsed.alias is not None
    with catalog(ctx) as client:
        gone = client.delete_router_head_alias(parsed.namespace, parsed.name, parsed.alias)
    emit(output, gone, lambda: typer.echo(f"removed {parsed} (was v{gone.version})"))
