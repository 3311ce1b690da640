"""``mol catalog alias set|history``: move an alias and show where it pointed.

The reference names the alias (``NS/NAME@ALIAS``), so the alias is never an argument of
its own; ``alias set demo/chat stable 1`` is the natural first guess, and instead of
click's "unexpected extra argument" it gets the form to type, spelled out.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mol_catalog.cli.common import (
    Output,
    OutputOption,
    catalog,
    emit,
    fail,
    parse_version,
    print_reasons,
    print_table,
)
from mol_platform.contract.refs import AdapterRef

alias_app = typer.Typer(help="Move aliases (stable, candidate, ...) and show their history.",
                        no_args_is_help=True, rich_markup_mode=None)
SET_FORM = "NS/NAME@ALIAS VERSION"


def parse_alias_ref(ref: str, *, version: str | None = None) -> AdapterRef:
    """``ref`` as an alias reference; a bare ``NS/NAME`` is told the ``@ALIAS`` form
    (with ``version`` when given, the whole command to type)."""
    if "@" not in ref and "/" in ref:
        example = f"{ref}@stable" + (f" {version}" if version is not None else "")
        fail(f"{ref}: name the alias in the reference, {SET_FORM if version else 'NS/NAME@ALIAS'}"
             f", e.g. {example}")
    try:
        return AdapterRef.parse(ref)
    except ValueError as exc:
        fail(str(exc))


# Extra words are taken (not click's bare "unexpected extra argument") to name the form.
@alias_app.command("set", context_settings={"allow_extra_args": True})
def alias_set(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(
        metavar="REF", help="namespace/name@alias, e.g. acme/coding@stable.")],
    version: Annotated[str, typer.Argument(
        metavar="VERSION", help="The version to point at: 3 or v3.")],
    force: Annotated[bool, typer.Option(
        "--force", help="Admin: move a protected alias even when refused (recorded in the "
        "alias history and the event feed).")] = False,
    output: OutputOption = Output.text,
) -> None:
    """Point an alias at a version (the move is recorded in the alias history).

    A protected alias (see 'mol catalog protected') does not move to a yanked version or
    to one incompatible with a serving profile it is served under: the reasons are
    printed and the exit code is 1.

    Example: mol catalog alias set acme/coding@stable v4
    """
    extra = list(ctx.args)
    if extra:
        words = [ref, version, *extra]
        hint = (f"; did you mean: mol catalog alias set {ref}@{version} {extra[0]}"
                if len(extra) == 1 and "@" not in ref else "")
        fail(f"alias set takes {SET_FORM} (the alias is part of the reference), got "
             f"{len(words)} arguments: {' '.join(words)}{hint}", code=2)
    parsed = parse_alias_ref(ref, version=version)
    if parsed.immutable:
        fail(f"{ref}: expected namespace/name@alias, got a version or digest")
    number = parse_version(version)
    with catalog(ctx) as client:
        result = client.set_alias(parsed.adapter, parsed.ref, number, force=force)
    was = f" (was v{result.previous})" if result.previous is not None else ""
    if result.forced:
        typer.echo(f"forced past {len(result.overridden or [])} refusal reason(s):", err=True)
        print_reasons(result.overridden or [], err=True)
    emit(output, result, lambda: typer.echo(
        f"{parsed.adapter}@{parsed.ref} -> v{result.version}{was}"))


@alias_app.command("history")
def alias_history(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="REF", help="namespace/name@alias.")],
    output: OutputOption = Output.text,
) -> None:
    """Show where an alias pointed over time, newest first.

    Example: mol catalog alias history acme/coding@stable
    """
    parsed = parse_alias_ref(ref)
    with catalog(ctx) as client:
        items = client.alias_history(parsed.adapter, parsed.ref)
    emit(output, items, lambda: print_table(
        ["VERSION", "PREVIOUS", "CHANGED_BY", "CHANGED_AT", "FORCED"], [
            [f"v{i.version}" if i.version else "(removed)",
             f"v{i.previous}" if i.previous else "-", i.changed_by, i.changed_at,
             "; ".join(r.code for r in i.overridden or []) if i.forced else ""]
            for i in items]))
