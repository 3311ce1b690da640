"""``mol catalog protected`` and ``mol catalog webhook``: a namespace's protected aliases
and the webhooks that receive its events."""

from __future__ import annotations

from typing import Annotated

import typer

from mol_catalog.cli.common import Output, OutputOption, catalog, emit, fail, print_table
from mol_platform.contract.catalog_models import Webhook

EVENT_KINDS = ("version.published", "version.yanked", "version.deleted", "alias.moved")

protected_app = typer.Typer(
    help="Protected aliases of a namespace: moving one to a yanked version, to a "
    "version incompatible with a serving profile it is served under, to an unsigned one "
    "where signatures are required, or to one without a required eval report, is refused "
    "(an admin may --force). Until set, only 'stable' is protected.",
    no_args_is_help=True, rich_markup_mode=None)
webhook_app = typer.Typer(
    help="Webhooks: POST a signed JSON body to a URL on a namespace's events (admin).",
    no_args_is_help=True, rich_markup_mode=None)


@protected_app.command("list")
def protected_list(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    output: OutputOption = Output.text,
) -> None:
    """Show the namespace's protected aliases.

    Example: mol catalog protected list acme
    """
    with catalog(ctx) as client:
        record = client.protected_aliases(namespace)
    emit(output, record, lambda: typer.echo(
        (" ".join(record.protected_aliases) or "(none)")
        + (" (default)" if record.default else "")
        + (f"; evals required: {' '.join(record.required_evals)}"
           if record.required_evals else "")))


@protected_app.command("set")
def protected_set(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    aliases: Annotated[list[str] | None, typer.Argument(
        metavar="ALIAS...", help="The aliases to protect (replaces the list).")] = None,
    none: Annotated[bool, typer.Option("--none", help="Protect no alias.")] = False,
    require_eval: Annotated[list[str] | None, typer.Option(
        "--require-eval", metavar="SUITE", help="An eval suite every version a protected "
        "alias moves to must have a report of; repeat for more (replaces the list).")]
    = None,
    output: OutputOption = Output.text,
) -> None:
    """Replace the namespace's protected aliases and required eval suites (admin).

    Example: mol catalog protected set acme stable prod --require-eval humaneval
    """
    if not aliases and not none:
        fail("name the aliases to protect, or pass --none to protect none")
    if aliases and none:
        fail("--none takes no aliases")
    with catalog(ctx) as client:
        record = client.set_protected_aliases(namespace, aliases or [], require_eval or [])
    emit(output, record, lambda: typer.echo(
        f"{namespace}: protected " + (" ".join(record.protected_aliases) or "(none)")
        + (f"; evals required: {' '.join(record.required_evals)}"
           if record.required_evals else "")))


@webhook_app.command("add")
def webhook_add(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    url: Annotated[str, typer.Option(help="http:// or https:// URL (no user:password@).")],
    secret: Annotated[str, typer.Option(
        envvar="MOL_CATALOG_WEBHOOK_SECRET", show_envvar=True,
        help="16-256 printable characters that sign each delivery (e.g. openssl rand -hex "
        "32); never shown again.")],
    event: Annotated[list[str] | None, typer.Option(
        "--event", metavar="KIND", help="An event kind: " + ", ".join(EVENT_KINDS)
        + "; repeat for more (default: all).")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Register a webhook for the namespace's events from now on.

    Example: MOL_CATALOG_WEBHOOK_SECRET=$(openssl rand -hex 32) mol catalog webhook add acme
    --url https://ci.example.com/hooks/mol --event alias.moved
    """
    kinds = event or list(EVENT_KINDS)
    for kind in kinds:
        if kind not in EVENT_KINDS:
            fail(f"unknown event kind {kind!r}: use {', '.join(EVENT_KINDS)}")
    with catalog(ctx) as client:
        hook = client.create_webhook(namespace, url, secret, kinds)
    emit(output, hook, lambda: typer.echo(f"webhook {hook.id}: {hook.url} "
                                          f"({', '.join(hook.events)})"))


def _rows(items: list[Webhook]) -> list[list[object]]:
    return [[h.id, h.url, ",".join(h.events), h.created_by, h.created_at] for h in items]


@webhook_app.command("list")
def webhook_list(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    output: OutputOption = Output.text,
) -> None:
    """List the namespace's webhooks (secrets are never shown).

    Example: mol catalog webhook list acme
    """
    with catalog(ctx) as client:
        items = client.list_webhooks(namespace)
    emit(output, items, lambda: print_table(["ID", "URL", "EVENTS", "CREATED_BY", "CREATED"],
                                            _rows(items)))


@webhook_app.command("delete")
def webhook_delete(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    webhook_id: Annotated[int, typer.Argument(metavar="ID", min=1)],
) -> None:
    """Delete a webhook; its pending deliveries are dropped.

    Example: mol catalog webhook delete acme 3
    """
    with catalog(ctx) as client:
        client.delete_webhook(namespace, webhook_id)
    typer.echo(f"deleted webhook {webhook_id}")


@webhook_app.command("deliveries")
def webhook_deliveries(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    webhook_id: Annotated[int, typer.Argument(metavar="ID", min=1)],
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    output: OutputOption = Output.text,
) -> None:
    """Show a webhook's recent deliveries: status, attempts, the last error.

    Example: mol catalog webhook deliveries acme 3
    """
    with catalog(ctx) as client:
        items = client.webhook_deliveries(namespace, webhook_id, limit)
    emit(output, items, lambda: print_table(
        ["DELIVERY", "EVENT", "STATUS", "ATTEMPTS", "LAST_STATUS", "NEXT_ATTEMPT", "ERROR"],
        [[d.delivery_id, d.event_id, d.status, d.attempts, d.last_status, d.next_attempt_at,
          d.last_error] for d in items]))


def register_namespaces(app: typer.Typer) -> None:
    app.add_typer(protected_app, name="protected")
    app.add_typer(webhook_app, name="webhook")
