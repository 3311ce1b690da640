"""``mol catalog`` verbs that move versions out: pull, delete, and the events feed."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
import yaml

from mol_catalog.cli.common import Output, OutputOption, catalog, emit, fail, plain
from mol_platform.apps.pull import plan, pull, total_bytes
from mol_platform.contract.catalog_models import Event, EventPage
from mol_platform.contract.refs import AdapterRef, RefError

# Seconds one long-poll of the feed waits on the catalog (its most is 30).
FOLLOW_WAIT = 25.0


def pull_verb(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(
        metavar="REF", help="namespace/name@ref, ref = alias | latest | vN | sha256:<hex>.")],
    local_dir: Annotated[Path | None, typer.Option(
        "--local-dir", metavar="DIR",
        help="Folder to write the PEFT files into (created if needed; other files in it "
        "stay). Default: ./NAME.")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Download a version's files into a PEFT folder (adapter_config.json,
    adapter_model.safetensors, ...), each checked against its sha256 digest.

    Files already there with the right digest are kept, so pulling an unchanged version
    again downloads nothing. A download goes to a temporary name and is renamed only
    once its digest matches. Prints the folder (progress goes to stderr on a terminal).

    Example: mol catalog pull acme/coding@stable --local-dir ./coding
    """
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    try:
        parsed = AdapterRef.parse(ref)
    except RefError as exc:
        fail(str(exc))
    folder = local_dir if local_dir is not None else Path(parsed.name)
    console = Console(stderr=True)
    with catalog(ctx) as client:
        planned = plan(client, ref)
        with Progress(TextColumn("pulling"), BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), console=console, transient=True,
                      disable=not console.is_terminal) as bar:
            task = bar.add_task("pull", total=total_bytes(planned[1]))
            result = pull(client, ref, folder, planned=planned,
                          progress=lambda n: bar.advance(task, n))

    def text() -> None:
        typer.echo(f"{result.adapter} v{result.version} ({result.digest}): "
                   f"{len(result.downloaded)} downloaded, {len(result.unchanged)} unchanged",
                   err=True)
        typer.echo(str(result.folder))

    emit(output, result.as_dict(), text)


def delete_verb(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(
        metavar="REF", help="namespace/name@vN or namespace/name@sha256:<hex>.")],
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Do not ask; required when stdin is not a terminal.")] = False,
    output: OutputOption = Output.text,
) -> None:
    """Delete one version for good (admin), for content that must go.

    Unlike yank, the version no longer resolves at all; aliases pointing at it are
    removed (the alias history records it), a version.deleted event is recorded, and its
    blobs, when no other version uses them, are deleted by the next gc. The version
    number is never reused.

    Example: mol catalog delete acme/coding@v2 --yes
    """
    try:
        parsed = AdapterRef.parse(ref)
    except RefError as exc:
        fail(str(exc))
    if not parsed.immutable:
        fail(f"{ref}: delete takes an immutable reference (namespace/name@vN or @sha256:...)")
    if not yes:
        if not sys.stdin.isatty():
            fail(f"deleting {ref} cannot be undone: pass --yes to confirm", code=2)
        typer.confirm(f"Delete {ref} for good?", abort=True, err=True)
    with catalog(ctx) as client:
        version = parsed.version
        if version is None:
            version = client.resolve(str(parsed)).version
        result = client.delete_version(parsed.adapter, version)

    def text() -> None:
        removed = result.aliases_removed
        typer.echo(f"deleted {parsed.adapter} v{version} ({result.digest})"
                   + (f"; aliases removed: {', '.join(removed)}" if removed else ""))

    emit(output, result, text)


def _event_line(e: Event) -> str:
    what = e.adapter or ""
    if e.version is not None:
        what += f" v{e.version}"
    if e.alias:
        what += f" @{e.alias}"
    return f"{e.id}  {e.type}  {what.strip() or '-'}  {e.created_at}"


def _print_event(e: Event, output: Output) -> None:
    data = plain(e)
    if output is Output.json:
        typer.echo(json.dumps(data, sort_keys=True))
    elif output is Output.yaml:
        typer.echo("---\n" + yaml.safe_dump(data, sort_keys=True, allow_unicode=True)
                   .rstrip("\n"))
    else:
        typer.echo(_event_line(e))


def _print_page(page: EventPage) -> None:
    for e in page.items:
        typer.echo(_event_line(e))


def events_verb(
    ctx: typer.Context,
    after: Annotated[int, typer.Option(min=0, help="Start after this event id.")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Events per page.")] = 100,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep printing new events as they happen (Ctrl-C stops).")]
    = False,
    output: OutputOption = Output.text,
) -> None:
    """Print the change feed (publishes, alias moves, yanks, deletes, profiles, bases).

    One page, oldest first; with --follow every event after it too, as it happens (json:
    one object per line; yaml: one document each).

    Example: mol catalog events --follow -o json
    """
    with catalog(ctx) as client:
        page = client.events(after=after, limit=limit)
        if not follow:
            emit(output, page, lambda: _print_page(page))
            return
        with _interrupt_flag() as interrupted:
            try:
                while not interrupted:
                    for e in page.items:
                        _print_event(e, output)
                    after = page.last
                    page = client.events(after=after, limit=limit, wait=FOLLOW_WAIT)
            except KeyboardInterrupt:
                pass
        raise typer.Exit(0)


class _Flag:
    """Set once; false until then (``while not flag``)."""

    def __init__(self) -> None:
        self.set = False

    def __bool__(self) -> bool:
        return self.set


@contextlib.contextmanager
def _interrupt_flag() -> Iterator[_Flag]:
    """Ctrl-C raises KeyboardInterrupt as usual and also sets the flag: CPython drops an
    exception raised while a finaliser runs ("Exception ignored in ..."), and then the
    loop still stops once the long-poll in hand returns."""
    flag = _Flag()

    def on_sigint(_signum: int, _frame: object) -> None:
        flag.set = True
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: Ctrl-C is not ours to take
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def register_versions(app: typer.Typer) -> None:
    """Mount pull, delete and events on the ``mol catalog`` group."""
    app.command("pull")(pull_verb)
    app.command("delete")(delete_verb)
    app.command("events")(events_verb)

