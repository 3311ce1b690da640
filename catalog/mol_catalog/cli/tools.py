"""``mol catalog tools publish|list|show|approve``: tools proposed from sandbox sessions.

A proposal is one Python file defining the function and a JSON schema of its arguments.
The catalog stores it as an immutable version with the automatic checks beside it
(advice for the reviewer); nothing offers it until an admin approves a version, which
moves the protected ``approved`` alias.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mol_catalog.cli.common import Output, OutputOption, catalog, emit, fail, print_table
from mol_platform.contract import tools as tc
from mol_platform.contract.refs import RefError, check_namespace, parse_version
from mol_platform.contract.tool_answers import ToolVersion

tools_app = typer.Typer(
    help="Tools written in sandbox sessions: propose them, review their checks, approve "
    "one version (the protected 'approved' alias; admin).",
    no_args_is_help=True, rich_markup_mode=None)


def _ns_name(text: str) -> tuple[str, str | None]:
    namespace, sep, name = text.partition("/")
    try:
        return check_namespace(namespace), tc.check_tool_name(name) if sep else None
    except (RefError, tc.ToolError) as exc:
        fail(f"{exc} (expected NS or NS/NAME)")


def _ref(text: str) -> tuple[str, str, int | None]:
    """``NS/NAME`` or ``NS/NAME@VERSION``."""
    where, sep, version = text.partition("@")
    namespace, name = _ns_name(where)
    if name is None:
        fail(f"{text}: name the tool, NS/NAME[@VERSION] (e.g. acme/hypot@2)")
    try:
        return namespace, name, parse_version(version) if sep else None
    except RefError as exc:
        fail(str(exc))


def _read(path: Path, what: str, limit: int) -> str:
    try:
        if path.stat().st_size > limit:
            fail(f"{path}: larger than {limit} bytes, the most a {what} may be")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")


def _mark(ok: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "not run"}[ok]


def _show(v: ToolVersion) -> None:
    typer.echo(f"{v.namespace}/{v.name} v{v.version}" + (" (approved)" if v.approved else ""))
    lineage = ", ".join(f"{k}={val}" for k, val in v.lineage.model_dump().items() if val)
    for key, value in (("digest", v.digest), ("signed by", v.signed_by or "unsigned"),
                       ("lineage", lineage or "-"),
                       ("created", f"{v.created_at:%Y-%m-%d %H:%M:%S}Z"
                        + (f" by {v.created_by}" if v.created_by else "")),
                       ("description", v.description or "-")):
        typer.echo(f"  {key + ':':<13}{value}")
    typer.echo("  checks (advice):")
    for c in v.checks:
        typer.echo(f"    {_mark(c.ok):<8} {c.name}: {c.detail}")
    typer.echo("  parameters: " + json.dumps(v.parameters, sort_keys=True))
    typer.echo("  source:")
    for line in v.source.splitlines():
        typer.echo(f"    {line}")


@tools_app.command("publish")
def publish(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE.py", help=(
        "Python source defining the function (named as the tool)."))],
    tool: Annotated[str, typer.Argument(metavar="NS/NAME", help=(
        "Namespace and tool name (the function's name, a lowercase identifier)."))],
    parameters: Annotated[Path, typer.Option(
        "--parameters", metavar="SCHEMA.json",
        help="JSON schema of the arguments (an object schema).")],
    description: Annotated[str | None, typer.Option(
        "--description", help="What the model is told; default: the docstring.")] = None,
    example: Annotated[Path | None, typer.Option(
        "--example", metavar="ARGS.json", help="Arguments of one example call.")] = None,
    session: Annotated[str | None, typer.Option("--session", help="Session id (lineage).")
                       ] = None,
    deployment: Annotated[str | None, typer.Option("--deployment")] = None,
    expert: Annotated[str | None, typer.Option("--expert")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant")] = None,
    signature: Annotated[Path | None, typer.Option(
        "--signature", metavar="FILE",
        help=f"A model-signing signature of the document as {tc.DOCUMENT_FILE}.")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Propose a tool; prints its version, digest and the automatic checks.

    Example: mol catalog tools publish hypot.py acme/hypot --parameters hypot.schema.json
    --session s-1f2e --deployment chat --expert agent
    """
    namespace, name = _ns_name(tool)
    if name is None:
        fail(f"{tool}: name the tool, NS/NAME (e.g. {tool}/hypot)")
    source = _read(file, "tool source", tc.MAX_SOURCE_CHARS * 4)
    schema: Any = _load(_read(parameters, "schema", tc.MAX_SCHEMA_BYTES), parameters)
    args: Any = _load(_read(example, "example", tc.MAX_SCHEMA_BYTES), example) if example \
        else None
    sig = _read(signature, "signature", 64 << 10) if signature else None
    with catalog(ctx) as client:
        v = client.publish_tool(namespace, name, source, schema, description=description,
                                example=args, signature=sig, lineage={
                                    "session_id": session, "deployment": deployment,
                                    "expert": expert, "tenant": tenant})

    def text() -> None:
        typer.echo(f"proposed {v.namespace}/{v.name} v{v.version} {v.digest}")
        for c in v.checks:
            typer.echo(f"  {_mark(c.ok):<8} {c.name}: {c.detail}")
        typer.echo(f"approve it (admin): mol catalog tools approve "
                   f"{v.namespace}/{v.name}@{v.version}")

    emit(output, v, text)


def _load(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(f"{path}: not JSON: {exc}")


@tools_app.command("list")
def list_tools(
    ctx: typer.Context,
    where: Annotated[str, typer.Argument(metavar="NS[/NAME]", help=(
        "A namespace (its tools), or NS/NAME (that tool's versions, newest first)."))],
    output: OutputOption = Output.text,
) -> None:
    """List a namespace's tools (latest version, failed checks, approved version), or
    one tool's versions.

    Examples: mol catalog tools list acme; mol catalog tools list acme/hypot
    """
    namespace, name = _ns_name(where)

    def failed(v: ToolVersion) -> str:
        return ",".join(c.name for c in v.checks if c.ok is False) or "-"

    with catalog(ctx) as client:
        if name is None:
            items = client.tools(namespace)
            emit(output, items, lambda: print_table(
                ["NAME", "LATEST", "APPROVED", "FAILED CHECKS", "SESSION"],
                [[t.name, f"v{t.latest_version}",
                  f"v{t.approved_version}" if t.approved_version else "-",
                  failed(t.latest), t.latest.lineage.session_id or "-"] for t in items]))
            return
        versions = client.tool_versions(namespace, name)
    emit(output, versions, lambda: print_table(
        ["VERSION", "DIGEST", "APPROVED", "SIGNED", "FAILED CHECKS", "SESSION"],
        [[f"v{v.version}", v.digest[:19], "yes" if v.approved else "", "yes" if v.signed
          else "", failed(v), v.lineage.session_id or "-"] for v in versions]))


@tools_app.command("show")
def show(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="NS/NAME[@VERSION]", help=(
        "A tool version (acme/hypot@2); without a version, the latest."))],
    output: OutputOption = Output.text,
) -> None:
    """Show one version: source, schema, checks, signature and lineage.

    Example: mol catalog tools show acme/hypot@2
    """
    namespace, name, number = _ref(ref)
    with catalog(ctx) as client:
        v = (client.tool(namespace, name, number) if number is not None
             else client.tool_versions(namespace, name)[0])
    emit(output, v, lambda: _show(v))


@tools_app.command("approve")
def approve(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="NS/NAME@VERSION", help=(
        "The version to approve, e.g. acme/hypot@2."))],
    withdraw: Annotated[bool, typer.Option(
        "--withdraw", help="Withdraw the approval instead (NS/NAME).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Approve past the namespace's refusals (on record).")] = False,
    output: OutputOption = Output.text,
) -> None:
    """Approve a tool version: move its protected 'approved' alias (needs 'admin').
    Routers and sandboxes offer only approved tools.

    Examples: mol catalog tools approve acme/hypot@2;
    mol catalog tools approve acme/hypot --withdraw
    """
    namespace, name, number = _ref(ref)
    if number is None and not withdraw:
        fail(f"{ref}: name the version to approve, NS/NAME@VERSION")
    with catalog(ctx) as client:
        moved = (client.withdraw_tool(namespace, name) if withdraw
                 else client.approve_tool(namespace, name, number or 0, force=force))
    emit(output, moved, lambda: typer.echo(
        f"{namespace}/{name}@approved " + (
            f"withdrawn (was v{moved.previous})" if moved.version is None
            else f"-> v{moved.version}" + (f" (was v{moved.previous})"
                                           if moved.previous not in (None, moved.version)
                                           else ""))))
